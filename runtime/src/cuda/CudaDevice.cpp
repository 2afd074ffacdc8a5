//===- CudaDevice.cpp - a GPU as the executor's device --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

using namespace partita::runtime;
using namespace partita::runtime::cuda;
namespace program = partita::program;
using Clock = std::chrono::steady_clock;

std::chrono::milliseconds partita::runtime::defaultCudaTimeout() {
  if (const char *text = std::getenv("PARTITA_TIMEOUT_S")) {
    char *end = nullptr;
    double seconds = std::strtod(text, &end);
    if (end != text && *end == '\0' && seconds > 0 && seconds < 1e7)
      return std::chrono::milliseconds(int64_t(seconds * 1000));
  }
  return std::chrono::seconds(120);
}

bool CudaDevice::available() { return true; }

Status CudaDevice::deviceCount(int32_t &count) {
  count = 0;
  const DriverApi *api = nullptr;
  PARTITA_RETURN_IF_ERROR(driverApi(api));
  int found = 0;
  PARTITA_RETURN_IF_ERROR(
      check(*api, api->cuDeviceGetCount(&found), "cuDeviceGetCount"));
  count = found;
  return Status::ok();
}

namespace {

std::string durationString(std::chrono::milliseconds timeout) {
  if (timeout.count() % 1000 == 0)
    return std::to_string(timeout.count() / 1000) + " s";
  return std::to_string(timeout.count()) + " ms";
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

/// Events are recorded per communication instruction; a pool keeps
/// cuEventCreate off that path.
struct EventPool {
  const DriverApi *api = nullptr;
  std::mutex mutex;
  std::vector<CUevent> free;

  ~EventPool() {
    for (CUevent event : free)
      api->cuEventDestroy(event);
  }
};

struct CudaEvent final : DeviceEvent {
  CudaEvent(std::shared_ptr<EventPool> pool, CUevent event)
      : pool(std::move(pool)), event(event) {}
  ~CudaEvent() override {
    std::lock_guard<std::mutex> lock(pool->mutex);
    pool->free.push_back(event);
  }
  std::shared_ptr<EventPool> pool;
  CUevent event;
};

//===----------------------------------------------------------------------===//
// Allocator
//===----------------------------------------------------------------------===//

/// A caching allocator over cuMemAlloc: freed blocks are kept and handed
/// out again for a request of the same rounded size; when the driver runs
/// out, the cached blocks are released and the request retried.
class CachingAllocator {
public:
  explicit CachingAllocator(const DriverApi &api) : api(api) {}
  ~CachingAllocator() {
    for (auto &[pointer, bytes] : used)
      api.cuMemFree(pointer);
    releaseCached();
  }

  Status allocate(size_t bytes, CUdeviceptr &pointer) {
    size_t size = roundedSize(bytes);
    std::lock_guard<std::mutex> lock(mutex);
    auto cached = cache.find(size);
    if (cached != cache.end()) {
      pointer = cached->second;
      cache.erase(cached);
      used[pointer] = size;
      return Status::ok();
    }
    CUresult result = api.cuMemAlloc(&pointer, size);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
      releaseCached();
      result = api.cuMemAlloc(&pointer, size);
    }
    PARTITA_RETURN_IF_ERROR(
        check(api, result, "cuMemAlloc(" + std::to_string(size) + " bytes)"));
    used[pointer] = size;
    reserved += size;
    return Status::ok();
  }

  void deallocate(CUdeviceptr pointer) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = used.find(pointer);
    if (it == used.end())
      return;
    cache.emplace(it->second, pointer);
    used.erase(it);
  }

  size_t reservedBytes() const {
    std::lock_guard<std::mutex> lock(mutex);
    return reserved;
  }

private:
  /// 512-byte steps up to 1 MiB, 2 MiB steps above: small buffers waste
  /// little, large ones of nearly equal size share a bucket.
  static size_t roundedSize(size_t bytes) {
    size_t step = bytes <= (size_t(1) << 20) ? 512 : size_t(2) << 20;
    return std::max<size_t>(step, (bytes + step - 1) / step * step);
  }
  void releaseCached() {
    for (auto &[size, pointer] : cache) {
      api.cuMemFree(pointer);
      reserved -= size;
    }
    cache.clear();
  }

