//===- HostCommunicator.cpp - ranks as threads of one process -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/HostCommunicator.h"

#include "partita/runtime/BlockCopy.h"

#include "partita/runtime/CollectiveCheck.h"

#include "partita/runtime/Float16.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <type_traits>

using namespace partita::runtime;
namespace program = partita::program;
using Clock = std::chrono::steady_clock;

Communicator::~Communicator() = default;

Status Communicator::endRun() { return Status::ok(); }

namespace {

/// The tags of a dispatch's rows and of their return: negative, so no
/// program's transfer (whose tags are not) can take them.
constexpr int64_t kDispatchTag = -1;
constexpr int64_t kDispatchReturnTag = -2;

/// What a dispatch or its return knows of its rows: the bytes of one, the
/// shape of `count` of them, and which of the sending side's rows go to
/// each member, in row order.
struct DispatchRows {
  size_t rowBytes = 0;
  std::vector<int64_t> rowShape;
  std::vector<std::vector<int64_t>> toMember;

  DispatchRows(const Tensor &sent, const Tensor &destinations, size_t n)
      : rowShape(sent.shape.begin() + 1, sent.shape.end()), toMember(n) {
    rowBytes = dtypeSize(sent.dtype);
    for (int64_t d : rowShape)
      rowBytes *= size_t(d);
    const int64_t *dest = destinations.as<int64_t>();
    for (int64_t i = 0; i < sent.shape[0]; ++i)
      if (dest[i] >= 0 && dest[i] < int64_t(n))
        toMember[size_t(dest[i])].push_back(i);
  }
  Tensor rows(void *data, DType dtype, int64_t count) const {
    std::vector<int64_t> shape{count};
    shape.insert(shape.end(), rowShape.begin(), rowShape.end());
    return Tensor{data, dtype, shape};
  }
  char *row(const Tensor &tensor, int64_t i) const {
    return static_cast<char *>(tensor.data) + size_t(i) * rowBytes;
  }
};

/// What a member checks alone before a dispatch (or its return, by
/// `kind`): the collective's shapes and memory, and its destinations and
/// counts; `index` becomes its group position.
Status checkDispatch(CollectiveKind kind, const Communicator &communicator,
                     const Tensor &in, const Tensor &out,
                     const Tensor &destinations, const Tensor &counts,
                     const Group &group, size_t &index) {
  CollectiveCall call;
  call.kind = kind;
  PARTITA_RETURN_IF_ERROR(checkCollective(call, in, out, group,
                                          communicator.rank(),
                                          communicator.worldSize(), index));
  return checkDispatchBuffers(call, in, out, destinations, counts, group,
                              communicator.rank());
}

} // namespace

Status Communicator::dispatch(const Tensor &, const Tensor &, const Tensor &,
                              const Tensor &, const Group &) {
  return Status::error("dispatch: this communicator does not move rows "
                       "(CUDA ranks do not dispatch)");
}

Status Communicator::dispatchReturn(const Tensor &, const Tensor &,
                                    const Tensor &, const Tensor &,
                                    const Group &) {
  return Status::error("dispatch_return: this communicator does not move "
                       "rows (CUDA ranks do not dispatch)");
}

