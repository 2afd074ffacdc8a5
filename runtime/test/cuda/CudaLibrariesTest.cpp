//===- CudaLibrariesTest.cpp - the real CUDA libraries' symbols -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The toolkit's cuBLASLt and NCCL, and the driver's link stub, are present
// on build machines without a GPU: loading them resolves every entry point
// of the runtime's symbol tables, so a renamed or missing symbol fails here
// rather than on the first GPU that runs an artifact. Its own binary: each
// library is loaded once per process.
//
//===----------------------------------------------------------------------===//

#include "CudaApi.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

using namespace partita::runtime;

namespace {

bool exists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

const std::string kLibDir = PARTITA_CUDA_LIBRARY_DIR;

class CudaLibrariesTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    cuda::setLibraryNamesForTesting(kLibDir + "/stubs/libcuda.so",
                                    kLibDir + "/libcublasLt.so.13",
                                    kLibDir + "/libnccl.so.2");
  }
};

TEST_F(CudaLibrariesTest, CublasLtResolvesEverySymbol) {
  if (!exists(kLibDir + "/libcublasLt.so.13"))
    GTEST_SKIP() << "no libcublasLt.so.13 in " << kLibDir;
  const cuda::CublasLtApi *api = nullptr;
  Status loaded = cuda::cublasLtApi(api);
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  ASSERT_NE(api, nullptr);
  EXPECT_NE(api->cublasLtMatmul, nullptr);
  EXPECT_NE(api->cublasLtMatmulAlgoGetHeuristic, nullptr);
}

TEST_F(CudaLibrariesTest, NcclResolvesEverySymbol) {
  if (!exists(kLibDir + "/libnccl.so.2"))
    GTEST_SKIP() << "no libnccl.so.2 in " << kLibDir;
  const cuda::NcclApi *api = nullptr;
  Status loaded = cuda::ncclApi(api);
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  ASSERT_NE(api, nullptr);
  EXPECT_NE(api->ncclCommSplit, nullptr);
  EXPECT_NE(api->ncclCommGetAsyncError, nullptr);
}

TEST_F(CudaLibrariesTest, TheDriverStubResolvesButHasNoDevice) {
  if (!exists(kLibDir + "/stubs/libcuda.so"))
    GTEST_SKIP() << "no driver stub in " << kLibDir;
  // Every symbol resolves (a missing one would be named); cuInit of the stub
  // then reports that this is no driver.
  const cuda::DriverApi *api = nullptr;
  Status loaded = cuda::driverApi(api);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.message().find("not found"), std::string::npos)
      << loaded.message();
  EXPECT_EQ(loaded.message().find("lacks"), std::string::npos)
      << loaded.message();
  EXPECT_NE(loaded.message().find("no CUDA device"), std::string::npos)
      << loaded.message();
}

} // namespace