  const DriverApi &api;
  mutable std::mutex mutex;
  std::multimap<size_t, CUdeviceptr> cache;
  std::unordered_map<CUdeviceptr, size_t> used;
  size_t reserved = 0;
};

//===----------------------------------------------------------------------===//
// cuBLASLt plans
//===----------------------------------------------------------------------===//

/// What fixes a cuBLASLt plan: everything but the pointers, save how
/// aligned they are.
struct MatmulShape {
  DType a, b, d, c, bias;
  int64_t m, n, k, batch, strideA, strideB, strideD;
  bool gelu;
  uint32_t alignA = 256, alignB = 256, alignC = 256, alignD = 256;

  auto tie() const {
    return std::tie(a, b, d, c, bias, m, n, k, batch, strideA, strideB, strideD,
                    gelu, alignA, alignB, alignC, alignD);
  }
  bool operator<(const MatmulShape &other) const { return tie() < other.tie(); }
};

struct MatmulPlan {
  const CublasLtApi *api = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layoutA = nullptr, layoutB = nullptr,
                         layoutC = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~MatmulPlan() {
    if (!api)
      return;
    for (cublasLtMatrixLayout_t layout : {layoutA, layoutB, layoutC})
      if (layout)
        api->cublasLtMatrixLayoutDestroy(layout);
    if (desc)
      api->cublasLtMatmulDescDestroy(desc);
  }
};

bool storageType(DType dtype, cudaDataType_t &type) {
  switch (dtype) {
  case program::F32:
    type = CUDA_R_32F;
    return true;
  case program::F16:
    type = CUDA_R_16F;
    return true;
  case program::BF16:
    type = CUDA_R_16BF;
    return true;
  default:
    return false;
  }
}

/// The alignment (up to cuBLASLt's default assumption of 256 bytes) of every
/// batch's matrix: arena buffers are only 64-byte aligned, and an algorithm
/// chosen for 256-byte operands may fault or fail on them.
uint32_t matmulAlignment(const void *pointer, int64_t batch, int64_t stride,
                         DType dtype) {
  uint64_t bits = reinterpret_cast<uintptr_t>(pointer) | 256;
  if (batch > 1 && stride > 0)
    bits |= uint64_t(stride) * dtypeSize(dtype);
  return uint32_t(bits & (~bits + 1));
}

std::string matmulString(const MatmulShape &shape) {
  return "cuBLASLt matmul [" + std::to_string(shape.batch) + ", " +
         std::to_string(shape.m) + ", " + std::to_string(shape.k) + "] x [" +
         std::to_string(shape.batch) + ", " + std::to_string(shape.k) + ", " +
         std::to_string(shape.n) + "] " + dtypeName(shape.a) + "/" +
         dtypeName(shape.b) + " -> " + dtypeName(shape.d) +
         (shape.bias != program::DTYPE_UNSPECIFIED ? " +bias" : "") +
         (shape.c != program::DTYPE_UNSPECIFIED ? " +c" : "") +
         (shape.gelu ? " gelu" : "");
}

//===----------------------------------------------------------------------===//
// The device
//===----------------------------------------------------------------------===//

class CudaDeviceOnGpu final : public CudaDeviceImpl {
public:
  CudaDeviceOnGpu(const DriverApi &api, int32_t ordinal,
                  const CudaDeviceOptions &options)
      : api(api), index(ordinal), options(options),
        allocator(std::make_unique<CachingAllocator>(api)) {}
  ~CudaDeviceOnGpu() override;

  Status open();

  // Device
  std::string name() const override { return "cuda:" + std::to_string(index); }
  Status allocate(size_t bytes, size_t alignment, void **memory) override;
  void deallocate(void *memory) override;
  bool sharesHostMemory() const override { return false; }
  Status copyToDevice(void *device, const void *host, size_t bytes) override;
  Status copyToHost(void *host, const void *device, size_t bytes) override;
  Status runKernel(const program::Kernel &kernel,
                   const BufferResolver &buffers) override;
  Status synchronize() override;
  Status record(DeviceQueue queue,
                std::shared_ptr<DeviceEvent> &event) override;
  Status waitFor(DeviceQueue queue, const DeviceEvent *event) override;