Status partita::runtime::dispatchBySendRecv(
    Communicator &communicator, const Tensor &in, const Tensor &destinations,
    const Tensor &out, const Tensor &counts, const Group &group) {
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkDispatch(CollectiveKind::Dispatch, communicator,
                                        in, out, destinations, counts, group,
                                        index));
  size_t n = group.size();
  DispatchRows rows(in, destinations, n);
  std::vector<int64_t> sendCounts(n);
  for (size_t j = 0; j < n; ++j)
    sendCounts[j] = int64_t(rows.toMember[j].size());
  PARTITA_RETURN_IF_ERROR(communicator.allToAll(
      Tensor{sendCounts.data(), program::I64, {int64_t(n)}}, counts, group, 0,
      0));
  const int64_t *received = counts.as<int64_t>();
  int64_t total = 0;
  for (size_t j = 0; j < n; ++j)
    total += received[j];
  if (total > out.shape[0]) {
    std::string why = "dispatch over group " + groupString(group) +
                      " on rank " + std::to_string(communicator.rank()) + ": " +
                      std::to_string(total) + " rows arrive, more than the " +
                      std::to_string(out.shape[0]) + " its result holds";
    communicator.abort(why);
    return Status::error(why);
  }
  std::vector<char> packed;
  for (size_t j = 0; j < n; ++j) {
    if (j == index || rows.toMember[j].empty())
      continue;
    packed.resize(rows.toMember[j].size() * rows.rowBytes);
    for (size_t k = 0; k < rows.toMember[j].size(); ++k)
      std::memcpy(packed.data() + k * rows.rowBytes,
                  rows.row(in, rows.toMember[j][k]), rows.rowBytes);
    PARTITA_RETURN_IF_ERROR(
        communicator.send(rows.rows(packed.data(), in.dtype, sendCounts[j]),
                          group[j], kDispatchTag));
  }
  int64_t offset = 0;
  for (size_t j = 0; j < n; ++j) {
    if (j == index) {
      for (int64_t i : rows.toMember[j])
        std::memcpy(rows.row(out, offset++), rows.row(in, i), rows.rowBytes);
      continue;
    }
    if (received[j] > 0)
      PARTITA_RETURN_IF_ERROR(communicator.recv(
          rows.rows(rows.row(out, offset), out.dtype, received[j]), group[j],
          kDispatchTag));
    offset += received[j];
  }
  std::memset(rows.row(out, offset), 0,
              size_t(out.shape[0] - offset) * rows.rowBytes);
  return Status::ok();
}

Status partita::runtime::dispatchReturnBySendRecv(
    Communicator &communicator, const Tensor &in, const Tensor &counts,
    const Tensor &destinations, const Tensor &out, const Group &group) {
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkDispatch(CollectiveKind::DispatchReturn,
                                        communicator, in, out, destinations,
                                        counts, group, index));
  size_t n = group.size();
  DispatchRows rows(out, destinations, n);
  const int64_t *back = counts.as<int64_t>();
  int64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    if (back[j] < 0)
      return Status::error("dispatch_return on rank " +
                           std::to_string(communicator.rank()) + ": count " +
                           std::to_string(back[j]) + " for member " +
                           std::to_string(j) + " is negative");
    total += back[j];
  }
  if (total > in.shape[0])
    return Status::error(
        "dispatch_return on rank " + std::to_string(communicator.rank()) +
        ": its counts name " + std::to_string(total) +
        " rows, its operand holds " + std::to_string(in.shape[0]));
  if (back[index] != int64_t(rows.toMember[index].size()))
    return Status::error(
        "dispatch_return on rank " + std::to_string(communicator.rank()) +
        ": it sent itself " + std::to_string(rows.toMember[index].size()) +
        " rows, its counts name " + std::to_string(back[index]));
  int64_t offset = 0, own = 0;
  for (size_t j = 0; j < n; ++j) {
    if (j == index)
      own = offset;
    else if (back[j] > 0)
      PARTITA_RETURN_IF_ERROR(
          communicator.send(rows.rows(rows.row(in, offset), in.dtype, back[j]),
                            group[j], kDispatchReturnTag));
    offset += back[j];
  }
  std::memset(out.data, 0, out.byteSize());
  std::vector<char> received;
  for (size_t j = 0; j < n; ++j) {
    const std::vector<int64_t> &sent = rows.toMember[j];
    if (sent.empty())
      continue;
    const char *from = rows.row(in, own);
    if (j != index) {
      received.resize(sent.size() * rows.rowBytes);
      PARTITA_RETURN_IF_ERROR(communicator.recv(
          rows.rows(received.data(), out.dtype, int64_t(sent.size())), group[j],
          kDispatchReturnTag));
      from = received.data();
    }
    for (size_t k = 0; k < sent.size(); ++k)
      std::memcpy(rows.row(out, sent[k]), from + k * rows.rowBytes,
                  rows.rowBytes);
  }
  return Status::ok();
}

