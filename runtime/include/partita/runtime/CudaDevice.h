//===- CudaDevice.h - a GPU as the executor's device ------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA device of the runtime: the primary context of one GPU, a compute
// and a communication stream ordered by events, a caching allocator over
// cuMemAlloc, and the kernel steps of a `--target cuda` program (launches of
// the rank's generated kernels and cuBLASLt matmuls). libcuda and cuBLASLt
// are opened with dlopen when a device is created, so this header and the
// runtime build and load on machines without them; creating a device there
// fails with a message that says why.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CUDADEVICE_H
#define PARTITA_RUNTIME_CUDADEVICE_H

#include "partita/runtime/Device.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace partita::runtime {

/// The deadline of every blocking wait of the CUDA device and the CUDA
/// communicators: PARTITA_TIMEOUT_S seconds when set, else 120 s.
std::chrono::milliseconds defaultCudaTimeout();

struct CudaDeviceOptions {
  /// Bounds every wait for the GPU (synchronize, a collective's completion).
  std::chrono::milliseconds timeout = defaultCudaTimeout();
  /// cuBLASLt's workspace.
  size_t matmulWorkspaceBytes = size_t(32) << 20;
};

class CudaDevice : public Device {
public:
  /// Whether this build has the CUDA device (the toolkit's headers were
  /// found when it was configured).
  static bool available();
  /// The number of GPUs, or an error saying why there are none
  /// (`no CUDA device: libcuda.so.1 not found (...)`, `no GPU found`).
  static Status deviceCount(int32_t &count);
  /// Opens GPU `ordinal`: its primary context, two streams, cuBLASLt.
  static Status create(int32_t ordinal, const CudaDeviceOptions &options,
                       std::unique_ptr<CudaDevice> &device);

  virtual int32_t ordinal() const = 0;
  /// Loads a CUDA module of the rank (a fatbin, cubin or PTX image), whose
  /// extern "C" kernels the program's CudaLaunch steps name: a launch finds
  /// its function in the modules in load order (a serving artifact's
  /// decode module names its functions apart from the prefill's). After
  /// each synchronize the modules' run-time error records
  /// (`partita_status`, written by generated kernels) are read and cleared:
  /// a kernel that refused its work fails the run.
  virtual Status loadModule(const std::string &image) = 0;
  /// Bytes the allocator holds from the driver (in use and cached).
  virtual size_t reservedBytes() const = 0;
};

class LoadedArtifact;

/// The message of a generated module's run-time error record
/// (`partita_status`: a code and three values; lib/Target/CUDA's
/// Prelude.cuh): `kv_cache_write: writing 1 tokens at slot 16 overflows
/// the cache of 16 slots`, as the host kernel says it.
std::string kernelStatusMessage(const unsigned long long record[4]);

/// The CUDA module (fatbin) of `rank` of `artifact`, as its manifest names
/// it (`ranks[].cuda.fatbin`; with `decode`, a serving artifact's
/// `ranks[].cuda.decode_fatbin`), whose hash the loader has verified.
Status readCudaModule(const LoadedArtifact &artifact, int32_t rank,
                      std::string &image, bool decode = false);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_CUDADEVICE_H
