//===- CudaMultiRankCommunicator.cpp - ranks as threads on one GPU --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaMultiRankCommunicator.h"

#include "CudaDeviceImpl.h"
#include "partita/runtime/CollectiveCheck.h"

#include "partita/runtime/HostCommunicator.h"

#include <cstring>

using namespace partita::runtime;
using namespace partita::runtime::cuda;
namespace program = partita::program;

CudaRankWorld::~CudaRankWorld() = default;

namespace {

/// What a member posts for the device-to-device collectives: its call (to
/// check that all members make the same), its operand's address and the
/// event after which that operand may be read.
constexpr size_t kMaxRank = 8;
enum DescriptorField : size_t {
  kKind,
  kDType,
  kDim,
  kConcatDim,
  kShift,
  kRank,
  kShape,
  kAddress = kShape + kMaxRank,
  kEvent,
  kDescriptorSize
};

/// Host memory for staging, 64-byte aligned like the host backend's.
struct HostBuffer {
  std::vector<uint64_t> words;
  void *allocate(size_t bytes) {
    words.assign((bytes + 7) / 8 + 8, 0);
    uintptr_t at = reinterpret_cast<uintptr_t>(words.data());
    return reinterpret_cast<void *>((at + 63) & ~uintptr_t(63));
  }
};

class CudaRankCommunicator final : public Communicator {
public:
  CudaRankCommunicator(Communicator &host, CudaDeviceImpl &device,
                       int32_t worldSize)
      : host(host), device(device), size(worldSize) {}

  int32_t rank() const override { return host.rank(); }
  int32_t worldSize() const override { return size; }

  Status allReduce(const Tensor &in, const Tensor &out, const Group &group,
                   Reduction reduction) override {
    CollectiveCall call;
    call.kind = CollectiveKind::AllReduce;
    call.reduction = reduction;
    return staged(call, in, out, group,
                  [&](const Tensor &hostIn, const Tensor &hostOut) {
                    return host.allReduce(hostIn, hostOut, group, reduction);
                  });
  }
  Status reduceScatter(const Tensor &in, const Tensor &out, const Group &group,
                       int64_t dim, Reduction reduction) override {
    CollectiveCall call;
    call.kind = CollectiveKind::ReduceScatter;
    call.reduction = reduction;
    call.dim = dim;
    return staged(
        call, in, out, group, [&](const Tensor &hostIn, const Tensor &hostOut) {
          return host.reduceScatter(hostIn, hostOut, group, dim, reduction);
        });
  }
  Status allGather(const Tensor &in, const Tensor &out, const Group &group,
                   int64_t dim) override {
    CollectiveCall call;
    call.kind = CollectiveKind::AllGather;
    call.dim = dim;
    return direct(call, in, out, group);
  }
  Status allToAll(const Tensor &in, const Tensor &out, const Group &group,
                  int64_t splitDim, int64_t concatDim) override {
    CollectiveCall call;
    call.kind = CollectiveKind::AllToAll;
    call.dim = splitDim;
    call.concatDim = concatDim;
    return direct(call, in, out, group);
  }
  Status collectivePermute(const Tensor &in, const Tensor &out,
                           const Group &group, int64_t shift) override {
    CollectiveCall call;
    call.kind = CollectiveKind::CollectivePermute;
    call.shift = shift;
    return direct(call, in, out, group);
  }
  Status send(const Tensor &tensor, int32_t peer, int64_t tag) override;
  Status recv(const Tensor &tensor, int32_t peer, int64_t tag) override;
  Status barrier(const Group &group) override { return host.barrier(group); }
  void abort(const std::string &reason) override { host.abort(reason); }

private:
  /// Fails the world with `status` (peers must not wait for this rank).
  Status fail(Status status) {
    host.abort(status.message());
    return status;
  }
  Status toHost(void *hostMemory, const Tensor &tensor,
                const std::string &what);
  Status toDevice(const Tensor &tensor, const void *hostMemory,
                  const std::string &what);
  template <typename Exchange>
  Status staged(const CollectiveCall &call, const Tensor &in, const Tensor &out,
                const Group &group, Exchange exchange);
  Status direct(const CollectiveCall &call, const Tensor &in, const Tensor &out,
                const Group &group);

  Communicator &host;
  CudaDeviceImpl &device;
  int32_t size;
};

Status CudaRankCommunicator::toHost(void *hostMemory, const Tensor &tensor,
                                    const std::string &what) {
  if (tensor.byteSize() == 0)
    return Status::ok();
  PARTITA_RETURN_IF_ERROR(device.makeCurrent());
  const DriverApi &api = device.driver();
  PARTITA_RETURN_IF_ERROR(
      check(api,
            api.cuMemcpyDtoHAsync(
                hostMemory, reinterpret_cast<CUdeviceptr>(tensor.data),
                tensor.byteSize(), device.stream(DeviceQueue::Communication)),
            what + ": staging to the host"));
  return device.finish(DeviceQueue::Communication, what);
}

Status CudaRankCommunicator::toDevice(const Tensor &tensor,
                                      const void *hostMemory,
                                      const std::string &what) {
  if (tensor.byteSize() == 0)
    return Status::ok();
  PARTITA_RETURN_IF_ERROR(device.makeCurrent());
  const DriverApi &api = device.driver();
  PARTITA_RETURN_IF_ERROR(
      check(api,
            api.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(tensor.data),
                                  hostMemory, tensor.byteSize(),
                                  device.stream(DeviceQueue::Communication)),
            what + ": staging to the device"));
  // The host memory is released on return: the copy must be done.
  return device.finish(DeviceQueue::Communication, what);
}