namespace {

enum class Kind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  CollectivePermute,
  Barrier
};

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::AllReduce:
    return "all_reduce";
  case Kind::AllGather:
    return "all_gather";
  case Kind::ReduceScatter:
    return "reduce_scatter";
  case Kind::AllToAll:
    return "all_to_all";
  case Kind::CollectivePermute:
    return "collective_permute";
  case Kind::Barrier:
    return "barrier";
  }
  return "?";
}

/// The shared checks' name for a collective (not a barrier).
CollectiveKind collectiveKind(Kind kind) {
  switch (kind) {
  case Kind::AllGather:
    return CollectiveKind::AllGather;
  case Kind::ReduceScatter:
    return CollectiveKind::ReduceScatter;
  case Kind::AllToAll:
    return CollectiveKind::AllToAll;
  case Kind::CollectivePermute:
    return CollectiveKind::CollectivePermute;
  case Kind::AllReduce:
  case Kind::Barrier:
    break;
  }
  return CollectiveKind::AllReduce;
}

std::string durationString(std::chrono::milliseconds timeout) {
  if (timeout.count() % 1000 == 0)
    return std::to_string(timeout.count() / 1000) + " s";
  return std::to_string(timeout.count()) + " ms";
}

/// What one member contributes to one collective: enough to check that all
/// members make the same call, and its input for the others to read.
struct Post {
  Kind kind = Kind::Barrier;
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> inShape, outShape;
  Reduction reduction = Reduction::Sum;
  int64_t dim = 0, concatDim = 0, shift = 0;
  /// Valid until every member has left the step.
  const void *in = nullptr;

  bool sameCall(const Post &other) const {
    return kind == other.kind && dtype == other.dtype &&
           inShape == other.inShape && outShape == other.outShape &&
           reduction == other.reduction && dim == other.dim &&
           concatDim == other.concatDim && shift == other.shift;
  }

  std::string describe() const {
    std::string text = kindName(kind);
    switch (kind) {
    case Kind::AllReduce:
      text += "(" + reductionName(reduction) + ")";
      break;
    case Kind::AllGather:
      text += "(dim " + std::to_string(dim) + ")";
      break;
    case Kind::ReduceScatter:
      text +=
          "(" + reductionName(reduction) + ", dim " + std::to_string(dim) + ")";
      break;
    case Kind::AllToAll:
      text += "(split " + std::to_string(dim) + ", concat " +
              std::to_string(concatDim) + ")";
      break;
    case Kind::CollectivePermute:
      text += "(shift " + std::to_string(shift) + ")";
      break;
    case Kind::Barrier:
      return text;
    }
    return text + " " + dtypeName(dtype) + " " + shapeString(inShape) + " -> " +
           shapeString(outShape);
  }
};

/// One collective call of a group: the members' posts, by group index.
struct Step {
  std::vector<std::optional<Post>> posts;
  size_t arrived = 0;
  size_t departed = 0;
};

struct GroupState {
  /// The number of calls each member (by group index) has made.
  std::vector<uint64_t> calls;
  std::map<uint64_t, std::shared_ptr<Step>> steps;
};

