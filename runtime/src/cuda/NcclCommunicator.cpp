//===- NcclCommunicator.cpp - collectives of GPUs over NCCL ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/NcclCommunicator.h"

#include "CudaDeviceImpl.h"
#include "partita/runtime/CollectiveCheck.h"

#include "partita/runtime/distributed/TcpStore.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace partita::runtime;
using namespace partita::runtime::cuda;
namespace program = partita::program;
using Clock = std::chrono::steady_clock;

namespace {

std::string durationString(std::chrono::milliseconds timeout) {
  if (timeout.count() % 1000 == 0)
    return std::to_string(timeout.count() / 1000) + " s";
  return std::to_string(timeout.count()) + " ms";
}

bool ncclType(DType dtype, ncclDataType_t &type) {
  switch (dtype) {
  case program::F32:
    type = ncclFloat32;
    return true;
  case program::F16:
    type = ncclFloat16;
    return true;
  case program::BF16:
    type = ncclBfloat16;
    return true;
  case program::I64:
    type = ncclInt64;
    return true;
  case program::I32:
    type = ncclInt32;
    return true;
  case program::I8:
    type = ncclInt8;
    return true;
  case program::BOOL:
    type = ncclUint8;
    return true;
  default:
    return false;
  }
}

ncclRedOp_t ncclOp(Reduction reduction, DType dtype) {
  switch (reduction) {
  case Reduction::Sum:
    // Bools are 0 or 1: their sum, stored as a bool, is a logical or.
    return dtype == program::BOOL ? ncclMax : ncclSum;
  case Reduction::Max:
    return ncclMax;
  case Reduction::Min:
    return ncclMin;
  }
  return ncclSum;
}

/// Device memory from the device's allocator for the length of one call.
class Staging {
public:
  Staging(Device &device) : device(device) {}
  ~Staging() {
    for (void *memory : blocks)
      device.deallocate(memory);
  }
  Status allocate(size_t bytes, void *&memory) {
    PARTITA_RETURN_IF_ERROR(device.allocate(bytes, 256, &memory));
    if (memory)
      blocks.push_back(memory);
    return Status::ok();
  }

private:
  Device &device;
  std::vector<void *> blocks;
};

class NcclCommunicatorImpl final : public NcclCommunicator {
public:
  NcclCommunicatorImpl(const NcclApi &nccl, CudaDeviceImpl &device,
                       int32_t rank, int32_t worldSize,
                       std::chrono::milliseconds timeout)
      : nccl(nccl), device(device), myRank(rank), size(worldSize),
        timeout(timeout) {}
  ~NcclCommunicatorImpl() override;

  Status join(TcpStore &store, const std::vector<Group> &groups);

  int32_t rank() const override { return myRank; }
  int32_t worldSize() const override { return size; }
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
  void abort(const std::string &reason) override;

private:
  /// Waits until `comm` leaves ncclInProgress (a nonblocking init, split or
  /// group end), at most until the deadline.
  Status settle(ncclComm_t comm, ncclResult_t started, const std::string &what);
  /// The communicator of `group`.
  Status communicatorOf(const Group &group, ncclComm_t &comm,
                        const std::string &what);
  /// Runs `enqueue` (NCCL calls and copies on the communication stream),
  /// then waits for the stream; on failure aborts every communicator.
  Status run(const std::string &what, ncclComm_t comm,
             const std::function<Status(CUstream)> &enqueue);
  Status collective(const CollectiveCall &call, const Tensor &in,
                    const Tensor &out, const Group &group);
  void abortAll();

