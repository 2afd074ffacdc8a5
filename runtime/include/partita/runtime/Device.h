//===- Device.h - where a rank's memory and kernels live --------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The executor reaches hardware only through a Device: it allocates the
// activation arena there, stages caller memory to and from it, and runs
// kernel instructions on it. HostDevice is the CPU (kernels of
// HostKernels.h on a ThreadPool); the CUDA device (streams, a caching
// allocator, cuBLASLt, loaded with dlopen) implements the same interface.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_DEVICE_H
#define PARTITA_RUNTIME_DEVICE_H

#include "partita/runtime/HostKernels.h"
#include "partita/runtime/Status.h"

#include <cstddef>
#include <memory>
#include <string>

namespace partita::runtime {

/// A point in one of a device's queues that another queue can wait for
/// (CUDA: an event). Synchronous devices have none.
class DeviceEvent {
public:
  virtual ~DeviceEvent() = default;
};

/// The queues of a device: kernels and copies run on Compute, collectives
/// and transfers on Communication, so the two overlap.
enum class DeviceQueue { Compute, Communication };

class Device {
public:
  virtual ~Device();

  /// `host`, `cuda:0`, ... for messages.
  virtual std::string name() const = 0;

  /// Device memory of `bytes` (a multiple of `alignment`, a power of two).
  virtual Status allocate(size_t bytes, size_t alignment, void **memory) = 0;
  virtual void deallocate(void *memory) = 0;

  /// Whether kernels can read and write host memory directly (caller
  /// buffers and mapped weights are then used in place).
  virtual bool sharesHostMemory() const = 0;
  /// Copies between host and device memory; ordered with the kernels.
  virtual Status copyToDevice(void *device, const void *host, size_t bytes) = 0;
  virtual Status copyToHost(void *host, const void *device, size_t bytes) = 0;

  /// Enqueues (or runs) one kernel instruction.
  virtual Status runKernel(const program::Kernel &kernel,
                           const BufferResolver &buffers) = 0;
  /// Waits until everything enqueued has finished.
  virtual Status synchronize() = 0;

  /// Marks the work issued so far on `queue`; `event` stays null on devices
  /// that run everything synchronously (the host). Thread-safe.
  virtual Status record(DeviceQueue queue,
                        std::shared_ptr<DeviceEvent> &event) {
    (void)queue;
    event = nullptr;
    return Status::ok();
  }
  /// Makes the work issued next on `queue` wait for `event` (null: nothing
  /// to wait for). Thread-safe.
  virtual Status waitFor(DeviceQueue queue, const DeviceEvent *event) {
    (void)queue;
    (void)event;
    return Status::ok();
  }
};

/// The CPU: kernels run synchronously on a thread pool.
class HostDevice final : public Device {
public:
  explicit HostDevice(ThreadPool &pool) : pool(pool) {}

  std::string name() const override { return "host"; }
  Status allocate(size_t bytes, size_t alignment, void **memory) override;
  void deallocate(void *memory) override;
  bool sharesHostMemory() const override { return true; }
  Status copyToDevice(void *device, const void *host, size_t bytes) override;
  Status copyToHost(void *host, const void *device, size_t bytes) override;
  Status runKernel(const program::Kernel &kernel,
                   const BufferResolver &buffers) override;
  Status synchronize() override { return Status::ok(); }

private:
  ThreadPool &pool;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_DEVICE_H