struct Message {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

template <typename T> struct Plain {
  using Acc = T;
  static T load(T value) { return value; }
  static T store(T value) { return value; }
};
struct F16 {
  using Acc = float;
  static float load(uint16_t bits) { return f16ToFloat(bits); }
  static uint16_t store(float value) { return floatToF16(value); }
};
struct BF16 {
  using Acc = float;
  static float load(uint16_t bits) { return bf16ToFloat(bits); }
  static uint16_t store(float value) { return floatToBf16(value); }
};
template <typename T> struct Integer {
  using Acc = int64_t;
  static int64_t load(T value) { return value; }
  static T store(int64_t value) { return T(value); }
};
struct Bool {
  using Acc = int64_t;
  static int64_t load(uint8_t value) { return value != 0; }
  static uint8_t store(int64_t value) { return value != 0; }
};

template <typename Acc> Acc combine(Acc a, Acc b, Reduction reduction) {
  switch (reduction) {
  case Reduction::Sum:
    if constexpr (std::is_integral_v<Acc>)
      return Acc(uint64_t(a) + uint64_t(b)); // Integer sums wrap.
    else
      return a + b;
  case Reduction::Max:
    return b > a ? b : a;
  case Reduction::Min:
    return b < a ? b : a;
  }
  return a;
}

/// dst[i] = reduce over sources s (in order) of s[offset + i], accumulated in
/// Acc so the order, and so the bits, are the same on every member.
template <typename T, typename Conv>
void reduceTyped(const std::vector<const void *> &sources, size_t offset,
                 void *dst, size_t count, Reduction reduction) {
  using Acc = typename Conv::Acc;
  constexpr size_t kChunk = 1024;
  Acc acc[kChunk];
  T *out = static_cast<T *>(dst);
  for (size_t begin = 0; begin < count; begin += kChunk) {
    size_t n = std::min(kChunk, count - begin);
    const T *first = static_cast<const T *>(sources[0]) + offset + begin;
    for (size_t i = 0; i < n; ++i)
      acc[i] = Conv::load(first[i]);
    for (size_t s = 1; s < sources.size(); ++s) {
      const T *next = static_cast<const T *>(sources[s]) + offset + begin;
      for (size_t i = 0; i < n; ++i)
        acc[i] = combine<Acc>(acc[i], Conv::load(next[i]), reduction);
    }
    for (size_t i = 0; i < n; ++i)
      out[begin + i] = Conv::store(acc[i]);
  }
}

void reduce(DType dtype, const std::vector<const void *> &sources,
            size_t offset, void *dst, size_t count, Reduction reduction) {
  switch (dtype) {
  case program::F32:
    return reduceTyped<float, Plain<float>>(sources, offset, dst, count,
                                            reduction);
  case program::F16:
    return reduceTyped<uint16_t, F16>(sources, offset, dst, count, reduction);
  case program::BF16:
    return reduceTyped<uint16_t, BF16>(sources, offset, dst, count, reduction);
  case program::I64:
    return reduceTyped<int64_t, Integer<int64_t>>(sources, offset, dst, count,
                                                  reduction);
  case program::I32:
    return reduceTyped<int32_t, Integer<int32_t>>(sources, offset, dst, count,
                                                  reduction);
  case program::I8:
    return reduceTyped<int8_t, Integer<int8_t>>(sources, offset, dst, count,
                                                reduction);
  case program::BOOL:
    return reduceTyped<uint8_t, Bool>(sources, offset, dst, count, reduction);
  default:
    return;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// HostWorld
//===----------------------------------------------------------------------===//

namespace {
class HostCommunicator;
} // namespace

struct HostWorld::State {
  int32_t worldSize;
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable changed;
  /// Set once, by the first failure: every later or pending call fails with
  /// it, as the ranks' programs can no longer meet.
  std::string failure;
  std::map<Group, GroupState> groups;
  /// (source, destination, tag) -> messages in send order.
  std::map<std::tuple<int32_t, int32_t, int64_t>, std::deque<Message>>
      mailboxes;
  /// The ranks that have ended the current run (endRun), and how many.
  std::vector<bool> ended;
  int32_t endedCount = 0;
  std::vector<std::unique_ptr<HostCommunicator>> communicators;

  /// Records `message` as the world's failure (unless one came first), wakes
  /// every waiter and returns the failure. Called with `mutex` held.
  Status fail(const std::string &message) {
    if (failure.empty())
      failure = message;
    changed.notify_all();
    return Status::error(failure);
  }
};

namespace {

class HostCommunicator final : public Communicator {
public:
  HostCommunicator(HostWorld::State &world, int32_t rank)
      : world(world), myRank(rank) {}

  int32_t rank() const override { return myRank; }
  int32_t worldSize() const override { return world.worldSize; }

  Status allReduce(const Tensor &in, const Tensor &out, const Group &group,
                   Reduction reduction) override;
  Status allGather(const Tensor &in, const Tensor &out, const Group &group,
                   int64_t dim) override;
  Status reduceScatter(const Tensor &in, const Tensor &out, const Group &group,
                       int64_t dim, Reduction reduction) override;
  Status allToAll(const Tensor &in, const Tensor &out, const Group &group,
                  int64_t splitDim, int64_t concatDim) override;
  Status collectivePermute(const Tensor &in, const Tensor &out,
                           const Group &group, int64_t shift) override;
  Status send(const Tensor &tensor, int32_t peer, int64_t tag) override;
  Status recv(const Tensor &tensor, int32_t peer, int64_t tag) override;
  Status barrier(const Group &group) override;
  Status dispatch(const Tensor &in, const Tensor &destinations,
                  const Tensor &out, const Tensor &counts,
                  const Group &group) override {
    return dispatchBySendRecv(*this, in, destinations, out, counts, group);
  }
  Status dispatchReturn(const Tensor &in, const Tensor &counts,
                        const Tensor &destinations, const Tensor &out,
                        const Group &group) override {
    return dispatchReturnBySendRecv(*this, in, counts, destinations, out,
                                    group);
  }
  Status endRun() override;
  void abort(const std::string &reason) override;

private:
  /// Checks the call on this rank alone: the group, the dtype, the shapes.
  Status checkLocal(Post &post, const Tensor &in, const Tensor &out,
                    const Group &group, size_t &index) const;
  /// Posts, waits for all members, runs `compute` on their posts (in group
  /// order), then waits for all members to finish reading.
  template <typename Compute>
  Status rendezvous(const Group &group, size_t index, Post post,
                    const Tensor &in, const Tensor &out, Compute compute);

  HostWorld::State &world;
  int32_t myRank;
};

Status HostCommunicator::checkLocal(Post &post, const Tensor &in,
                                    const Tensor &out, const Group &group,
                                    size_t &index) const {
  if (post.kind == Kind::Barrier)
    return checkGroup("barrier over group " + groupString(group) + " on rank " +
                          std::to_string(myRank),
                      group, myRank, world.worldSize, index);
  CollectiveCall call;
  call.kind = collectiveKind(post.kind);
  call.reduction = post.reduction;
  call.dim = post.dim;
  call.concatDim = post.concatDim;
  call.shift = post.shift;
  PARTITA_RETURN_IF_ERROR(
      checkCollective(call, in, out, group, myRank, world.worldSize, index));
  post.dtype = in.dtype;
  post.inShape = in.shape;
  post.outShape = out.shape;
  post.in = in.data;
  return Status::ok();
}

template <typename Compute>
Status HostCommunicator::rendezvous(const Group &group, size_t index, Post post,
                                    const Tensor &in, const Tensor &out,
                                    Compute compute) {
  std::string what = post.describe() + " over group " + groupString(group);
  // Others read this member's input while it writes its result: if the two
  // share bytes, they read a copy.
  std::vector<uint8_t> staged;
  if (post.kind != Kind::Barrier && in.data && out.data) {
    const uint8_t *inBegin = static_cast<const uint8_t *>(in.data);
    const uint8_t *outBegin = static_cast<const uint8_t *>(out.data);
    if (inBegin < outBegin + out.byteSize() &&
        outBegin < inBegin + in.byteSize()) {
      staged.assign(inBegin, inBegin + in.byteSize());
      post.in = staged.data();
    }
  }

  std::shared_ptr<Step> step;
  std::unique_lock<std::mutex> lock(world.mutex);
  if (!world.failure.empty())
    return Status::error(world.failure);
  GroupState &state = world.groups[group];
  if (state.calls.empty())
    state.calls.assign(group.size(), 0);
  uint64_t call = state.calls[index]++;
  std::shared_ptr<Step> &slot = state.steps[call];
  if (!slot) {
    slot = std::make_shared<Step>();
    slot->posts.resize(group.size());
  }
  step = slot;
  step->posts[index] = post;
  ++step->arrived;
  world.changed.notify_all();

  auto deadline = Clock::now() + world.timeout;
  while (step->arrived < group.size() && world.failure.empty()) {
    // A member that has ended its run will not come.
    for (size_t i = 0; i < group.size(); ++i)
      if (!step->posts[i] && world.ended[size_t(group[i])])
        return world.fail(what + ": rank " + std::to_string(group[i]) +
                          " ended its run without taking part (call " +
                          std::to_string(call) + " of the group)");
    if (world.changed.wait_until(lock, deadline) != std::cv_status::timeout)
      continue;
    if (step->arrived == group.size() || !world.failure.empty())
      break;
    std::string missing;
    size_t missingCount = 0;
    for (size_t i = 0; i < group.size(); ++i)
      if (!step->posts[i]) {
        missing += (missingCount++ ? ", " : "") + std::to_string(group[i]);
      }
    return world.fail(what + ": rank" + (missingCount > 1 ? "s " : " ") +
                      missing + " did not arrive within " +
                      durationString(world.timeout));
  }
  // Once every member has arrived, each of them finishes the step even if
  // the world fails meanwhile: the others may be reading its input.
  if (step->arrived < group.size())
    return Status::error(world.failure);
  lock.unlock();

  Status result = Status::ok();
  for (size_t i = 0; i < group.size() && result.isOk(); ++i)
    if (!step->posts[i]->sameCall(*step->posts[0]))
      result = Status::error(
          "mismatched collectives over group " + groupString(group) +
          " (call " + std::to_string(call) + "): rank " +
          std::to_string(group[0]) + " called " + step->posts[0]->describe() +
          ", rank " + std::to_string(group[i]) + " called " +
          step->posts[i]->describe());
  if (result.isOk()) {
    std::vector<const void *> inputs;
    for (const std::optional<Post> &member : step->posts)
      inputs.push_back(member->in);
    compute(inputs, index);
  }

  lock.lock();
  ++step->departed;
  world.changed.notify_all();
  if (step->departed == group.size())
    state.steps.erase(call);
  deadline = Clock::now() + world.timeout;
  while (step->departed < group.size()) {
    if (world.changed.wait_until(lock, deadline) == std::cv_status::timeout &&
        step->departed < group.size())
      return world.fail(what + ": a member did not finish within " +
                        durationString(world.timeout));
  }
  if (!result)
    return world.fail(result.message());
  return Status::ok();
}

Status HostCommunicator::allReduce(const Tensor &in, const Tensor &out,
                                   const Group &group, Reduction reduction) {
  Post post;
  post.kind = Kind::AllReduce;
  post.reduction = reduction;
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkLocal(post, in, out, group, index));
  return rendezvous(group, index, post, in, out,
                    [&](const std::vector<const void *> &inputs, size_t) {
                      reduce(in.dtype, inputs, 0, out.data,
                             size_t(out.numElements()), reduction);
                    });
}

Status HostCommunicator::allGather(const Tensor &in, const Tensor &out,
                                   const Group &group, int64_t dim) {
  Post post;
  post.kind = Kind::AllGather;
  post.dim = dim;
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkLocal(post, in, out, group, index));
  return rendezvous(
      group, index, post, in, out,
      [&](const std::vector<const void *> &inputs, size_t) {
        std::vector<int64_t> zero(in.shape.size(), 0), start = zero;
        for (size_t j = 0; j < inputs.size(); ++j) {
          start[dim] = int64_t(j) * in.shape[dim];
          copyBlock(static_cast<const uint8_t *>(inputs[j]), in.shape, zero,
                    static_cast<uint8_t *>(out.data), out.shape, start,
                    in.shape, dtypeSize(in.dtype));
        }
      });
}

Status HostCommunicator::reduceScatter(const Tensor &in, const Tensor &out,
                                       const Group &group, int64_t dim,
                                       Reduction reduction) {
  Post post;
  post.kind = Kind::ReduceScatter;
  post.reduction = reduction;
  post.dim = dim;
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkLocal(post, in, out, group, index));
  return rendezvous(
      group, index, post, in, out,
      [&](const std::vector<const void *> &inputs, size_t member) {
        // View the input as [outer, n * piece]: this member's piece of each
        // outer row is contiguous.
        size_t outer = 1, piece = 1;
        for (int64_t d = 0; d < dim; ++d)
          outer *= size_t(in.shape[d]);
        for (size_t d = size_t(dim); d < out.shape.size(); ++d)
          piece *= size_t(out.shape[d]);
        size_t n = inputs.size();
        size_t elementSize = dtypeSize(in.dtype);
        for (size_t o = 0; o < outer; ++o)
          reduce(in.dtype, inputs, (o * n + member) * piece,
                 static_cast<uint8_t *>(out.data) + o * piece * elementSize,
                 piece, reduction);
      });
}

Status HostCommunicator::allToAll(const Tensor &in, const Tensor &out,
                                  const Group &group, int64_t splitDim,
                                  int64_t concatDim) {
  Post post;
  post.kind = Kind::AllToAll;
  post.dim = splitDim;
  post.concatDim = concatDim;
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkLocal(post, in, out, group, index));
  return rendezvous(
      group, index, post, in, out,
      [&](const std::vector<const void *> &inputs, size_t member) {
        std::vector<int64_t> piece = in.shape;
        piece[splitDim] /= int64_t(inputs.size());
        std::vector<int64_t> srcStart(in.shape.size(), 0);
        std::vector<int64_t> dstStart(in.shape.size(), 0);
        srcStart[splitDim] = int64_t(member) * piece[splitDim];
        for (size_t j = 0; j < inputs.size(); ++j) {
          dstStart[concatDim] = int64_t(j) * piece[concatDim];
          copyBlock(static_cast<const uint8_t *>(inputs[j]), in.shape, srcStart,
                    static_cast<uint8_t *>(out.data), out.shape, dstStart,
                    piece, dtypeSize(in.dtype));
        }
      });
}