  const NcclApi &nccl;
  CudaDeviceImpl &device;
  int32_t myRank, size;
  std::chrono::milliseconds timeout;
  ncclComm_t world = nullptr;
  std::map<Group, ncclComm_t> groupComms;
  std::vector<ncclComm_t> owned;
  std::mutex abortMutex;
  std::atomic<bool> aborting{false};
  std::string abortReason;
  bool aborted = false;
  void *scratch = nullptr;
};

NcclCommunicatorImpl::~NcclCommunicatorImpl() {
  if (device.makeCurrent()) {
    if (scratch)
      device.deallocate(scratch);
    for (ncclComm_t comm : owned)
      if (aborted)
        continue;
      else
        nccl.ncclCommDestroy(comm);
  }
}

Status NcclCommunicatorImpl::settle(ncclComm_t comm, ncclResult_t started,
                                    const std::string &what) {
  if (started != ncclSuccess && started != ncclInProgress)
    return check(nccl, started, what);
  auto deadline = Clock::now() + timeout;
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (comm)
      PARTITA_RETURN_IF_ERROR(
          check(nccl, nccl.ncclCommGetAsyncError(comm, &state), what));
    if (state == ncclSuccess)
      return Status::ok();
    if (state != ncclInProgress)
      return check(nccl, state, what);
    if (aborting)
      return Status::error(what + ": aborted: " + abortReason);
    if (Clock::now() > deadline)
      return Status::error(what + ": did not finish within " +
                           durationString(timeout) +
                           " (is every rank running?)");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Status NcclCommunicatorImpl::join(TcpStore &store,
                                  const std::vector<Group> &groups) {
  std::string where = "rank " + std::to_string(myRank) + ": NCCL";
  PARTITA_RETURN_IF_ERROR(device.makeCurrent());
  ncclUniqueId id;
  if (myRank == 0) {
    PARTITA_RETURN_IF_ERROR(
        check(nccl, nccl.ncclGetUniqueId(&id), where + ": ncclGetUniqueId"));
    PARTITA_RETURN_IF_ERROR(
        store.set("partita/nccl-id",
                  std::string(reinterpret_cast<char *>(&id), sizeof(id))));
  } else {
    std::string bytes;
    PARTITA_RETURN_IF_ERROR(store.get("partita/nccl-id", bytes));
    if (bytes.size() != sizeof(id))
      return Status::error(where + ": the store's ncclUniqueId has " +
                           std::to_string(bytes.size()) + " bytes");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  // Nonblocking communicators, so that every wait can have a deadline.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t started =
      nccl.ncclCommInitRankConfig(&world, size, id, myRank, &config);
  if (world)
    owned.push_back(world);
  Status initialized = settle(
      world, started, where + ": joining the world of " + std::to_string(size));
  if (!initialized) {
    abortAll();
    return initialized;
  }

  // Splits are collective over the world: every rank makes the same ones,
  // each a round of disjoint groups (color: the group's index in the
  // round, key: the rank's position in it).
  Group identity(static_cast<size_t>(size));
  for (int32_t r = 0; r < size; ++r)
    identity[size_t(r)] = r;
  std::vector<std::vector<const Group *>> rounds;
  for (const Group &group : groups) {
    if (group == identity)
      continue;
    bool placed = false;
    for (std::vector<const Group *> &round : rounds) {
      bool disjoint = true;
      for (const Group *other : round)
        for (int32_t member : group)
          disjoint &=
              std::find(other->begin(), other->end(), member) == other->end();
      if (disjoint) {
        round.push_back(&group);
        placed = true;
        break;
      }
    }
    if (!placed)
      rounds.push_back({&group});
  }
  groupComms[identity] = world;
  for (const std::vector<const Group *> &round : rounds) {
    int color = NCCL_SPLIT_NOCOLOR, key = 0;
    const Group *mine = nullptr;
    for (size_t i = 0; i < round.size(); ++i) {
      auto at = std::find(round[i]->begin(), round[i]->end(), myRank);
      if (at != round[i]->end()) {
        color = int(i);
        key = int(at - round[i]->begin());
        mine = round[i];
      }
    }
    ncclComm_t split = nullptr;
    ncclConfig_t splitConfig = NCCL_CONFIG_INITIALIZER;
    splitConfig.blocking = 0;
    std::string what =
        where + ": splitting" + (mine ? " group " + groupString(*mine) : "");
    ncclResult_t result =
        nccl.ncclCommSplit(world, color, key, &split, &splitConfig);
    if (split)
      owned.push_back(split);
    Status done = settle(split ? split : world, result, what);
    if (done && split)
      done = settle(world, ncclSuccess, what);
    if (!done) {
      abortAll();
      return done;
    }
    if (mine)
      groupComms[*mine] = split;
  }
  return Status::ok();
}

void NcclCommunicatorImpl::abortAll() {
  if (aborted)
    return;
  aborted = true;
  for (ncclComm_t comm : owned)
    nccl.ncclCommAbort(comm);
}

void NcclCommunicatorImpl::abort(const std::string &reason) {
  // The communication thread may be inside NCCL: it sees the flag while
  // it polls and aborts the communicators itself.
  std::lock_guard<std::mutex> lock(abortMutex);
  if (!aborting) {
    abortReason = reason;
    aborting = true;
  }
}

Status NcclCommunicatorImpl::communicatorOf(const Group &group,
                                            ncclComm_t &comm,
                                            const std::string &what) {
  auto found = groupComms.find(group);
  if (found == groupComms.end())
    return Status::error(what + ": rank " + std::to_string(myRank) +
                         " has no NCCL communicator for group " +
                         groupString(group) +
                         " (it was not among the groups given at creation)");
  comm = found->second;
  return Status::ok();
}

Status
NcclCommunicatorImpl::run(const std::string &what, ncclComm_t comm,
                          const std::function<Status(CUstream)> &enqueue) {
  std::string where = "rank " + std::to_string(myRank) + ": " + what;
  if (aborting || aborted) {
    std::lock_guard<std::mutex> lock(abortMutex);
    abortAll();
    return Status::error(where + ": aborted: " + abortReason);
  }
  PARTITA_RETURN_IF_ERROR(device.makeCurrent());
  CUstream stream = device.stream(DeviceQueue::Communication);
  Status status = enqueue(stream);
  if (status)
    status = settle(comm, ncclSuccess, where);
  if (status)
    status = device.finish(DeviceQueue::Communication, what, [&]() -> Status {
      if (aborting)
        return Status::error("aborted: " + abortReason);
      ncclResult_t state = ncclSuccess;
      nccl.ncclCommGetAsyncError(comm, &state);
      if (state != ncclSuccess && state != ncclInProgress)
        return check(nccl, state, "NCCL");
      return Status::ok();
    });
  if (!status) {
    std::lock_guard<std::mutex> lock(abortMutex);
    abortAll();
    if (status.message().rfind("rank ", 0) == 0)
      return status;
    return Status::error(where + ": " + status.message());
  }
  return Status::ok();
}

Status NcclCommunicatorImpl::collective(const CollectiveCall &call,
                                        const Tensor &in, const Tensor &out,
                                        const Group &group) {
  size_t index = 0;
  PARTITA_RETURN_IF_ERROR(
      checkCollective(call, in, out, group, myRank, size, index));
  std::string what = call.describe(in, out, group);
  ncclComm_t comm = nullptr;
  PARTITA_RETURN_IF_ERROR(communicatorOf(group, comm, what));
  ncclDataType_t type;
  if (!ncclType(in.dtype, type))
    return Status::error(what + ": unsupported dtype");
  size_t n = group.size();
  size_t elementSize = dtypeSize(in.dtype);
  Staging staging(device);
  // A nonblocking communicator may return before the call is on the
  // stream: settle it before anything that follows it on the stream.
  auto issue = [&](ncclResult_t result, const char *name) {
    return settle(comm, result, name);
  };
  // Calls between ncclGroupStart and ncclGroupEnd only queue.
  auto grouped = [&](ncclResult_t result, const char *name) {
    return result == ncclInProgress ? Status::ok()
                                    : cuda::check(nccl, result, name);
  };
  // A member's input must stay intact while NCCL reads it; where it shares
  // bytes with the result (other than in place), read a copy.
  const void *source = in.data;
  auto stageInput = [&](CUstream) -> Status {
    void *copy = nullptr;
    PARTITA_RETURN_IF_ERROR(staging.allocate(in.byteSize(), copy));
    PARTITA_RETURN_IF_ERROR(device.copyBlocks(
        DeviceQueue::Communication, copy, in.data,
        {Copy2D{0, 0, in.byteSize(), 1, in.byteSize(), in.byteSize()}}));
    source = copy;
    return Status::ok();
  };
  // Dimensions before `dim` multiply to `outer`: 1 means each member's
  // block is contiguous in the concatenated tensor.
  auto outerOf = [](const std::vector<int64_t> &shape, int64_t dim) {
    int64_t outer = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= shape[size_t(d)];
    return outer;
  };
  if (in.numElements() == 0 && out.numElements() == 0)
    return run(what, comm, [](CUstream) { return Status::ok(); });

  switch (call.kind) {
  case CollectiveKind::AllReduce:
    return run(what, comm, [&](CUstream stream) -> Status {
      if (overlaps(in, out) && in.data != out.data)
        PARTITA_RETURN_IF_ERROR(stageInput(stream));
      return issue(
          nccl.ncclAllReduce(source, out.data, size_t(in.numElements()), type,
                             ncclOp(call.reduction, in.dtype), comm, stream),
          "ncclAllReduce");
    });
  case CollectiveKind::AllGather:
    return run(what, comm, [&](CUstream stream) -> Status {
      bool contiguous = outerOf(in.shape, call.dim) == 1;
      bool inPlace =
          static_cast<const char *>(in.data) ==
          static_cast<const char *>(out.data) + index * in.byteSize();
      if (overlaps(in, out) && !(contiguous && inPlace))
        PARTITA_RETURN_IF_ERROR(stageInput(stream));
      if (contiguous)
        return issue(nccl.ncclAllGather(source, out.data, in.byteSize(),
                                        ncclInt8, comm, stream),
                     "ncclAllGather");
      // Gather the blocks one after another, then move each into place.
      void *gathered = nullptr;
      PARTITA_RETURN_IF_ERROR(staging.allocate(out.byteSize(), gathered));
      PARTITA_RETURN_IF_ERROR(
          issue(nccl.ncclAllGather(source, gathered, in.byteSize(), ncclInt8,
                                   comm, stream),
                "ncclAllGather"));
      std::vector<int64_t> zero(in.shape.size(), 0);
      for (size_t j = 0; j < n; ++j) {
        std::vector<int64_t> start = zero;
        start[size_t(call.dim)] = int64_t(j) * in.shape[size_t(call.dim)];
        PARTITA_RETURN_IF_ERROR(
            device.copyBlocks(DeviceQueue::Communication, out.data,
                              static_cast<char *>(gathered) + j * in.byteSize(),
                              planBlockCopy(in.shape, zero, out.shape, start,
                                            in.shape, elementSize)));
      }
      return Status::ok();
    });
  case CollectiveKind::ReduceScatter:
    return run(what, comm, [&](CUstream stream) -> Status {
      if (outerOf(in.shape, call.dim) == 1) {
        if (overlaps(in, out))
          PARTITA_RETURN_IF_ERROR(stageInput(stream));
        return issue(nccl.ncclReduceScatter(
                         source, out.data, size_t(out.numElements()), type,
                         ncclOp(call.reduction, in.dtype), comm, stream),
                     "ncclReduceScatter");
      }
      // Lay the members' pieces out one after another first.
      void *pieces = nullptr;
      PARTITA_RETURN_IF_ERROR(staging.allocate(in.byteSize(), pieces));
      std::vector<int64_t> zero(in.shape.size(), 0);
      for (size_t j = 0; j < n; ++j) {
        std::vector<int64_t> start = zero;
        start[size_t(call.dim)] = int64_t(j) * out.shape[size_t(call.dim)];
        PARTITA_RETURN_IF_ERROR(device.copyBlocks(
            DeviceQueue::Communication,
            static_cast<char *>(pieces) + j * out.byteSize(), in.data,
            planBlockCopy(in.shape, start, out.shape, zero, out.shape,
                          elementSize)));
      }
      return issue(nccl.ncclReduceScatter(
                       pieces, out.data, size_t(out.numElements()), type,
                       ncclOp(call.reduction, in.dtype), comm, stream),
                   "ncclReduceScatter");
    });
  case CollectiveKind::AllToAll:
    return run(what, comm, [&](CUstream stream) -> Status {
      // Pack the pieces to send, exchange them with grouped sends and
      // receives, unpack the received ones along the concat dim.
      std::vector<int64_t> piece = in.shape;
      piece[size_t(call.dim)] /= int64_t(n);
      size_t pieceBytes = in.byteSize() / n;
      void *packed = nullptr, *received = nullptr;
      PARTITA_RETURN_IF_ERROR(staging.allocate(in.byteSize(), packed));
      PARTITA_RETURN_IF_ERROR(staging.allocate(out.byteSize(), received));
      std::vector<int64_t> zero(in.shape.size(), 0);
      for (size_t j = 0; j < n; ++j) {
        std::vector<int64_t> start = zero;
        start[size_t(call.dim)] = int64_t(j) * piece[size_t(call.dim)];
        PARTITA_RETURN_IF_ERROR(device.copyBlocks(
            DeviceQueue::Communication,
            static_cast<char *>(packed) + j * pieceBytes, in.data,
            planBlockCopy(in.shape, start, piece, zero, piece, elementSize)));
      }
      PARTITA_RETURN_IF_ERROR(grouped(nccl.ncclGroupStart(), "ncclGroupStart"));
      for (size_t j = 0; j < n; ++j) {
        PARTITA_RETURN_IF_ERROR(
            grouped(nccl.ncclSend(static_cast<char *>(packed) + j * pieceBytes,
                                  pieceBytes, ncclInt8, int(j), comm, stream),
                    "ncclSend"));
        PARTITA_RETURN_IF_ERROR(grouped(
            nccl.ncclRecv(static_cast<char *>(received) + j * pieceBytes,
                          pieceBytes, ncclInt8, int(j), comm, stream),
            "ncclRecv"));
      }
      PARTITA_RETURN_IF_ERROR(
          settle(comm, nccl.ncclGroupEnd(), "ncclGroupEnd"));
      for (size_t j = 0; j < n; ++j) {
        std::vector<int64_t> start = zero;
        start[size_t(call.concatDim)] =
            int64_t(j) * piece[size_t(call.concatDim)];
        PARTITA_RETURN_IF_ERROR(device.copyBlocks(
            DeviceQueue::Communication, out.data,
            static_cast<char *>(received) + j * pieceBytes,
            planBlockCopy(piece, zero, out.shape, start, piece, elementSize)));
      }
      return Status::ok();
    });
  case CollectiveKind::CollectivePermute:
    return run(what, comm, [&](CUstream stream) -> Status {
      int64_t members = int64_t(n);
      int64_t to =
          ((int64_t(index) + call.shift) % members + members) % members;
      int64_t from =
          ((int64_t(index) - call.shift) % members + members) % members;
      if (to == int64_t(index)) {
        if (in.data == out.data)
          return Status::ok();
        return device.copyBlocks(
            DeviceQueue::Communication, out.data, in.data,
            {Copy2D{0, 0, in.byteSize(), 1, in.byteSize(), in.byteSize()}});
      }
      if (overlaps(in, out))
        PARTITA_RETURN_IF_ERROR(stageInput(stream));
      PARTITA_RETURN_IF_ERROR(grouped(nccl.ncclGroupStart(), "ncclGroupStart"));
      PARTITA_RETURN_IF_ERROR(grouped(
          nccl.ncclSend(source, in.byteSize(), ncclInt8, int(to), comm, stream),
          "ncclSend"));
      PARTITA_RETURN_IF_ERROR(
          grouped(nccl.ncclRecv(out.data, out.byteSize(), ncclInt8, int(from),
                                comm, stream),
                  "ncclRecv"));
      return settle(comm, nccl.ncclGroupEnd(), "ncclGroupEnd");
    });
  default:
    break;
  }
  return Status::error(what + ": unknown collective");
}

Status NcclCommunicatorImpl::allReduce(const Tensor &in, const Tensor &out,
                                       const Group &group,
                                       Reduction reduction) {
  CollectiveCall call;
  call.kind = CollectiveKind::AllReduce;
  call.reduction = reduction;
  return collective(call, in, out, group);
}

Status NcclCommunicatorImpl::allGather(const Tensor &in, const Tensor &out,
                                       const Group &group, int64_t dim) {
  CollectiveCall call;
  call.kind = CollectiveKind::AllGather;
  call.dim = dim;
  return collective(call, in, out, group);
}

Status NcclCommunicatorImpl::reduceScatter(const Tensor &in, const Tensor &out,
                                           const Group &group, int64_t dim,
                                           Reduction reduction) {
  CollectiveCall call;
  call.kind = CollectiveKind::ReduceScatter;
  call.dim = dim;
  call.reduction = reduction;
  return collective(call, in, out, group);
}

Status NcclCommunicatorImpl::allToAll(const Tensor &in, const Tensor &out,
                                      const Group &group, int64_t splitDim,
                                      int64_t concatDim) {
  CollectiveCall call;
  call.kind = CollectiveKind::AllToAll;
  call.dim = splitDim;
  call.concatDim = concatDim;
  return collective(call, in, out, group);
}

Status NcclCommunicatorImpl::collectivePermute(const Tensor &in,
                                               const Tensor &out,
                                               const Group &group,
                                               int64_t shift) {
  CollectiveCall call;
  call.kind = CollectiveKind::CollectivePermute;
  call.shift = shift;
  return collective(call, in, out, group);
}

Status NcclCommunicatorImpl::send(const Tensor &tensor, int32_t peer,
                                  int64_t tag) {
  std::string what = "send to rank " + std::to_string(peer) + " (tag " +
                     std::to_string(tag) + ", " + dtypeName(tensor.dtype) +
                     " " + shapeString(tensor.shape) + ")";
  if (peer < 0 || peer >= size || peer == myRank)
    return Status::error("rank " + std::to_string(myRank) + ": " + what +
                         ": no such peer");
  return run(what, world, [&](CUstream stream) {
    return settle(world,
                  nccl.ncclSend(tensor.data, tensor.byteSize(), ncclInt8, peer,
                                world, stream),
                  "ncclSend");
  });
}

Status NcclCommunicatorImpl::recv(const Tensor &tensor, int32_t peer,
                                  int64_t tag) {
  std::string what = "recv from rank " + std::to_string(peer) + " (tag " +
                     std::to_string(tag) + ", " + dtypeName(tensor.dtype) +
                     " " + shapeString(tensor.shape) + ")";
  if (peer < 0 || peer >= size || peer == myRank)
    return Status::error("rank " + std::to_string(myRank) + ": " + what +
                         ": no such peer");
  return run(what, world, [&](CUstream stream) {
    return settle(world,
                  nccl.ncclRecv(tensor.data, tensor.byteSize(), ncclInt8, peer,
                                world, stream),
                  "ncclRecv");
  });
}

Status NcclCommunicatorImpl::barrier(const Group &group) {
  std::string what = "barrier over group " + groupString(group);
  ncclComm_t comm = nullptr;
  PARTITA_RETURN_IF_ERROR(communicatorOf(group, comm, what));
  if (!scratch)
    PARTITA_RETURN_IF_ERROR(device.allocate(256, 256, &scratch));
  return run(what, comm, [&](CUstream stream) {
    return settle(comm,
                  nccl.ncclAllReduce(scratch, scratch, 1, ncclInt32, ncclSum,
                                     comm, stream),
                  "ncclAllReduce");
  });
}

} // namespace

Status NcclCommunicator::create(CudaDevice &device, TcpStore &store,
                                int32_t rank, int32_t worldSize,
                                const std::vector<Group> &groups,
                                std::chrono::milliseconds timeout,
                                std::unique_ptr<NcclCommunicator> &created) {
  const NcclApi *api = nullptr;
  Status loaded = ncclApi(api);
  if (!loaded)
    return Status::error("rank " + std::to_string(rank) +
                         ": NCCL is unavailable: " + loaded.message());
  auto communicator = std::make_unique<NcclCommunicatorImpl>(
      *api, impl(device), rank, worldSize, timeout);
  PARTITA_RETURN_IF_ERROR(communicator->join(store, groups));
  created = std::move(communicator);
  return Status::ok();
}
