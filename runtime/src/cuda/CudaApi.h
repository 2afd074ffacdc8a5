//===- CudaApi.h - CUDA, cuBLASLt and NCCL over dlopen ----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The runtime links none of libcuda, libcublasLt or libnccl: it opens them
// with dlopen on first use, so it builds and its host tests run where they
// are absent. Each library is a table of function pointers typed from the
// real headers (decltype of the declaration), so a signature never drifts.
// cuda.h renames versioned entry points with macros (cuMemAlloc is
// cuMemAlloc_v2); the table's member and the looked-up symbol go through the
// same macro, so both name the versioned symbol.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CUDA_CUDAAPI_H
#define PARTITA_RUNTIME_CUDA_CUDAAPI_H

#include "partita/runtime/Status.h"

#include <cublasLt.h>
#include <cuda.h>
#include <nccl.h>

#include <string>

namespace partita::runtime::cuda {

// The driver API entry points the runtime uses.
#define PARTITA_CUDA_DRIVER_FUNCTIONS(X)                                       \
  X(cuInit)                                                                    \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDriverGetVersion)                                                        \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGetName)                                                           \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuDevicePrimaryCtxRelease)                                                 \
  X(cuCtxSetCurrent)                                                           \
  X(cuModuleLoadData)                                                          \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuModuleGetGlobal)                                                         \
  X(cuFuncSetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemGetInfo)                                                              \
  X(cuMemcpyHtoDAsync)                                                         \
  X(cuMemcpyDtoHAsync)                                                         \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuMemcpy2DAsync)                                                           \
  X(cuMemsetD8Async)                                                           \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamQuery)                                                             \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamWaitEvent)                                                         \
  X(cuEventCreate)                                                             \
  X(cuEventDestroy)                                                            \
  X(cuEventRecord)                                                             \
  X(cuEventQuery)

#define PARTITA_CUBLASLT_FUNCTIONS(X)                                          \
  X(cublasLtCreate)                                                            \
  X(cublasLtDestroy)                                                           \
  X(cublasLtGetStatusString)                                                   \
  X(cublasLtMatmulDescCreate)                                                  \
  X(cublasLtMatmulDescDestroy)                                                 \
  X(cublasLtMatmulDescSetAttribute)                                            \
  X(cublasLtMatrixLayoutCreate)                                                \
  X(cublasLtMatrixLayoutDestroy)                                               \
  X(cublasLtMatrixLayoutSetAttribute)                                          \
  X(cublasLtMatmulPreferenceCreate)                                            \
  X(cublasLtMatmulPreferenceDestroy)                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                      \
  X(cublasLtMatmulAlgoGetHeuristic)                                            \
  X(cublasLtMatmul)

#define PARTITA_NCCL_FUNCTIONS(X)                                              \
  X(ncclGetVersion)                                                            \
  X(ncclGetUniqueId)                                                           \
  X(ncclCommInitRankConfig)                                                    \
  X(ncclCommSplit)                                                             \
  X(ncclCommGetAsyncError)                                                     \
  X(ncclCommAbort)                                                             \
  X(ncclCommDestroy)                                                           \
  X(ncclGetErrorString)                                                        \
  X(ncclAllReduce)                                                             \
  X(ncclAllGather)                                                             \
  X(ncclReduceScatter)                                                         \
  X(ncclSend)                                                                  \
  X(ncclRecv)                                                                  \
  X(ncclGroupStart)                                                            \
  X(ncclGroupEnd)

#define PARTITA_CUDA_DECLARE_POINTER(name) decltype(&::name) name = nullptr;

/// libcuda.so.1: the driver API.
struct DriverApi {
  PARTITA_CUDA_DRIVER_FUNCTIONS(PARTITA_CUDA_DECLARE_POINTER)
};
/// libcublasLt.so.13.
struct CublasLtApi {
  PARTITA_CUBLASLT_FUNCTIONS(PARTITA_CUDA_DECLARE_POINTER)
};
/// libnccl.so.2.
struct NcclApi {
  PARTITA_NCCL_FUNCTIONS(PARTITA_CUDA_DECLARE_POINTER)
};

#undef PARTITA_CUDA_DECLARE_POINTER

/// Opens libcuda.so.1 and calls cuInit once per process; later calls return
/// the same table or the same error. `api` stays valid for the process.
Status driverApi(const DriverApi *&api);
/// Opens libcublasLt.so.13 (then libcublasLt.so) once per process.
Status cublasLtApi(const CublasLtApi *&api);
/// Opens libnccl.so.2 once per process.
Status ncclApi(const NcclApi *&api);

/// `what: CUDA_ERROR_OUT_OF_MEMORY (out of memory)`, or ok for CUDA_SUCCESS.
Status check(const DriverApi &api, CUresult result, const std::string &what);
Status check(const CublasLtApi &api, cublasStatus_t result,
             const std::string &what);
Status check(const NcclApi &api, ncclResult_t result, const std::string &what);

/// Overrides the library names the loaders try (tests use this to simulate
/// a machine without them); must be called before the first load.
void setLibraryNamesForTesting(const std::string &driver,
                               const std::string &cublasLt,
                               const std::string &nccl);

} // namespace partita::runtime::cuda

#endif // PARTITA_RUNTIME_CUDA_CUDAAPI_H