template <typename Exchange>
Status CudaRankCommunicator::staged(const CollectiveCall &call,
                                    const Tensor &in, const Tensor &out,
                                    const Group &group, Exchange exchange) {
  size_t index = 0;
  PARTITA_RETURN_IF_ERROR(
      checkCollective(call, in, out, group, rank(), size, index));
  std::string what =
      "rank " + std::to_string(rank()) + ": " + call.describe(in, out, group);
  HostBuffer inMemory, outMemory;
  Tensor hostIn{inMemory.allocate(in.byteSize()), in.dtype, in.shape};
  Tensor hostOut{outMemory.allocate(out.byteSize()), out.dtype, out.shape};
  Status copied = toHost(hostIn.data, in, what);
  if (!copied)
    return fail(copied);
  PARTITA_RETURN_IF_ERROR(exchange(hostIn, hostOut));
  copied = toDevice(out, hostOut.data, what);
  if (!copied)
    return fail(copied);
  return Status::ok();
}

Status CudaRankCommunicator::direct(const CollectiveCall &call,
                                    const Tensor &in, const Tensor &out,
                                    const Group &group) {
  size_t index = 0;
  PARTITA_RETURN_IF_ERROR(
      checkCollective(call, in, out, group, rank(), size, index));
  std::string what =
      "rank " + std::to_string(rank()) + ": " + call.describe(in, out, group);
  if (in.shape.size() > kMaxRank)
    return Status::error(what + ": more than " + std::to_string(kMaxRank) +
                         " dimensions");
  PARTITA_RETURN_IF_ERROR(device.makeCurrent());
  // Peers read this member's operand while it writes its result: if the
  // two share bytes, they read a copy.
  const void *source = in.data;
  void *copy = nullptr;
  struct Release {
    Device &device;
    void *&memory;
    ~Release() {
      if (memory)
        device.deallocate(memory);
    }
  } release{device, copy};
  if (overlaps(in, out)) {
    Status staged = device.allocate(in.byteSize(), 256, &copy);
    if (staged)
      staged = device.copyBlocks(
          DeviceQueue::Communication, copy, in.data,
          {Copy2D{0, 0, in.byteSize(), 1, in.byteSize(), in.byteSize()}});
    if (!staged)
      return fail(Status::error(what + ": " + staged.message()));
    source = copy;
  }
  std::shared_ptr<DeviceEvent> ready;
  Status recorded = device.record(DeviceQueue::Communication, ready);
  if (!recorded)
    return fail(Status::error(what + ": " + recorded.message()));

  // Post the descriptor; every member gets everyone's (group order).
  int64_t mine[kDescriptorSize] = {};
  mine[kKind] = int64_t(call.kind);
  mine[kDType] = int64_t(in.dtype);
  mine[kDim] = call.dim;
  mine[kConcatDim] = call.concatDim;
  mine[kShift] = call.shift;
  mine[kRank] = int64_t(in.shape.size());
  for (size_t d = 0; d < in.shape.size(); ++d)
    mine[kShape + d] = in.shape[d];
  mine[kAddress] = int64_t(reinterpret_cast<uintptr_t>(source));
  mine[kEvent] =
      int64_t(reinterpret_cast<uintptr_t>(device.eventHandle(*ready)));
  size_t n = group.size();
  std::vector<int64_t> all(n * kDescriptorSize);
  PARTITA_RETURN_IF_ERROR(host.allGather(
      Tensor{mine, program::I64, {int64_t(kDescriptorSize)}},
      Tensor{all.data(), program::I64, {int64_t(n * kDescriptorSize)}},
      Group(group), 0));
  for (size_t j = 0; j < n; ++j)
    if (!std::equal(&all[j * kDescriptorSize],
                    &all[j * kDescriptorSize] + kAddress, mine))
      return fail(Status::error("mismatched collectives over group " +
                                groupString(group) + ": rank " +
                                std::to_string(rank()) + " called " +
                                call.describe(in, out, group) + ", rank " +
                                std::to_string(group[j]) + " another call"));
  auto peerAddress = [&](size_t j) {
    return reinterpret_cast<const char *>(
        uintptr_t(all[j * kDescriptorSize + kAddress]));
  };
  const DriverApi &api = device.driver();
  CUstream stream = device.stream(DeviceQueue::Communication);
  auto waitForPeer = [&](size_t j) {
    CUevent event =
        reinterpret_cast<CUevent>(uintptr_t(all[j * kDescriptorSize + kEvent]));
    return check(api, api.cuStreamWaitEvent(stream, event, 0),
                 what + ": cuStreamWaitEvent");
  };

  size_t elementSize = dtypeSize(in.dtype);
  std::vector<int64_t> zero(in.shape.size(), 0);
  Status copied = Status::ok();
  switch (call.kind) {
  case CollectiveKind::AllGather:
    for (size_t j = 0; j < n && copied; ++j) {
      std::vector<int64_t> start = zero;
      start[size_t(call.dim)] = int64_t(j) * in.shape[size_t(call.dim)];
      copied = waitForPeer(j);
      if (copied)
        copied = device.copyBlocks(DeviceQueue::Communication, out.data,
                                   peerAddress(j),
                                   planBlockCopy(in.shape, zero, out.shape,
                                                 start, in.shape, elementSize));
    }
    break;
  case CollectiveKind::AllToAll: {
    std::vector<int64_t> piece = in.shape;
    piece[size_t(call.dim)] /= int64_t(n);
    std::vector<int64_t> srcStart = zero;
    srcStart[size_t(call.dim)] = int64_t(index) * piece[size_t(call.dim)];
    for (size_t j = 0; j < n && copied; ++j) {
      std::vector<int64_t> dstStart = zero;
      dstStart[size_t(call.concatDim)] =
          int64_t(j) * piece[size_t(call.concatDim)];
      copied = waitForPeer(j);
      if (copied)
        copied = device.copyBlocks(DeviceQueue::Communication, out.data,
                                   peerAddress(j),
                                   planBlockCopy(in.shape, srcStart, out.shape,
                                                 dstStart, piece, elementSize));
    }
    break;
  }
  case CollectiveKind::CollectivePermute: {
    int64_t members = int64_t(n);
    size_t from =
        size_t(((int64_t(index) - call.shift) % members + members) % members);
    copied = waitForPeer(from);
    if (copied && out.byteSize() > 0 && out.data != peerAddress(from))
      copied = device.copyBlocks(
          DeviceQueue::Communication, out.data, peerAddress(from),
          {Copy2D{0, 0, out.byteSize(), 1, out.byteSize(), out.byteSize()}});
    break;
  }
  default:
    copied = Status::error("not a data movement collective");
  }
  if (copied)
    copied = device.finish(DeviceQueue::Communication, what);
  if (!copied) {
    // Peers may still be reading this member's operand; leave with them.
    host.abort(copied.message());
    (void)host.barrier(group);
    return copied;
  }
  // Nobody may reuse its operand (or its event) while a peer reads it.
  return host.barrier(group);
}

