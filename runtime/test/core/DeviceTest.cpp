//===- DeviceTest.cpp - the host device -----------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Device.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <vector>

using namespace partita::runtime;
namespace program = partita::program;

TEST(HostDeviceTest, AllocatesAlignedMemoryAndCopies) {
  ThreadPool pool(1);
  HostDevice device(pool);
  EXPECT_EQ(device.name(), "host");
  EXPECT_TRUE(device.sharesHostMemory());
  void *memory = nullptr;
  ASSERT_TRUE(device.allocate(100, 64, &memory).isOk());
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory) % 64, 0u);
  std::vector<float> in = {1, 2, 3}, out(3);
  ASSERT_TRUE(device.copyToDevice(memory, in.data(), 12).isOk());
  ASSERT_TRUE(device.copyToHost(out.data(), memory, 12).isOk());
  EXPECT_EQ(in, out);
  device.deallocate(memory);
  ASSERT_TRUE(device.allocate(0, 64, &memory).isOk());
  EXPECT_EQ(memory, nullptr);
}

TEST(HostDeviceTest, RunsKernels) {
  ThreadPool pool(2);
  HostDevice device(pool);
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, c(3);
  Tensor tensors[] = {{a.data(), program::F32, {3}},
                      {b.data(), program::F32, {3}},
                      {c.data(), program::F32, {3}}};
  program::Kernel kernel;
  kernel.set_op("add");
  kernel.add_operands(0);
  kernel.add_operands(1);
  kernel.add_results(2);
  Status status =
      device.runKernel(kernel, [&](int32_t id) { return tensors[id]; });
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(device.synchronize().isOk());
  // Exact: integer sums.
  EXPECT_EQ(c, (std::vector<float>{11, 22, 33}));
}