Status HostCommunicator::collectivePermute(const Tensor &in, const Tensor &out,
                                           const Group &group, int64_t shift) {
  Post post;
  post.kind = Kind::CollectivePermute;
  post.shift = shift;
  size_t index;
  PARTITA_RETURN_IF_ERROR(checkLocal(post, in, out, group, index));
  return rendezvous(
      group, index, post, in, out,
      [&](const std::vector<const void *> &inputs, size_t member) {
        int64_t n = int64_t(inputs.size());
        int64_t source = ((int64_t(member) - shift) % n + n) % n;
        if (out.byteSize() > 0)
          std::memcpy(out.data, inputs[size_t(source)], out.byteSize());
      });
}

Status HostCommunicator::barrier(const Group &group) {
  Post post;
  post.kind = Kind::Barrier;
  size_t index;
  Tensor none;
  PARTITA_RETURN_IF_ERROR(checkLocal(post, none, none, group, index));
  return rendezvous(group, index, post, none, none,
                    [](const std::vector<const void *> &, size_t) {});
}

Status HostCommunicator::send(const Tensor &tensor, int32_t peer, int64_t tag) {
  std::string what = "send from rank " + std::to_string(myRank) + " to rank " +
                     std::to_string(peer) + " (tag " + std::to_string(tag) +
                     ")";
  if (peer < 0 || peer >= world.worldSize)
    return Status::error(what + ": no such rank");
  if (dtypeSize(tensor.dtype) == 0)
    return Status::error(what + ": unsupported dtype");
  // The host transport is eager: the message is copied now, so send never
  // waits for the receiver.
  Message message{tensor.dtype, tensor.shape, {}};
  const uint8_t *data = static_cast<const uint8_t *>(tensor.data);
  message.bytes.assign(data, data + tensor.byteSize());
  std::lock_guard<std::mutex> lock(world.mutex);
  if (!world.failure.empty())
    return Status::error(world.failure);
  world.mailboxes[{myRank, peer, tag}].push_back(std::move(message));
  world.changed.notify_all();
  return Status::ok();
}

