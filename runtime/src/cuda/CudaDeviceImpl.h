//===- CudaDeviceImpl.h - the CUDA device's internals -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What the CUDA communicators need of the device beyond the Device
// interface: the driver table, the streams, the allocator, and waits on
// the GPU with the device's deadline.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CUDA_CUDADEVICEIMPL_H
#define PARTITA_RUNTIME_CUDA_CUDADEVICEIMPL_H

#include "CudaApi.h"
#include "partita/runtime/BlockCopy.h"

#include "partita/runtime/CudaDevice.h"

#include <functional>

namespace partita::runtime::cuda {

class CudaDeviceImpl : public CudaDevice {
public:
  virtual const DriverApi &driver() const = 0;
  virtual CUstream stream(DeviceQueue queue) const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  /// Makes the device's context current on the calling thread (every
  /// thread that issues CUDA work needs it).
  virtual Status makeCurrent() = 0;
  /// Waits, polling, until the work issued so far on `queue` has finished:
  /// fails when it fails, when `healthy` fails (an NCCL communicator's
  /// asynchronous error) or at the deadline, naming `what`.
  virtual Status finish(DeviceQueue queue, const std::string &what,
                        const std::function<Status()> &healthy = nullptr) = 0;
  /// The CUDA event behind an event this device recorded.
  virtual CUevent eventHandle(const DeviceEvent &event) const = 0;
  /// Enqueues `copies` from `source` to `destination` (device memory) on
  /// `queue`.
  virtual Status copyBlocks(DeviceQueue queue, void *destination,
                            const void *source,
                            const std::vector<Copy2D> &copies) = 0;
};

/// The device behind `device`, which must be a CudaDevice.
inline CudaDeviceImpl &impl(CudaDevice &device) {
  return static_cast<CudaDeviceImpl &>(device);
}

} // namespace partita::runtime::cuda

#endif // PARTITA_RUNTIME_CUDA_CUDADEVICEIMPL_H
