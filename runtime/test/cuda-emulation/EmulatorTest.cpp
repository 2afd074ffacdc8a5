//===- EmulatorTest.cpp - the fiber scheduler of Emulation.h --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Hand-written kernels through EmulatedCudaDevice: warp shuffles and block
// barriers give CUDA's results, and divergent barriers and shuffles are
// errors naming the kernel, not hangs.
//
//===----------------------------------------------------------------------===//

#include "EmulatedDevice.h"

#include <gtest/gtest.h>

#include <fstream>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

const char *kSource = R"cu(
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(64) reduce(const float *x, float *out) {
  __shared__ float partial[2];
  const unsigned t = threadIdx.x, lane = t % 32, warp = t / 32;
  float v = x[blockIdx.x * 64 + t];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  float down = __shfl_down_sync(0xffffffffu, (float)lane, 3);
  float up = __shfl_up_sync(0xffffffffu, (float)lane, 5);
  float bcast = __shfl_sync(0xffffffffu, (float)lane, 7, 8);
  out[blockIdx.x * 256 + t] = partial[0] + partial[1];
  out[blockIdx.x * 256 + 64 + t] = down;
  out[blockIdx.x * 256 + 128 + t] = up;
  out[blockIdx.x * 256 + 192 + t] = bcast;
}
extern "C" __global__ void divergent_barrier(float *out) {
  if (threadIdx.x == 3)
    return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void exited_lane(float *out) {
  if (threadIdx.x >= 16)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
extern "C" __global__ void outside_mask(float *out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu >> (threadIdx.x < 16 ? 16 : 0), 1.0f, 16);
}
)cu";

class Emulator : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string root =
        ::testing::TempDir() + "partita-emulator-" + std::to_string(getpid());
    source = root + ".cu";
    library = root + ".so";
    std::ofstream(source) << kSource;
    built = buildEmulatedModule(PARTITA_EMU_CXX, PARTITA_EMU_SHIM,
                                PARTITA_EMU_CUDA_INCLUDE, source, library);
  }
  static void TearDownTestSuite() {
    unlink(source.c_str());
    unlink(library.c_str());
  }

  /// Launches `function` over `blocks` x `threads` on `buffers`.
  Status launch(const std::string &function, unsigned blocks, unsigned threads,
                std::vector<std::vector<float>> &buffers) {
    if (!built)
      return built;
    std::unique_ptr<EmulatedCudaDevice> device;
    PARTITA_RETURN_IF_ERROR(EmulatedCudaDevice::create(library, device));
    program::Kernel kernel;
    kernel.set_op("test");
    program::CudaLaunch &step = *kernel.add_cuda()->mutable_launch();
    step.set_function(function);
    step.add_grid(blocks);
    step.add_block(threads);
    for (size_t i = 0; i < buffers.size(); ++i)
      step.add_arguments(int32_t(i));
    return device->runKernel(kernel, [&](int32_t id) {
      Tensor tensor;
      tensor.data = buffers[size_t(id)].data();
      tensor.dtype = program::F32;
      tensor.shape = {int64_t(buffers[size_t(id)].size())};
      return tensor;
    });
  }

  static std::string source, library;
  static Status built;
};

std::string Emulator::source, Emulator::library;
Status Emulator::built;

TEST_F(Emulator, ShufflesAndBarriers) {
  std::vector<std::vector<float>> buffers(2);
  for (int i = 0; i < 128; ++i)
    buffers[0].push_back(float(i));
  buffers[1].assign(512, -1.0f);
  Status ran = launch("reduce", 2, 64, buffers);
  ASSERT_TRUE(ran) << ran.message();
  const std::vector<float> &out = buffers[1];
  for (int b = 0; b < 2; ++b) {
    float sum = 0;
    for (int i = 0; i < 64; ++i)
      sum += float(b * 64 + i);
    for (int t = 0; t < 64; ++t) {
      int lane = t % 32;
      EXPECT_EQ(out[b * 256 + t], sum) << "block " << b << " thread " << t;
      EXPECT_EQ(out[b * 256 + 64 + t], float(lane + 3 < 32 ? lane + 3 : lane));
      EXPECT_EQ(out[b * 256 + 128 + t], float(lane >= 5 ? lane - 5 : lane));
      EXPECT_EQ(out[b * 256 + 192 + t], float(lane / 8 * 8 + 7));
    }
  }
}

TEST_F(Emulator, DivergenceIsAnError) {
  std::vector<std::vector<float>> buffers(1, std::vector<float>(64));
  Status ran = launch("divergent_barrier", 1, 64, buffers);
  ASSERT_FALSE(ran);
  EXPECT_NE(ran.message().find("divergent_barrier"), std::string::npos)
      << ran.message();
  EXPECT_NE(ran.message().find("divergent barrier"), std::string::npos)
      << ran.message();

  ran = launch("exited_lane", 1, 32, buffers);
  ASSERT_FALSE(ran);
  EXPECT_NE(ran.message().find("exited"), std::string::npos) << ran.message();

  ran = launch("outside_mask", 1, 32, buffers);
  ASSERT_FALSE(ran);
  EXPECT_NE(ran.message().find("mask"), std::string::npos) << ran.message();
}

} // namespace