  // CudaDevice
  int32_t ordinal() const override { return index; }
  Status loadModule(const std::string &image) override;
  size_t reservedBytes() const override { return allocator->reservedBytes(); }

  // CudaDeviceImpl
  const DriverApi &driver() const override { return api; }
  CUstream stream(DeviceQueue queue) const override {
    return queue == DeviceQueue::Compute ? computeStream : communicationStream;
  }
  std::chrono::milliseconds timeout() const override { return options.timeout; }
  Status makeCurrent() override {
    return check(api, api.cuCtxSetCurrent(context),
                 name() + ": cuCtxSetCurrent");
  }
  Status finish(DeviceQueue queue, const std::string &what,
                const std::function<Status()> &healthy) override;
  CUevent eventHandle(const DeviceEvent &event) const override {
    return static_cast<const CudaEvent &>(event).event;
  }
  Status copyBlocks(DeviceQueue queue, void *destination, const void *source,
                    const std::vector<Copy2D> &copies) override;

private:
  Status launch(const program::CudaLaunch &launch,
                const BufferResolver &buffers);
  Status matmul(const program::CublasLtMatmul &matmul,
                const BufferResolver &buffers);
  Status plan(const MatmulShape &shape, MatmulPlan *&plan);
  Status newEvent(std::shared_ptr<DeviceEvent> &event);

  const DriverApi &api;
  int32_t index;
  CudaDeviceOptions options;
  std::string gpuName;
  CUdevice device = 0;
  CUcontext context = nullptr;
  bool retained = false;
  CUstream computeStream = nullptr, communicationStream = nullptr;
  std::shared_ptr<EventPool> events = std::make_shared<EventPool>();
  std::unique_ptr<CachingAllocator> allocator;
  /// The loaded modules, in load order, and each one's run-time error
  /// record (`partita_status`, 4 x u64; 0 where a module has none).
  std::vector<CUmodule> modules;
  std::vector<CUdeviceptr> statuses;
  std::map<std::string, CUfunction> functions;
  Status checkStatuses();
  const CublasLtApi *lt = nullptr;
  cublasLtHandle_t ltHandle = nullptr;
  CUdeviceptr workspace = 0;
  std::map<MatmulShape, std::unique_ptr<MatmulPlan>> plans;
};

Status CudaDeviceOnGpu::open() {
  events->api = &api;
  int count = 0;
  PARTITA_RETURN_IF_ERROR(
      check(api, api.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (index < 0 || index >= count)
    return Status::error("no CUDA device " + std::to_string(index) +
                         ": this machine has " + std::to_string(count) +
                         " GPU" + (count == 1 ? "" : "s"));
  PARTITA_RETURN_IF_ERROR(
      check(api, api.cuDeviceGet(&device, index), name() + ": cuDeviceGet"));
  char text[256] = {};
  if (api.cuDeviceGetName(text, sizeof(text) - 1, device) == CUDA_SUCCESS)
    gpuName = text;
  PARTITA_RETURN_IF_ERROR(check(api,
                                api.cuDevicePrimaryCtxRetain(&context, device),
                                name() + ": cuDevicePrimaryCtxRetain"));
  retained = true;
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  PARTITA_RETURN_IF_ERROR(
      check(api, api.cuStreamCreate(&computeStream, CU_STREAM_NON_BLOCKING),
            name() + ": cuStreamCreate"));
  PARTITA_RETURN_IF_ERROR(check(
      api, api.cuStreamCreate(&communicationStream, CU_STREAM_NON_BLOCKING),
      name() + ": cuStreamCreate"));
  return Status::ok();
}

CudaDeviceOnGpu::~CudaDeviceOnGpu() {
  if (!retained)
    return;
  if (makeCurrent()) {
    (void)synchronize();
    plans.clear();
    if (ltHandle)
      lt->cublasLtDestroy(ltHandle);
    if (workspace)
      allocator->deallocate(workspace);
    for (CUmodule module : modules)
      api.cuModuleUnload(module);
    for (CUstream stream : {computeStream, communicationStream})
      if (stream)
        api.cuStreamDestroy(stream);
  }
  // The allocator's blocks go back before the context.
  allocator.reset();
  api.cuDevicePrimaryCtxRelease(device);
}

Status CudaDeviceOnGpu::allocate(size_t bytes, size_t alignment,
                                 void **memory) {
  *memory = nullptr;
  if (bytes == 0)
    return Status::ok();
  // cuMemAlloc aligns to at least 256 bytes.
  if (alignment > 256 || (alignment & (alignment - 1)) != 0)
    return Status::error(name() + ": unsupported alignment " +
                         std::to_string(alignment));
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  CUdeviceptr pointer = 0;
  Status allocated = allocator->allocate(bytes, pointer);
  if (!allocated)
    return Status::error(name() + ": " + allocated.message());
  *memory = reinterpret_cast<void *>(pointer);
  return Status::ok();
}

void CudaDeviceOnGpu::deallocate(void *memory) {
  if (memory)
    allocator->deallocate(reinterpret_cast<CUdeviceptr>(memory));
}

Status CudaDeviceOnGpu::copyToDevice(void *device, const void *host,
                                     size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  return check(api,
               api.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(device),
                                     host, bytes, computeStream),
               name() + ": copy of " + std::to_string(bytes) +
                   " bytes to the device");
}

Status CudaDeviceOnGpu::copyToHost(void *host, const void *device,
                                   size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  return check(
      api,
      api.cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(device), bytes,
                            computeStream),
      name() + ": copy of " + std::to_string(bytes) + " bytes to the host");
}

