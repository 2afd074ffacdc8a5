//===- CudaApi.cpp - the CUDA driver, cuBLASLt and NCCL over dlopen -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "CudaApi.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

using namespace partita::runtime;
using namespace partita::runtime::cuda;

namespace {

#define PARTITA_CUDA_STRINGIFY_EXPANDED(name) #name
#define PARTITA_CUDA_SYMBOL(name) PARTITA_CUDA_STRINGIFY_EXPANDED(name)

struct LibraryNames {
  std::vector<std::string> driver{"libcuda.so.1"};
  std::vector<std::string> cublasLt{"libcublasLt.so.13", "libcublasLt.so"};
  std::vector<std::string> nccl{"libnccl.so.2", "libnccl.so"};
};

LibraryNames &libraryNames() {
  static LibraryNames names;
  return names;
}

/// dlopens the first of `names` that loads; the message of the last failure
/// otherwise.
Status openLibrary(const std::vector<std::string> &names, void *&handle) {
  std::string reasons;
  for (const std::string &name : names) {
    handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle)
      return Status::ok();
    const char *reason = ::dlerror();
    reasons += (reasons.empty() ? "" : "; ") +
               std::string(reason ? reason : name + ": cannot open");
  }
  return Status::error(names.front() + " not found (" + reasons + ")");
}

template <typename T>
Status lookUp(void *library, const std::string &libraryName, const char *symbol,
              T &pointer) {
  pointer = reinterpret_cast<T>(::dlsym(library, symbol));
  if (!pointer)
    return Status::error(libraryName + " lacks " + symbol +
                         " (too old a version?)");
  return Status::ok();
}

#define PARTITA_CUDA_LOOK_UP(name)                                             \
  PARTITA_RETURN_IF_ERROR(                                                     \
      lookUp(library, libraryName, PARTITA_CUDA_SYMBOL(name), table.name));

struct DriverLoad {
  DriverApi table;
  Status status;
};

DriverLoad loadDriver() {
  DriverLoad load;
  load.status = [&]() -> Status {
    void *library = nullptr;
    const std::string libraryName = libraryNames().driver.front();
    Status opened = openLibrary(libraryNames().driver, library);
    if (!opened)
      return Status::error("no CUDA device: " + opened.message() +
                           "; is the NVIDIA driver installed?");
    DriverApi &table = load.table;
    PARTITA_CUDA_DRIVER_FUNCTIONS(PARTITA_CUDA_LOOK_UP)
    CUresult initialized = table.cuInit(0);
    if (initialized == CUDA_ERROR_NO_DEVICE)
      return Status::error("no CUDA device: no GPU found (cuInit: "
                           "CUDA_ERROR_NO_DEVICE)");
    if (initialized == CUDA_ERROR_STUB_LIBRARY)
      return Status::error("no CUDA device: " + libraryName +
                           " is the toolkit's stub, not a driver");
    Status checked = check(table, initialized, "cuInit");
    if (!checked)
      return Status::error("no CUDA device: " + checked.message());
    int count = 0;
    PARTITA_RETURN_IF_ERROR(
        check(table, table.cuDeviceGetCount(&count), "cuDeviceGetCount"));
    if (count == 0)
      return Status::error("no CUDA device: no GPU found");
    return Status::ok();
  }();
  return load;
}

template <typename Table> struct LibraryLoad {
  Table table;
  Status status;
};

LibraryLoad<CublasLtApi> loadCublasLt() {
  LibraryLoad<CublasLtApi> load;
  load.status = [&]() -> Status {
    void *library = nullptr;
    const std::string libraryName = libraryNames().cublasLt.front();
    PARTITA_RETURN_IF_ERROR(openLibrary(libraryNames().cublasLt, library));
    CublasLtApi &table = load.table;
    PARTITA_CUBLASLT_FUNCTIONS(PARTITA_CUDA_LOOK_UP)
    return Status::ok();
  }();
  return load;
}

LibraryLoad<NcclApi> loadNccl() {
  LibraryLoad<NcclApi> load;
  load.status = [&]() -> Status {
    void *library = nullptr;
    const std::string libraryName = libraryNames().nccl.front();
    PARTITA_RETURN_IF_ERROR(openLibrary(libraryNames().nccl, library));
    NcclApi &table = load.table;
    PARTITA_NCCL_FUNCTIONS(PARTITA_CUDA_LOOK_UP)
    return Status::ok();
  }();
  return load;
}

} // namespace

Status cuda::driverApi(const DriverApi *&api) {
  static const DriverLoad load = loadDriver();
  api = load.status ? &load.table : nullptr;
  return load.status;
}

Status cuda::cublasLtApi(const CublasLtApi *&api) {
  static const LibraryLoad<CublasLtApi> load = loadCublasLt();
  api = load.status ? &load.table : nullptr;
  return load.status;
}

Status cuda::ncclApi(const NcclApi *&api) {
  static const LibraryLoad<NcclApi> load = loadNccl();
  api = load.status ? &load.table : nullptr;
  return load.status;
}

Status cuda::check(const DriverApi &api, CUresult result,
                   const std::string &what) {
  if (result == CUDA_SUCCESS)
    return Status::ok();
  const char *name = nullptr, *text = nullptr;
  if (api.cuGetErrorName)
    api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString)
    api.cuGetErrorString(result, &text);
  return Status::error(what + ": " +
                       (name ? name : "CUDA error " + std::to_string(result)) +
                       (text ? " (" + std::string(text) + ")" : ""));
}

Status cuda::check(const CublasLtApi &api, cublasStatus_t result,
                   const std::string &what) {
  if (result == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  const char *text = api.cublasLtGetStatusString
                         ? api.cublasLtGetStatusString(result)
                         : nullptr;
  return Status::error(
      what + ": " +
      (text ? text : "cuBLASLt status " + std::to_string(result)));
}

Status cuda::check(const NcclApi &api, ncclResult_t result,
                   const std::string &what) {
  if (result == ncclSuccess)
    return Status::ok();
  const char *text =
      api.ncclGetErrorString ? api.ncclGetErrorString(result) : nullptr;
  return Status::error(what + ": " +
                       (text ? text : "NCCL error " + std::to_string(result)));
}

void cuda::setLibraryNamesForTesting(const std::string &driver,
                                     const std::string &cublasLt,
                                     const std::string &nccl) {
  libraryNames().driver = {driver};
  libraryNames().cublasLt = {cublasLt};
  libraryNames().nccl = {nccl};
}
