//===- EmulatedDevice.cpp - generated CUDA kernels run on the CPU ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "EmulatedDevice.h"

#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/Float16.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <mutex>
#include <vector>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

typedef int (*LaunchEntry)(const char *kernel, void *function, unsigned arity,
                           void *const *args, const unsigned grid[3],
                           const unsigned block[3], char *error,
                           size_t errorSize);

/// Ranks run as threads. Each device loads its own copy of a module (its
/// `__device__` statics are per device, as a module's globals are per
/// context on a GPU: nn.moe's launches pass their routing tables through
/// them); one launch runs at a time process-wide all the same.
std::mutex &launchMutex() {
  static std::mutex mutex;
  return mutex;
}

float loadFloat(const Tensor &tensor, int64_t i) {
  switch (tensor.dtype) {
  case program::F32:
    return static_cast<const float *>(tensor.data)[i];
  case program::F16:
    return f16ToFloat(static_cast<const uint16_t *>(tensor.data)[i]);
  case program::BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(tensor.data)[i]);
  default:
    return NAN;
  }
}

void storeFloat(const Tensor &tensor, int64_t i, float value) {
  switch (tensor.dtype) {
  case program::F32:
    static_cast<float *>(tensor.data)[i] = value;
    break;
  case program::F16:
    static_cast<uint16_t *>(tensor.data)[i] = floatToF16(value);
    break;
  case program::BF16:
    static_cast<uint16_t *>(tensor.data)[i] = floatToBf16(value);
    break;
  default:
    break;
  }
}

bool isFloat(const Tensor &tensor) {
  return tensor.dtype == program::F32 || tensor.dtype == program::F16 ||
         tensor.dtype == program::BF16;
}

} // namespace

Status partita::runtime::buildEmulatedModule(const std::string &compiler,
                                             const std::string &shim,
                                             const std::string &cudaInclude,
                                             const std::string &source,
                                             const std::string &library) {
  std::string command = compiler +
                        " -std=c++17 -O1 -fPIC -shared -fvisibility=hidden "
                        "-Wno-unknown-pragmas -isystem '" +
                        cudaInclude + "' -include '" + shim + "' -x c++ '" +
                        source + "' -o '" + library + "' 2>&1";
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe)
    return Status::error("cannot run " + compiler);
  std::string output;
  char chunk[4096];
  size_t got;
  while ((got = fread(chunk, 1, sizeof(chunk), pipe)) > 0)
    output.append(chunk, got);
  int status = pclose(pipe);
  if (status != 0)
    return Status::error("building " + source + " for the emulator failed:\n" +
                         output.substr(0, 4000));
  return Status::ok();
}

Status EmulatedCudaDevice::create(const std::string &library,
                                  std::unique_ptr<EmulatedCudaDevice> &device) {
  std::unique_ptr<EmulatedCudaDevice> created(new EmulatedCudaDevice());
  PARTITA_RETURN_IF_ERROR(created->addModule(library));
  device = std::move(created);
  return Status::ok();
}

