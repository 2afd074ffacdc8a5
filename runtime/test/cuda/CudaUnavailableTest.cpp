//===- CudaUnavailableTest.cpp - the CUDA device where there is none ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The runtime must load and fail plainly where libcuda is absent. The test
// points the loader at a library name that does not exist, so it means the
// same on a machine with a GPU.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaDevice.h"

#ifdef PARTITA_HAVE_CUDA
#include "CudaApi.h"
#endif

#include <gtest/gtest.h>

using namespace partita::runtime;

namespace {

#ifdef PARTITA_HAVE_CUDA
class CudaUnavailableTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    cuda::setLibraryNamesForTesting("libcuda-absent-for-test.so.1",
                                    "libcublasLt-absent-for-test.so.13",
                                    "libnccl-absent-for-test.so.2");
  }
};

TEST_F(CudaUnavailableTest, CreatingADeviceSaysThatThereIsNone) {
  ASSERT_TRUE(CudaDevice::available());
  std::unique_ptr<CudaDevice> device;
  Status created = CudaDevice::create(0, CudaDeviceOptions(), device);
  ASSERT_FALSE(created.isOk());
  EXPECT_EQ(device, nullptr);
  EXPECT_EQ(created.message().rfind("no CUDA device: "
                                    "libcuda-absent-for-test.so.1 not found (",
                                    0),
            0u)
      << created.message();
}

TEST_F(CudaUnavailableTest, CountingDevicesFailsTheSameWay) {
  int32_t count = -1;
  Status counted = CudaDevice::deviceCount(count);
  ASSERT_FALSE(counted.isOk());
  EXPECT_EQ(count, 0);
  EXPECT_NE(counted.message().find("no CUDA device"), std::string::npos);
}

TEST_F(CudaUnavailableTest, MissingLibrariesAreErrors) {
  const cuda::NcclApi *nccl = nullptr;
  Status loaded = cuda::ncclApi(nccl);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(nccl, nullptr);
  EXPECT_NE(loaded.message().find("libnccl-absent-for-test.so.2 not found"),
            std::string::npos)
      << loaded.message();
}
#else
TEST(CudaUnavailableTest, ThisBuildHasNoCudaDevice) {
  EXPECT_FALSE(CudaDevice::available());
  std::unique_ptr<CudaDevice> device;
  Status created = CudaDevice::create(0, CudaDeviceOptions(), device);
  ASSERT_FALSE(created.isOk());
  EXPECT_NE(created.message().find("unavailable in this build"),
            std::string::npos);
}
#endif

} // namespace