Status CudaRankCommunicator::send(const Tensor &tensor, int32_t peer,
                                  int64_t tag) {
  std::string what = "rank " + std::to_string(rank()) + ": send to rank " +
                     std::to_string(peer);
  HostBuffer memory;
  Tensor staged{memory.allocate(tensor.byteSize()), tensor.dtype, tensor.shape};
  Status copied = toHost(staged.data, tensor, what);
  if (!copied)
    return fail(copied);
  return host.send(staged, peer, tag);
}

Status CudaRankCommunicator::recv(const Tensor &tensor, int32_t peer,
                                  int64_t tag) {
  std::string what = "rank " + std::to_string(rank()) + ": recv from rank " +
                     std::to_string(peer);
  HostBuffer memory;
  Tensor staged{memory.allocate(tensor.byteSize()), tensor.dtype, tensor.shape};
  PARTITA_RETURN_IF_ERROR(host.recv(staged, peer, tag));
  Status copied = toDevice(tensor, staged.data, what);
  if (!copied)
    return fail(copied);
  return Status::ok();
}

class CudaRankWorldImpl final : public CudaRankWorld {
public:
  CudaRankWorldImpl(int32_t worldSize, std::chrono::milliseconds timeout)
      : host(worldSize, timeout) {}
  Communicator &communicator(int32_t rank) override {
    return *communicators[size_t(rank)];
  }

  HostWorld host;
  std::vector<std::unique_ptr<CudaRankCommunicator>> communicators;
};

} // namespace

Status CudaRankWorld::create(const std::vector<CudaDevice *> &devices,
                             std::chrono::milliseconds timeout,
                             std::unique_ptr<CudaRankWorld> &world) {
  if (devices.empty())
    return Status::error("a world of CUDA ranks needs at least one rank");
  for (CudaDevice *device : devices)
    if (!device || device->ordinal() != devices[0]->ordinal())
      return Status::error("the ranks of one process must share one GPU");
  int32_t size = int32_t(devices.size());
  auto created = std::make_unique<CudaRankWorldImpl>(size, timeout);
  for (int32_t rank = 0; rank < size; ++rank)
    created->communicators.push_back(std::make_unique<CudaRankCommunicator>(
        created->host.communicator(rank), impl(*devices[size_t(rank)]), size));
  world = std::move(created);
  return Status::ok();
}