Status HostCommunicator::recv(const Tensor &tensor, int32_t peer, int64_t tag) {
  std::string what = "recv on rank " + std::to_string(myRank) + " from rank " +
                     std::to_string(peer) + " (tag " + std::to_string(tag) +
                     ")";
  if (peer < 0 || peer >= world.worldSize)
    return Status::error(what + ": no such rank");
  std::unique_lock<std::mutex> lock(world.mutex);
  auto deadline = Clock::now() + world.timeout;
  auto key = std::make_tuple(peer, myRank, tag);
  while (true) {
    if (!world.failure.empty())
      return Status::error(world.failure);
    auto box = world.mailboxes.find(key);
    if (box != world.mailboxes.end() && !box->second.empty())
      break;
    if (world.ended[size_t(peer)])
      return world.fail(what + ": rank " + std::to_string(peer) +
                        " ended its run without sending it");
    if (world.changed.wait_until(lock, deadline) == std::cv_status::timeout) {
      box = world.mailboxes.find(key);
      if (box == world.mailboxes.end() || box->second.empty())
        return world.fail(what + ": rank " + std::to_string(peer) +
                          " did not send within " +
                          durationString(world.timeout));
    }
  }
  auto box = world.mailboxes.find(key);
  Message message = std::move(box->second.front());
  box->second.pop_front();
  if (box->second.empty())
    world.mailboxes.erase(box);
  if (message.dtype != tensor.dtype || message.shape != tensor.shape)
    return world.fail(
        what + ": expected " + dtypeName(tensor.dtype) + " " +
        shapeString(tensor.shape) + ", rank " + std::to_string(peer) +
        " sent " + dtypeName(message.dtype) + " " + shapeString(message.shape));
  lock.unlock();
  if (!message.bytes.empty())
    std::memcpy(tensor.data, message.bytes.data(), message.bytes.size());
  return Status::ok();
}

