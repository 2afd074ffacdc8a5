//===- AttentionGradKernelTest.cpp - attention_grad's CUDA, emulated ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA kernels of attention_grad (pt::attention_grad) and of attention
// (pt::attention), each generated for one instruction and run on the
// emulator, against the host kernel on the same inputs: causal with grouped
// heads and more queries than keys (rows that see no key), a bool mask with
// fully masked rows, an additive float mask per head with -inf entries, a head
// dimension of 128 (four columns per lane), bf16 storage, and Gemma2's softcap
// with a float mask.
//
//===----------------------------------------------------------------------===//

#include "OneKernel.h"

#include "partita/runtime/HostKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

struct GradShape {
  std::string name;
  int64_t batch, hq, hkv, sq, skv, d, dv;
  bool causal;
  /// The mask: none, bool or f32, and its shape.
  program::DType maskType = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> maskShape = {};
  program::DType dtype = program::F32;
  /// Gemma2's cap of the scores; 0: none.
  float softcap = 0.0f;
  /// A causal sliding window; 0: none.
  int64_t window = 0;
};

std::ostream &operator<<(std::ostream &os, const GradShape &s) {
  return os << s.name;
}

int64_t countOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// A buffer's bytes: f32 values stored as `dtype` (bf16 by truncation
/// after rounding to nearest even, bool as != 0).
std::vector<uint8_t> bytesOf(const std::vector<float> &values,
                             program::DType dtype) {
  std::vector<uint8_t> bytes(values.size() * dtypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == program::F32) {
      std::memcpy(&bytes[4 * i], &values[i], 4);
    } else if (dtype == program::BF16) {
      uint32_t u;
      std::memcpy(&u, &values[i], 4);
      uint16_t h = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      std::memcpy(&bytes[2 * i], &h, 2);
    } else {
      bytes[i] = values[i] != 0.0f;
    }
  }
  return bytes;
}