Status CudaDeviceOnGpu::newEvent(std::shared_ptr<DeviceEvent> &event) {
  CUevent handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(events->mutex);
    if (!events->free.empty()) {
      handle = events->free.back();
      events->free.pop_back();
    }
  }
  if (!handle)
    PARTITA_RETURN_IF_ERROR(
        check(api, api.cuEventCreate(&handle, CU_EVENT_DISABLE_TIMING),
              name() + ": cuEventCreate"));
  event = std::make_shared<CudaEvent>(events, handle);
  return Status::ok();
}

Status CudaDeviceOnGpu::record(DeviceQueue queue,
                               std::shared_ptr<DeviceEvent> &event) {
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  PARTITA_RETURN_IF_ERROR(newEvent(event));
  return check(
      api,
      api.cuEventRecord(static_cast<CudaEvent &>(*event).event, stream(queue)),
      name() + ": cuEventRecord");
}

Status CudaDeviceOnGpu::waitFor(DeviceQueue queue, const DeviceEvent *event) {
  if (!event)
    return Status::ok();
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  return check(
      api,
      api.cuStreamWaitEvent(stream(queue),
                            static_cast<const CudaEvent *>(event)->event, 0),
      name() + ": cuStreamWaitEvent");
}

Status CudaDeviceOnGpu::finish(DeviceQueue queue, const std::string &what,
                               const std::function<Status()> &healthy) {
  std::shared_ptr<DeviceEvent> marker;
  PARTITA_RETURN_IF_ERROR(record(queue, marker));
  CUevent event = static_cast<CudaEvent &>(*marker).event;
  auto start = Clock::now();
  auto deadline = start + options.timeout;
  // Spin briefly (most waits are short), then back off to sleeps.
  for (unsigned polls = 0;; ++polls) {
    CUresult result = api.cuEventQuery(event);
    if (result == CUDA_SUCCESS)
      return Status::ok();
    if (result != CUDA_ERROR_NOT_READY)
      return check(api, result, name() + ": " + what);
    if (healthy)
      PARTITA_RETURN_IF_ERROR(healthy());
    if (Clock::now() > deadline)
      return Status::error(name() + ": " + what + " did not finish within " +
                           durationString(options.timeout));
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status CudaDeviceOnGpu::copyBlocks(DeviceQueue queue, void *destination,
                                   const void *source,
                                   const std::vector<Copy2D> &copies) {
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  CUdeviceptr to = reinterpret_cast<CUdeviceptr>(destination);
  CUdeviceptr from = reinterpret_cast<CUdeviceptr>(source);
  // cuMemcpy2D's pitches are bounded; beyond that, one copy per row.
  constexpr uint64_t kMaxPitch = uint64_t(1) << 30;
  for (const Copy2D &copy : copies) {
    Status status = Status::ok();
    if (copy.height == 1 || (copy.srcPitch == copy.widthBytes &&
                             copy.dstPitch == copy.widthBytes)) {
      status = check(
          api,
          api.cuMemcpyDtoDAsync(to + copy.dstOffset, from + copy.srcOffset,
                                copy.widthBytes * copy.height, stream(queue)),
          name() + ": cuMemcpyDtoDAsync");
    } else if (copy.srcPitch <= kMaxPitch && copy.dstPitch <= kMaxPitch) {
      CUDA_MEMCPY2D params{};
      params.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      params.srcDevice = from + copy.srcOffset;
      params.srcPitch = copy.srcPitch;
      params.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      params.dstDevice = to + copy.dstOffset;
      params.dstPitch = copy.dstPitch;
      params.WidthInBytes = copy.widthBytes;
      params.Height = copy.height;
      status = check(api, api.cuMemcpy2DAsync(&params, stream(queue)),
                     name() + ": cuMemcpy2DAsync");
    } else {
      for (uint64_t row = 0; row < copy.height && status; ++row)
        status = check(
            api,
            api.cuMemcpyDtoDAsync(to + copy.dstOffset + row * copy.dstPitch,
                                  from + copy.srcOffset + row * copy.srcPitch,
                                  copy.widthBytes, stream(queue)),
            name() + ": cuMemcpyDtoDAsync");
    }
    PARTITA_RETURN_IF_ERROR(status);
  }
  return Status::ok();
}

Status CudaDeviceOnGpu::synchronize() {
  PARTITA_RETURN_IF_ERROR(
      finish(DeviceQueue::Communication, "the communication stream", nullptr));
  PARTITA_RETURN_IF_ERROR(
      finish(DeviceQueue::Compute, "the compute stream", nullptr));
  return checkStatuses();
}

Status CudaDeviceOnGpu::checkStatuses() {
  for (CUdeviceptr status : statuses) {
    if (!status)
      continue;
    unsigned long long record[4] = {0, 0, 0, 0};
    PARTITA_RETURN_IF_ERROR(check(
        api,
        api.cuMemcpyDtoHAsync(record, status, sizeof(record), computeStream),
        name() + ": reading the kernels' error record"));
    PARTITA_RETURN_IF_ERROR(
        finish(DeviceQueue::Compute, "the compute stream", nullptr));
    if (record[0] == 0)
      continue;
    PARTITA_RETURN_IF_ERROR(check(
        api, api.cuMemsetD8Async(status, 0, sizeof(record), computeStream),
        name() + ": clearing the kernels' error record"));
    PARTITA_RETURN_IF_ERROR(
        finish(DeviceQueue::Compute, "the compute stream", nullptr));
    return Status::error(name() + ": " + kernelStatusMessage(record));
  }
  return Status::ok();
}

Status CudaDeviceOnGpu::loadModule(const std::string &image) {
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  CUmodule module = nullptr;
  PARTITA_RETURN_IF_ERROR(
      check(api, api.cuModuleLoadData(&module, image.c_str()),
            name() +
                ": loading the rank's CUDA module (built for "
                "another architecture than " +
                (gpuName.empty() ? "this GPU" : gpuName) + "?)"));
  modules.push_back(module);
  CUdeviceptr status = 0;
  size_t bytes = 0;
  if (api.cuModuleGetGlobal(&status, &bytes, module, "partita_status") !=
          CUDA_SUCCESS ||
      bytes < 4 * sizeof(unsigned long long))
    status = 0; // A module of an older generator: nothing to check.
  statuses.push_back(status);
  return Status::ok();
}

Status CudaDeviceOnGpu::runKernel(const program::Kernel &kernel,
                                  const BufferResolver &buffers) {
  if (kernel.cuda_size() == 0)
    return Status::error(kernel.op() +
                         ": the kernel has no CUDA steps (compiled for host? "
                         "a cuda device runs programs of --target cuda)");
  PARTITA_RETURN_IF_ERROR(makeCurrent());
  for (const program::CudaStep &step : kernel.cuda()) {
    Status status = Status::ok();
    if (step.has_launch())
      status = launch(step.launch(), buffers);
    else if (step.has_matmul())
      status = matmul(step.matmul(), buffers);
    else
      status = Status::error("empty CUDA step");
    if (!status)
      return Status::error(kernel.op() + ": " + status.message());
  }
  return Status::ok();
}

Status CudaDeviceOnGpu::launch(const program::CudaLaunch &launch,
                               const BufferResolver &buffers) {
  std::string what = "kernel " + launch.function();
  if (modules.empty())
    return Status::error(what + ": no CUDA module is loaded for this rank");
  auto found = functions.find(launch.function());
  if (found == functions.end()) {
    CUfunction function = nullptr;
    CUresult result = CUDA_ERROR_NOT_FOUND;
    for (CUmodule module : modules) {
      result =
          api.cuModuleGetFunction(&function, module, launch.function().c_str());
      if (result == CUDA_SUCCESS)
        break;
    }
    PARTITA_RETURN_IF_ERROR(check(api, result, what + ": cuModuleGetFunction"));
    // Above 48 KiB, dynamic shared memory must be asked for.
    if (launch.shared_bytes() > 48 * 1024)
      PARTITA_RETURN_IF_ERROR(
          check(api,
                api.cuFuncSetAttribute(
                    function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    int(launch.shared_bytes())),
                what + ": " + std::to_string(launch.shared_bytes()) +
                    " bytes of shared memory"));
    found = functions.emplace(launch.function(), function).first;
  }
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  if (launch.grid_size() > 3 || launch.block_size() > 3)
    return Status::error(what + ": grid and block have at most 3 dimensions");
  for (int i = 0; i < launch.grid_size(); ++i)
    grid[i] = launch.grid(i);
  for (int i = 0; i < launch.block_size(); ++i)
    block[i] = launch.block(i);
  std::vector<CUdeviceptr> pointers;
  pointers.reserve(size_t(launch.arguments_size()));
  for (int32_t id : launch.arguments()) {
    Tensor tensor = buffers(id);
    if (tensor.dtype == program::DTYPE_UNSPECIFIED)
      return Status::error(what + ": argument buffer " + std::to_string(id) +
                           " is not a buffer of the program");
    pointers.push_back(reinterpret_cast<CUdeviceptr>(tensor.data));
  }
  std::vector<void *> parameters;
  for (CUdeviceptr &pointer : pointers)
    parameters.push_back(&pointer);
  return check(api,
               api.cuLaunchKernel(found->second, grid[0], grid[1], grid[2],
                                  block[0], block[1], block[2],
                                  launch.shared_bytes(), computeStream,
                                  parameters.data(), nullptr),
               what + ": cuLaunchKernel");
}

Status CudaDeviceOnGpu::plan(const MatmulShape &shape, MatmulPlan *&plan) {
  auto found = plans.find(shape);
  if (found != plans.end()) {
    plan = found->second.get();
    return Status::ok();
  }
  std::string what = matmulString(shape);
  if (!lt) {
    Status loaded = cublasLtApi(lt);
    if (!loaded)
      return Status::error(what + ": " + loaded.message());
    PARTITA_RETURN_IF_ERROR(
        check(*lt, lt->cublasLtCreate(&ltHandle), "cublasLtCreate"));
    void *memory = nullptr;
    PARTITA_RETURN_IF_ERROR(
        allocate(options.matmulWorkspaceBytes, 256, &memory));
    workspace = reinterpret_cast<CUdeviceptr>(memory);
  }
  cudaDataType_t typeA, typeB, typeD, typeC, typeBias = CUDA_R_32F;
  if (!storageType(shape.a, typeA) || !storageType(shape.b, typeB) ||
      !storageType(shape.d, typeD) ||
      (shape.bias != program::DTYPE_UNSPECIFIED &&
       !storageType(shape.bias, typeBias)))
    return Status::error(what + ": cuBLASLt takes f32, f16 and bf16 only");
  typeC = typeD;
  if (shape.c != program::DTYPE_UNSPECIFIED && shape.c != shape.d)
    return Status::error(what + ": c must have d's type");
  auto created = std::make_unique<MatmulPlan>();
  created->api = lt;
  auto set = [&](auto setter, auto object, auto attribute,
                 const auto &value) -> Status {
    return check(*lt, setter(object, attribute, &value, sizeof(value)),
                 what + ": setting a cuBLASLt attribute");
  };
  PARTITA_RETURN_IF_ERROR(
      check(*lt,
            lt->cublasLtMatmulDescCreate(&created->desc, CUBLAS_COMPUTE_32F,
                                         CUDA_R_32F),
            what + ": cublasLtMatmulDescCreate"));
  bool bias = shape.bias != program::DTYPE_UNSPECIFIED;
  cublasLtEpilogue_t epilogue =
      shape.gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                 : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  PARTITA_RETURN_IF_ERROR(set(lt->cublasLtMatmulDescSetAttribute, created->desc,
                              CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
  if (bias)
    PARTITA_RETURN_IF_ERROR(
        set(lt->cublasLtMatmulDescSetAttribute, created->desc,
            CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(typeBias)));
  // Row-major D = A B is column-major D^T = B^T A^T: cuBLASLt's first
  // operand is b viewed as an n x k column-major matrix, its second a as
  // k x m, and D is n x m, all with the row-major leading dimension.
  auto layout = [&](cublasLtMatrixLayout_t &made, cudaDataType_t type,
                    int64_t rows, int64_t cols, int64_t stride) -> Status {
    PARTITA_RETURN_IF_ERROR(
        check(*lt,
              lt->cublasLtMatrixLayoutCreate(&made, type, uint64_t(rows),
                                             uint64_t(cols), rows),
              what + ": cublasLtMatrixLayoutCreate"));
    if (shape.batch == 1)
      return Status::ok();
    PARTITA_RETURN_IF_ERROR(set(lt->cublasLtMatrixLayoutSetAttribute, made,
                                CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                int32_t(shape.batch)));
    return set(lt->cublasLtMatrixLayoutSetAttribute, made,
               CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  };
  PARTITA_RETURN_IF_ERROR(
      layout(created->layoutA, typeB, shape.n, shape.k, shape.strideB));
  PARTITA_RETURN_IF_ERROR(
      layout(created->layoutB, typeA, shape.k, shape.m, shape.strideA));
  PARTITA_RETURN_IF_ERROR(
      layout(created->layoutC, typeC, shape.n, shape.m, shape.strideD));

  cublasLtMatmulPreference_t preference = nullptr;
  PARTITA_RETURN_IF_ERROR(check(*lt,
                                lt->cublasLtMatmulPreferenceCreate(&preference),
                                what + ": cublasLtMatmulPreferenceCreate"));
  uint64_t workspaceBytes = options.matmulWorkspaceBytes;
  Status heuristic =
      set(lt->cublasLtMatmulPreferenceSetAttribute, preference,
          CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspaceBytes);
  // cuBLASLt's operand A is our b, its B our a (see the layouts above).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] =
      {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, shape.alignB},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, shape.alignA},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, shape.alignC},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, shape.alignD}};
  for (const auto &[attribute, bytes] : alignments)
    if (heuristic)
      heuristic = set(lt->cublasLtMatmulPreferenceSetAttribute, preference,
                      attribute, bytes);
  cublasLtMatmulHeuristicResult_t result{};
  int results = 0;
  if (heuristic)
    heuristic = check(*lt,
                      lt->cublasLtMatmulAlgoGetHeuristic(
                          ltHandle, created->desc, created->layoutA,
                          created->layoutB, created->layoutC, created->layoutC,
                          preference, 1, &result, &results),
                      what + ": cublasLtMatmulAlgoGetHeuristic");
  lt->cublasLtMatmulPreferenceDestroy(preference);
  PARTITA_RETURN_IF_ERROR(heuristic);
  if (results == 0)
    return Status::error(what + ": cuBLASLt has no algorithm for it");
  created->algo = result.algo;
  plan = created.get();
  plans.emplace(shape, std::move(created));
  return Status::ok();
}

Status CudaDeviceOnGpu::matmul(const program::CublasLtMatmul &step,
                               const BufferResolver &buffers) {
  Tensor a = buffers(step.a()), b = buffers(step.b()), d = buffers(step.d());
  Tensor c, bias;
  if (step.c() >= 0)
    c = buffers(step.c());
  if (step.bias() >= 0)
    bias = buffers(step.bias());
  MatmulShape shape{a.dtype,         b.dtype,         d.dtype,
                    c.dtype,         bias.dtype,      step.m(),
                    step.n(),        step.k(),        step.batch(),
                    step.stride_a(), step.stride_b(), step.stride_d(),
                    step.gelu()};
  shape.alignA = matmulAlignment(a.data, shape.batch, shape.strideA, a.dtype);
  shape.alignB = matmulAlignment(b.data, shape.batch, shape.strideB, b.dtype);
  shape.alignD = matmulAlignment(d.data, shape.batch, shape.strideD, d.dtype);
  shape.alignC = step.c() >= 0 ? matmulAlignment(c.data, shape.batch,
                                                 shape.strideD, c.dtype)
                               : shape.alignD;
  std::string what = matmulString(shape);
  if (a.dtype == program::DTYPE_UNSPECIFIED ||
      b.dtype == program::DTYPE_UNSPECIFIED ||
      d.dtype == program::DTYPE_UNSPECIFIED ||
      (step.c() >= 0 && c.dtype == program::DTYPE_UNSPECIFIED) ||
      (step.bias() >= 0 && bias.dtype == program::DTYPE_UNSPECIFIED))
    return Status::error(what + ": an operand is not a buffer of the program");
  if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0 || shape.batch <= 0 ||
      shape.batch > INT32_MAX || shape.strideA < 0 || shape.strideB < 0 ||
      shape.strideD < 0)
    return Status::error(what + ": invalid sizes or strides");
  // Every byte the call touches must lie in its buffer.
  auto covers = [&](const Tensor &tensor, int64_t stride, int64_t matrix,
                    const char *name) -> Status {
    int64_t extent = (shape.batch - 1) * stride + matrix;
    if (tensor.numElements() < extent)
      return Status::error(what + ": " + name + " (" + dtypeName(tensor.dtype) +
                           " " + shapeString(tensor.shape) + ") holds " +
                           std::to_string(tensor.numElements()) +
                           " elements, the call reads " +
                           std::to_string(extent));
    return Status::ok();
  };
  PARTITA_RETURN_IF_ERROR(covers(a, shape.strideA, shape.m * shape.k, "a"));
  PARTITA_RETURN_IF_ERROR(covers(b, shape.strideB, shape.k * shape.n, "b"));
  PARTITA_RETURN_IF_ERROR(covers(d, shape.strideD, shape.m * shape.n, "d"));
  if (step.c() >= 0)
    PARTITA_RETURN_IF_ERROR(covers(c, shape.strideD, shape.m * shape.n, "c"));
  if (step.bias() >= 0 && bias.numElements() != shape.n)
    return Status::error(what + ": the bias has " +
                         std::to_string(bias.numElements()) +
                         " elements, not n = " + std::to_string(shape.n));
  MatmulPlan *cached = nullptr;
  PARTITA_RETURN_IF_ERROR(plan(shape, cached));
  if (step.bias() >= 0)
    PARTITA_RETURN_IF_ERROR(check(
        *lt,
        lt->cublasLtMatmulDescSetAttribute(cached->desc,
                                           CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                           &bias.data, sizeof(bias.data)),
        what + ": setting the bias"));
  float alpha = 1.0f, beta = step.c() >= 0 ? 1.0f : 0.0f;
  const void *input = step.c() >= 0 ? c.data : d.data;
  return check(*lt,
               lt->cublasLtMatmul(ltHandle, cached->desc, &alpha, b.data,
                                  cached->layoutA, a.data, cached->layoutB,
                                  &beta, input, cached->layoutC, d.data,
                                  cached->layoutC, &cached->algo,
                                  reinterpret_cast<void *>(workspace),
                                  options.matmulWorkspaceBytes, computeStream),
               what);
}

} // namespace

Status CudaDevice::create(int32_t ordinal, const CudaDeviceOptions &options,
                          std::unique_ptr<CudaDevice> &device) {
  const DriverApi *api = nullptr;
  PARTITA_RETURN_IF_ERROR(driverApi(api));
  auto created = std::make_unique<CudaDeviceOnGpu>(*api, ordinal, options);
  PARTITA_RETURN_IF_ERROR(created->open());
  device = std::move(created);
  return Status::ok();
}
