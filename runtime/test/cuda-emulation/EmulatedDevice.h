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
#include <utility>
#include <vector>

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
  /// Loads another module (a serving artifact's decode module): a launch
  /// finds its function in the modules in load order, as on a GPU.
  Status addModule(const std::string &library);
  /// Makes the device claim memory of its own (sharesHostMemory false, as
  /// a GPU), so that the executor stages inputs and outputs through
  /// copies, which copies() and copiedBytes() count. Its memory stays host
  /// memory, which host communicators can address.
  void setSeparateMemory(bool separate) { separateMemory = separate; }

  std::string name() const override { return "cuda-emulated"; }
  Status allocate(size_t bytes, size_t alignment, void **memory) override;
  void deallocate(void *memory) override;
  bool sharesHostMemory() const override { return !separateMemory; }
  Status copyToDevice(void *device, const void *host, size_t bytes) override;
  Status copyToHost(void *host, const void *device, size_t bytes) override;
  Status runKernel(const program::Kernel &kernel,
                   const BufferResolver &buffers) override;
  Status synchronize() override { return Status::ok(); }

  /// Launches and GEMMs run so far.
  int64_t launches() const { return launchCount; }
  int64_t matmuls() const { return matmulCount; }
  /// Copies between host and device so far, and their bytes.
  int64_t copies() const { return copyCount; }
  int64_t copiedBytes() const { return copyBytes; }

private:
  EmulatedCudaDevice() = default;
  Status launch(const program::CudaLaunch &launch,
                const BufferResolver &buffers);

  /// A loaded module: its library, its launch entry and its run-time
  /// error record (partita_status, or null).
  struct Module {
    void *handle = nullptr;
    void *launchEntry = nullptr;
    unsigned long long *status = nullptr;
  };
  std::vector<Module> modules;
  /// Function name -> (module index, symbol).
  std::map<std::string, std::pair<size_t, void *>> functions;
  bool separateMemory = false;
  int64_t launchCount = 0;
  int64_t matmulCount = 0;
  int64_t copyCount = 0;
  int64_t copyBytes = 0;
};

/// The reference of one cuBLASLt call (exposed for tests).
Status runReferenceMatmul(const program::CublasLtMatmul &matmul,
                          const BufferResolver &buffers);

} // namespace partita::runtime

#endif // PARTITA_TEST_CUDA_EMULATION_EMULATEDDEVICE_H