Status HostCommunicator::endRun() {
  std::lock_guard<std::mutex> lock(world.mutex);
  if (!world.failure.empty())
    return Status::error(world.failure);
  if (!world.ended[size_t(myRank)]) {
    world.ended[size_t(myRank)] = true;
    ++world.endedCount;
  }
  world.changed.notify_all();
  if (world.endedCount < world.worldSize)
    return Status::ok();
  // Every rank has ended: a message still in a mailbox was sent for a
  // receive that no program makes.
  world.ended.assign(size_t(world.worldSize), false);
  world.endedCount = 0;
  std::string unreceived;
  size_t count = 0;
  for (const auto &[key, box] : world.mailboxes) {
    const auto &[source, destination, tag] = key;
    for (const Message &message : box)
      if (count++ < 4)
        unreceived +=
            std::string(unreceived.empty() ? "" : "; ") + "rank " +
            std::to_string(source) + " sent " + dtypeName(message.dtype) + " " +
            shapeString(message.shape) + " to rank " +
            std::to_string(destination) + " with tag " + std::to_string(tag) +
            ", which rank " + std::to_string(destination) + " never received";
  }
  if (count == 0)
    return Status::ok();
  if (count > 4)
    unreceived += "; and " + std::to_string(count - 4) + " more";
  return world.fail("the run ended with " + std::to_string(count) +
                    " unmatched send" + (count == 1 ? "" : "s") + ": " +
                    unreceived);
}

void HostCommunicator::abort(const std::string &reason) {
  std::lock_guard<std::mutex> lock(world.mutex);
  (void)world.fail(reason);
}

} // namespace

HostWorld::HostWorld(int32_t worldSize, std::chrono::milliseconds timeout)
    : state(std::make_unique<State>()) {
  state->worldSize = worldSize;
  state->timeout = timeout;
  state->ended.assign(size_t(std::max(worldSize, 0)), false);
  for (int32_t rank = 0; rank < worldSize; ++rank)
    state->communicators.push_back(
        std::make_unique<HostCommunicator>(*state, rank));
}

HostWorld::~HostWorld() = default;

int32_t HostWorld::worldSize() const { return state->worldSize; }

Communicator &HostWorld::communicator(int32_t rank) {
  return *state->communicators[size_t(rank)];
}