float floatAt(const std::vector<uint8_t> &bytes, program::DType dtype,
              size_t i) {
  if (dtype == program::F32) {
    float f;
    std::memcpy(&f, &bytes[4 * i], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[2 * i], 2);
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

class AttentionGradKernel : public ::testing::TestWithParam<GradShape> {};

/// q, k, v and the mask of `s` as random bytes (every third row of a bool
/// mask fully masked, a float mask -inf at every seventh entry), and with
/// `outAndDout` attention_grad's out and dout after them.
struct Operands {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<program::DType> types;
  std::vector<std::vector<uint8_t>> bytes;
};

Operands randomOperands(const GradShape &s, bool outAndDout) {
  bool hasMask = s.maskType != program::DTYPE_UNSPECIFIED;
  Operands o;
  o.shapes = {{s.batch, s.hq, s.sq, s.d},
              {s.batch, s.hkv, s.skv, s.d},
              {s.batch, s.hkv, s.skv, s.dv}};
  if (hasMask)
    o.shapes.push_back(s.maskShape);
  if (outAndDout) {
    o.shapes.push_back({s.batch, s.hq, s.sq, s.dv}); // out
    o.shapes.push_back({s.batch, s.hq, s.sq, s.dv}); // dout
  }
  std::mt19937 rng(std::hash<std::string>()(s.name) & 0xffffffff);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < o.shapes.size(); ++i) {
    bool mask = hasMask && i == 3;
    program::DType dtype = mask ? s.maskType : s.dtype;
    std::vector<float> values(size_t(countOf(o.shapes[i])));
    for (size_t e = 0; e < values.size(); ++e) {
      values[e] = normal(rng);
      if (mask && dtype == program::BOOL) // Every third row fully masked.
        values[e] = (e / size_t(o.shapes[i].back())) % 3 == 1 ? 0.0f
                    : values[e] > -0.5f                       ? 1.0f
                                                              : 0.0f;
      else if (mask && e % 7 == 0)
        values[e] = -INFINITY;
    }
    o.bytes.push_back(bytesOf(values, dtype));
    o.types.push_back(dtype);
  }
  return o;
}

/// Builds `op` over `operands` with `results` (dtype `s.dtype`, shapes as
/// given), runs it on the emulator and on the host kernel, and checks
/// every result element (NaN first, so that an element never written
/// shows) against the host's: fp32 rtol 1e-4, bf16 2e-2.
void compareWithHost(const GradShape &s, const std::string &op,
                     Operands &operands,
                     const std::vector<std::vector<int64_t>> &results,
                     const std::vector<std::string> &names) {
  bool hasMask = s.maskType != program::DTYPE_UNSPECIFIED;
  OneKernel k;
  std::vector<int32_t> operandIds, resultIds;
  for (size_t i = 0; i < operands.shapes.size(); ++i)
    operandIds.push_back(k.buffer(operands.types[i], operands.shapes[i]));
  for (const std::vector<int64_t> &shape : results)
    resultIds.push_back(k.buffer(s.dtype, shape));
  program::Kernel &kernel = k.kernel(op, operandIds, resultIds);
  (*kernel.mutable_attributes())["has_mask"].set_b(hasMask);
  if (op == "attention_partial")
    (*kernel.mutable_attributes())["has_positions"].set_b(true);
  else
    (*kernel.mutable_attributes())["causal"].set_b(s.causal);
  (*kernel.mutable_attributes())["scale"].set_f(0.3);
  if (s.softcap > 0)
    (*kernel.mutable_attributes())["softcap"].set_f(s.softcap);
  if (s.window > 0)
    (*kernel.mutable_attributes())["window"].set_i(s.window);
  Status built = k.build({}, s.name + "_" + op);
  ASSERT_TRUE(built) << built.message();
  // attention_partial is pt::attention writing its statistics.
  std::string kernelName = op == "attention_partial" ? "attention" : op;
  EXPECT_NE(k.source.find("pt::" + kernelName + "<"), std::string::npos);
  if (op == "attention_grad") {
    EXPECT_EQ(k.program.instructions(0).kernel().cuda(0).launch().grid(0),
              uint32_t(s.batch * s.hkv));
  }

  std::vector<std::vector<uint8_t>> device, host;
  for (const std::vector<int64_t> &shape : results) {
    std::vector<float> nan(size_t(countOf(shape)), NAN);
    device.push_back(bytesOf(nan, s.dtype));
    host.push_back(device.back());
  }
  std::vector<void *> memory, hostMemory;
  for (std::vector<uint8_t> &bytes : operands.bytes) {
    memory.push_back(bytes.data());
    hostMemory.push_back(bytes.data());
  }
  for (size_t i = 0; i < results.size(); ++i) {
    memory.push_back(device[i].data());
    hostMemory.push_back(host[i].data());
  }
  Status ran = k.run(memory);
  ASSERT_TRUE(ran) << ran.message();

  BufferResolver resolve = [&](int32_t id) {
    const program::TensorType &type = k.program.buffers(id).type();
    return Tensor{hostMemory[size_t(id)],
                  type.dtype(),
                  {type.shape().begin(), type.shape().end()}};
  };
  ThreadPool pool(2);
  Status hostRan =
      runHostKernel(k.program.instructions(0).kernel(), resolve, pool);
  ASSERT_TRUE(hostRan) << hostRan.message();

  double tolerance = s.dtype == program::F32 ? 1e-4 : 2e-2;
  for (size_t i = 0; i < results.size(); ++i)
    for (int64_t e = 0; e < countOf(results[i]); ++e) {
      float got = floatAt(device[i], s.dtype, size_t(e));
      float want = floatAt(host[i], s.dtype, size_t(e));
      ASSERT_FALSE(std::isnan(got)) << names[i] << "[" << e << "]";
      // A row that sees no key has a maximum of -inf on both.
      if (std::isinf(want) && got == want)
        continue;
      ASSERT_NEAR(got, want, tolerance * (1 + std::fabs(want)))
          << names[i] << "[" << e << "]";
    }
}

TEST_P(AttentionGradKernel, MatchesTheHostKernel) {
  const GradShape &s = GetParam();
  Operands operands = randomOperands(s, /*outAndDout=*/true);
  std::vector<std::vector<int64_t>> results(operands.shapes.begin(),
                                            operands.shapes.begin() + 3);
  compareWithHost(s, "attention_grad", operands, results, {"dq", "dk", "dv"});
}

/// attention_partial (a ring step) with the window applied by positions:
/// the queries hold positions 30..69 and the keys 0..69, both shuffled, so
/// that the kernel finds each row's window by comparing positions.
TEST_P(AttentionGradKernel, PartialWithPositionsMatchesTheHostKernel) {
  const GradShape &s = GetParam();
  if (s.window <= 0 || s.dtype != program::F32)
    GTEST_SKIP() << "windowed f32 shapes only";
  Operands operands = randomOperands(s, /*outAndDout=*/false);
  std::mt19937 rng(11);
  std::vector<int64_t> qpos(size_t(s.sq)), kpos(size_t(s.skv));
  for (int64_t i = 0; i < s.sq; ++i)
    qpos[size_t(i)] = s.skv - s.sq + i;
  for (int64_t j = 0; j < s.skv; ++j)
    kpos[size_t(j)] = j;
  std::shuffle(qpos.begin(), qpos.end(), rng);
  std::shuffle(kpos.begin(), kpos.end(), rng);
  for (const std::vector<int64_t> *positions : {&qpos, &kpos}) {
    operands.shapes.push_back({int64_t(positions->size())});
    operands.types.push_back(program::I64);
    std::vector<uint8_t> bytes(positions->size() * 8);
    std::memcpy(bytes.data(), positions->data(), bytes.size());
    operands.bytes.push_back(std::move(bytes));
  }
  compareWithHost(s, "attention_partial", operands,
                  {{s.batch, s.hq, s.sq, s.dv},
                   {s.batch, s.hq, s.sq},
                   {s.batch, s.hq, s.sq}},
                  {"out", "row_max", "row_sum"});
}

/// The forward (pt::attention, sq > 1) on the same shapes.
TEST_P(AttentionGradKernel, ForwardMatchesTheHostKernel) {
  const GradShape &s = GetParam();
  Operands operands = randomOperands(s, /*outAndDout=*/false);
  compareWithHost(s, "attention", operands, {{s.batch, s.hq, s.sq, s.dv}},
                  {"out"});
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGradKernel,
    ::testing::Values(
        // Row i sees keys j <= i - 3: the first three rows see none.
        GradShape{"causal_gqa_early_rows", 2, 4, 2, 9, 6, 16, 8, true},
        GradShape{"bool_mask_masked_rows",
                  2,
                  2,
                  1,
                  6,
                  40,
                  32,
                  16,
                  false,
                  program::BOOL,
                  {2, 1, 6, 40}},
        GradShape{"float_mask_per_head",
                  1,
                  3,
                  3,
                  5,
                  7,
                  8,
                  40,
                  false,
                  program::F32,
                  {1, 3, 5, 7}},
        GradShape{"head_dim_128", 1, 2, 1, 5, 9, 128, 72, true},
        // Scores of these inputs reach a few units: a cap of 0.5 bends
        // them well into tanh's curve.
        GradShape{"softcap_causal_float_mask",
                  2,
                  4,
                  2,
                  6,
                  6,
                  16,
                  8,
                  true,
                  program::F32,
                  {2, 1, 6, 6},
                  program::F32,
                  0.5f},
        GradShape{"bf16",
                  1,
                  2,
                  2,
                  7,
                  7,
                  32,
                  32,
                  true,
                  program::DTYPE_UNSPECIFIED,
                  {},
                  program::BF16},
        // A sliding window of 20 over 70 keys (offset 30): key tiles
        // before a block's first window are skipped, rows straddle tiles.
        GradShape{"window_offset_tiles",
                  1,
                  4,
                  2,
                  40,
                  70,
                  16,
                  8,
                  true,
                  program::BOOL,
                  {1, 1, 1, 70},
                  program::F32,
                  0.0f,
                  20},
        // A window of 1 (each row its own key) with a softcap.
        GradShape{"window_one_softcap",
                  2,
                  2,
                  1,
                  6,
                  6,
                  8,
                  8,
                  true,
                  program::DTYPE_UNSPECIFIED,
                  {},
                  program::F32,
                  0.5f,
                  1}),
    [](const ::testing::TestParamInfo<GradShape> &info) {
      return info.param.name;
    });

} // namespace
