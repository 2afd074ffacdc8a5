//===- EmulatedDevice.h - generated CUDA kernels run on the CPU -*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A Device that runs the `cuda` steps of a cuda program's kernels on the
// host: launches call the generated kernels of the rank's module, built as
// a host shared library with Emulation.h (buildEmulatedModule), through the
// module's fiber scheduler; cuBLASLt calls are a reference GEMM with
// CublasLtMatmul's semantics (fp32 accumulation, round to nearest even on
// the store). Memory is host memory, poisoned with 0xff bytes (NaN) when
// allocated so that a kernel reading what nothing wrote shows up.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_CUDA_EMULATION_EMULATEDDEVICE_H
#define PARTITA_TEST_CUDA_EMULATION_EMULATEDDEVICE_H

#include "partita/runtime/Device.h"

#include <map>
#include <memory>
#include <string>

namespace partita::runtime {

/// Compiles the generated CUDA source at `source` into the shared library
/// `library` with `compiler` (g++), force-including `shim` (Emulation.h)
/// with the CUDA headers of `cudaInclude`.
Status buildEmulatedModule(const std::string &compiler, const std::string &shim,
                           const std::string &cudaInclude,
                           const std::string &source,
                           const std::string &library);

class EmulatedCudaDevice final : public Device {
public:
  /// Loads `library` (a module built by buildEmulatedModule).
  static Status create(const std::string &library,
                       std::unique_ptr<EmulatedCudaDevice> &device);
  ~EmulatedCudaDevice() override;

  std::string name() const override { return "cuda-emulated"; }
  Status allocate(size_t bytes, size_t alignment, void **memory) override;
  void deallocate(void *memory) override;
  bool sharesHostMemory() const override { return true; }
  Status copyToDevice(void *device, const void *host, size_t bytes) override;
  Status copyToHost(void *host, const void *device, size_t bytes) override;
  Status runKernel(const program::Kernel &kernel,
                   const BufferResolver &buffers) override;
  Status synchronize() override { return Status::ok(); }

  /// Launches and GEMMs run so far.
  int64_t launches() const { return launchCount; }
  int64_t matmuls() const { return matmulCount; }

private:
  EmulatedCudaDevice() = default;
  Status launch(const program::CudaLaunch &launch,
                const BufferResolver &buffers);

  void *handle = nullptr;
  void *launchEntry = nullptr;
  std::map<std::string, void *> functions;
  int64_t launchCount = 0;
  int64_t matmulCount = 0;
};

/// The reference of one cuBLASLt call (exposed for tests).
Status runReferenceMatmul(const program::CublasLtMatmul &matmul,
                          const BufferResolver &buffers);

} // namespace partita::runtime

#endif // PARTITA_TEST_CUDA_EMULATION_EMULATEDDEVICE_H