Status EmulatedCudaDevice::addModule(const std::string &library) {
  // dlopen returns the loaded copy for a path it has seen: load a private
  // copy of the file, removed once mapped.
  static std::atomic<unsigned> copies{0};
  std::string copy = library + ".device" + std::to_string(copies++) + ".so";
  {
    std::ifstream in(library, std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
    if (!in || !out)
      return Status::error("cannot copy " + library + " to " + copy);
  }
  Module module;
  module.handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::remove(copy.c_str());
  if (!module.handle)
    return Status::error("cannot load " + library + ": " + dlerror());
  module.launchEntry = dlsym(module.handle, "partita_emu_launch");
  if (!module.launchEntry) {
    dlclose(module.handle);
    return Status::error(library + " was not built with Emulation.h");
  }
  module.status =
      static_cast<unsigned long long *>(dlsym(module.handle, "partita_status"));
  modules.push_back(module);
  return Status::ok();
}

EmulatedCudaDevice::~EmulatedCudaDevice() {
  for (const Module &module : modules)
    dlclose(module.handle);
}

Status EmulatedCudaDevice::allocate(size_t bytes, size_t alignment,
                                    void **memory) {
  *memory = nullptr;
  if (bytes == 0)
    return Status::ok();
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  *memory = std::aligned_alloc(alignment, rounded);
  if (!*memory)
    return Status::error("cuda-emulated: cannot allocate " +
                         std::to_string(bytes) + " bytes");
  std::memset(*memory, 0xff, rounded);
  return Status::ok();
}

void EmulatedCudaDevice::deallocate(void *memory) { std::free(memory); }

Status EmulatedCudaDevice::copyToDevice(void *device, const void *host,
                                        size_t bytes) {
  std::memcpy(device, host, bytes);
  ++copyCount;
  copyBytes += int64_t(bytes);
  return Status::ok();
}

Status EmulatedCudaDevice::copyToHost(void *host, const void *device,
                                      size_t bytes) {
  std::memcpy(host, device, bytes);
  ++copyCount;
  copyBytes += int64_t(bytes);
  return Status::ok();
}

Status EmulatedCudaDevice::runKernel(const program::Kernel &kernel,
                                     const BufferResolver &buffers) {
  if (kernel.cuda_size() == 0)
    return Status::error("kernel '" + kernel.op() +
                         "' has no cuda steps (not compiled for --target "
                         "cuda?)");
  for (const program::CudaStep &step : kernel.cuda()) {
    if (step.has_launch()) {
      PARTITA_RETURN_IF_ERROR(launch(step.launch(), buffers));
    } else if (step.has_matmul()) {
      PARTITA_RETURN_IF_ERROR(runReferenceMatmul(step.matmul(), buffers));
      ++matmulCount;
    } else {
      return Status::error("kernel '" + kernel.op() + "': empty cuda step");
    }
  }
  return Status::ok();
}

Status EmulatedCudaDevice::launch(const program::CudaLaunch &launch,
                                  const BufferResolver &buffers) {
  const std::string &name = launch.function();
  auto found = functions.find(name);
  if (found == functions.end()) {
    for (size_t m = 0; m < modules.size() && found == functions.end(); ++m)
      if (void *symbol = dlsym(modules[m].handle, name.c_str()))
        found = functions.emplace(name, std::pair(m, symbol)).first;
    if (found == functions.end())
      return Status::error("no module has a kernel '" + name + "'");
  }
  const Module &module = modules[found->second.first];
  if (launch.shared_bytes() != 0)
    return Status::error(name + ": dynamic shared memory is not emulated");
  if (launch.grid_size() > 3 || launch.block_size() > 3)
    return Status::error(name + ": more than 3 grid or block dimensions");
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  for (int i = 0; i < launch.grid_size(); ++i)
    grid[i] = launch.grid(i);
  for (int i = 0; i < launch.block_size(); ++i)
    block[i] = launch.block(i);
  std::vector<void *> args;
  for (int32_t id : launch.arguments())
    args.push_back(buffers(id).data);
  std::array<char, 1024> error{};
  std::lock_guard<std::mutex> lock(launchMutex());
  int failed = reinterpret_cast<LaunchEntry>(module.launchEntry)(
      name.c_str(), found->second.second, unsigned(args.size()), args.data(),
      grid, block, error.data(), error.size());
  ++launchCount;
  if (failed)
    return Status::error(std::string("emulated launch: ") + error.data());
  // A kernel that refused its work (CudaDevice reads this after a run).
  if (module.status && module.status[0] != 0) {
    std::string message =
        "cuda-emulated: " + kernelStatusMessage(module.status);
    std::memset(module.status, 0, 4 * sizeof(unsigned long long));
    return Status::error(message);
  }
  return Status::ok();
}

Status
partita::runtime::runReferenceMatmul(const program::CublasLtMatmul &matmul,
                                     const BufferResolver &buffers) {
  Tensor a = buffers(matmul.a()), b = buffers(matmul.b()),
         d = buffers(matmul.d());
  Tensor bias, c;
  if (matmul.bias() >= 0)
    bias = buffers(matmul.bias());
  if (matmul.c() >= 0)
    c = buffers(matmul.c());
  for (const Tensor *t : {&a, &b, &d})
    if (!isFloat(*t))
      return Status::error("cublasLt: operand is not a float type");
  if ((matmul.bias() >= 0 && !isFloat(bias)) ||
      (matmul.c() >= 0 && !isFloat(c)))
    return Status::error("cublasLt: bias or c is not a float type");
  const int64_t m = matmul.m(), n = matmul.n(), k = matmul.k(),
                batch = matmul.batch();
  // Every element each operand's strides reach must lie in its buffer.
  auto fits = [](const Tensor &t, int64_t stride, int64_t batch, int64_t size) {
    return (batch - 1) * stride + size <= t.numElements();
  };
  if (!fits(a, matmul.stride_a(), batch, m * k) ||
      !fits(b, matmul.stride_b(), batch, k * n) ||
      !fits(d, matmul.stride_d(), batch, m * n) ||
      (matmul.c() >= 0 && !fits(c, matmul.stride_d(), batch, m * n)) ||
      (matmul.bias() >= 0 && bias.numElements() < n))
    return Status::error("cublasLt: an operand is smaller than " +
                         std::to_string(batch) + "x" + std::to_string(m) + "x" +
                         std::to_string(n) + "x" + std::to_string(k) +
                         " with its strides");
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t p = 0; p < batch; ++p) {
    const int64_t aBase = p * matmul.stride_a(), bBase = p * matmul.stride_b(),
                  dBase = p * matmul.stride_d();
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0f);
      for (int64_t kk = 0; kk < k; ++kk) {
        float av = loadFloat(a, aBase + i * k + kk);
        for (int64_t j = 0; j < n; ++j)
          row[size_t(j)] += av * loadFloat(b, bBase + kk * n + j);
      }
      for (int64_t j = 0; j < n; ++j) {
        float v = row[size_t(j)];
        if (matmul.c() >= 0)
          v += loadFloat(c, dBase + i * n + j);
        if (matmul.bias() >= 0)
          v += loadFloat(bias, j);
        if (matmul.gelu())
          v = 0.5f * v *
              (1.0f +
               std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        storeFloat(d, dBase + i * n + j, v);
      }
    }
  }
  return Status::ok();
}
