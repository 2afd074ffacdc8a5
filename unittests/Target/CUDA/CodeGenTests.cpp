//===- CodeGenTests.cpp - the CUDA code generator -------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Hand-built programs pin the launches of each kernel family (grids,
// arguments, cuBLASLt fields, merging of identical kernels, determinism,
// errors); the model programs of partita-compile --emit exec must lower
// completely; and, where nvcc is installed, generated modules must compile
// for sm_80 and sm_90a with no register spills in the attention and
// normalization kernels.
//
//===----------------------------------------------------------------------===//

#include "partita/Target/CUDA/CodeGen.h"
#include "partita/Target/CUDA/Nvcc.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace partita;
using namespace partita::target::cuda;
using program::DType;

namespace {

//===----------------------------------------------------------------------===//
// Building programs
//===----------------------------------------------------------------------===//

class Builder {
public:
  int buffer(DType dtype, std::vector<int64_t> shape,
             program::Buffer::Kind kind = program::Buffer::ACTIVATION) {
    program::Buffer *b = prog.add_buffers();
    b->set_id(prog.buffers_size() - 1);
    b->mutable_type()->set_dtype(dtype);
    for (int64_t d : shape)
      b->mutable_type()->add_shape(d);
    b->set_kind(kind);
    return b->id();
  }
  int constant(float value) {
    int id = buffer(program::F32, {}, program::Buffer::CONSTANT);
    prog.mutable_buffers(id)->set_data(&value, sizeof(value));
    return id;
  }
  program::Kernel &kernel(const std::string &op, std::vector<int> operands,
                          std::vector<int> results,
                          const std::string &location = "") {
    program::Instruction *inst = prog.add_instructions();
    inst->set_location(location.empty()
                           ? op + "_" + std::to_string(prog.instructions_size())
                           : location);
    program::Kernel *k = inst->mutable_kernel();
    k->set_op(op);
    for (int id : operands)
      k->add_operands(id);
    for (int id : results)
      k->add_results(id);
    return *k;
  }
  program::Program prog;
};

void setInt(program::Kernel &k, const std::string &name, int64_t v) {
  (*k.mutable_attributes())[name].set_i(v);
}
void setFloat(program::Kernel &k, const std::string &name, double v) {
  (*k.mutable_attributes())[name].set_f(v);
}
void setBool(program::Kernel &k, const std::string &name, bool v) {
  (*k.mutable_attributes())[name].set_b(v);
}
void setString(program::Kernel &k, const std::string &name,
               const std::string &v) {
  (*k.mutable_attributes())[name].set_s(v);
}
void setInts(program::Kernel &k, const std::string &name,
             std::vector<int64_t> v) {
  auto *ints = (*k.mutable_attributes())[name].mutable_ints();
  for (int64_t x : v)
    ints->add_values(x);
}
program::ElementwiseStep &step(program::Kernel &k, const std::string &op,
                               int operand = -1, bool operandFirst = false) {
  program::ElementwiseStep *s = k.add_epilogue();
  s->set_op(op);
  s->set_operand(operand);
  s->set_operand_first(operandFirst);
  return *s;
}

/// Generates, failing the test on an error.
std::string generate(program::Program &prog) {
  auto source = generateCudaSource(prog, CodeGenOptions{});
  if (!source) {
    ADD_FAILURE() << llvm::toString(source.takeError());
    return "";
  }
  return *source;
}

std::string generateError(program::Program &prog) {
  auto source = generateCudaSource(prog, CodeGenOptions{});
  if (source) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return llvm::toString(source.takeError());
}

const program::CudaLaunch &launch(const program::Program &prog, int inst,
                                  int step = 0) {
  return prog.instructions(inst).kernel().cuda(step).launch();
}

std::vector<int> args(const program::CudaLaunch &l) {
  return std::vector<int>(l.arguments().begin(), l.arguments().end());
}
std::vector<uint32_t> grid(const program::CudaLaunch &l) {
  return std::vector<uint32_t>(l.grid().begin(), l.grid().end());
}
std::vector<uint32_t> block(const program::CudaLaunch &l) {
  return std::vector<uint32_t>(l.block().begin(), l.block().end());
}

size_t count(llvm::StringRef haystack, llvm::StringRef needle) {
  return haystack.count(needle);
}

//===----------------------------------------------------------------------===//
// Kernel families
//===----------------------------------------------------------------------===//

TEST(CudaCodeGen, ElementwiseBroadcastAndChain) {
  Builder b;
  int x = b.buffer(program::F32, {2, 3, 4});
  int y = b.buffer(program::F32, {4});
  int z = b.buffer(program::BF16, {3, 1});
  int r = b.buffer(program::BF16, {2, 3, 4});
  program::Kernel &k = b.kernel("add", {x, y}, {r});
  step(k, "gelu")
      .mutable_attributes()
      ->operator[]("approximation")
      .set_s("tanh");
  step(k, "cast");
  step(k, "mul", z, true);
  std::string src = generate(b.prog);
  const program::CudaLaunch &l = launch(b.prog, 0);
  EXPECT_EQ(l.function(), "partita_add_0");
  EXPECT_EQ(args(l), (std::vector<int>{x, y, r, z}));
  EXPECT_EQ(grid(l), (std::vector<uint32_t>{1, 1, 1}));
  EXPECT_EQ(block(l), (std::vector<uint32_t>{256, 1, 1}));
  EXPECT_NE(src.find("// partita_add_0: add epilogue: gelu(tanh), cast, mul"),
            std::string::npos);
  // y repeats over the first two dims, z over the first and the last.
  EXPECT_NE(src.find("pt::ldf(a1 + (i % 4))"), std::string::npos);
  EXPECT_NE(src.find("pt::ldf(e2 + ((i / 4) % 3))"), std::string::npos)
      << src.substr(src.find("partita_add_0("));
  // The cast rounds to bf16 (the operand of the mul that follows).
  EXPECT_NE(src.find("f = pt::gelu_tanh(f);"), std::string::npos);
  EXPECT_NE(src.find("f = pt::round_bf16(f);"), std::string::npos);
}

TEST(CudaCodeGen, ElementwiseVectorized) {
  Builder b;
  int x = b.buffer(program::BF16, {8, 64});
  int y = b.buffer(program::BF16, {8, 64});
  int r = b.buffer(program::BF16, {8, 64});
  program::Kernel &k = b.kernel("mul", {x, y}, {r});
  step(k, "add", b.constant(1.0f));
  step(k, "silu");
  std::string src = generate(b.prog);
  EXPECT_EQ(args(launch(b.prog, 0)), (std::vector<int>{x, y, r, 3}));
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{1, 1, 1}));
  EXPECT_NE(src.find("v < 64;"), std::string::npos);
  EXPECT_NE(src.find("pt::ldvec<8>(a1 + base, x_a1);"), std::string::npos);
  EXPECT_NE(src.find("f = f * x_a1[u];"), std::string::npos);
  EXPECT_NE(src.find("f = f + pt::ldf(e0 + 0);"), std::string::npos);
  EXPECT_NE(src.find("pt::stvec<8>(r0 + base, y);"), std::string::npos);
}

TEST(CudaCodeGen, CompareWhereCast) {
  Builder b;
  int x = b.buffer(program::I64, {8});
  int y = b.buffer(program::I64, {1});
  int c = b.buffer(program::BOOL, {8});
  program::Kernel &k = b.kernel("compare", {x, y}, {c});
  setString(k, "direction", "lt");
  int t = b.buffer(program::F16, {8});
  int f = b.buffer(program::F16, {1});
  int w = b.buffer(program::F16, {8});
  b.kernel("where", {c, t, f}, {w});
  int i32 = b.buffer(program::I32, {8});
  b.kernel("cast", {w}, {i32});
  std::string src = generate(b.prog);
  EXPECT_EQ(args(launch(b.prog, 1)), (std::vector<int>{c, t, f, w}));
  EXPECT_NE(src.find("n = (n < pt::ldi(a1 + 0)) ? 1 : 0;"), std::string::npos);
  EXPECT_NE(src.find("f = pt::ldi(a0 + i) ? f : pt::ldf(a2 + 0);"),
            std::string::npos)
      << src.substr(src.find("partita_where_0("));
  EXPECT_NE(src.find("n = pt::f2i(f);"), std::string::npos);
}

TEST(CudaCodeGen, SaturatingCast) {
  Builder b;
  int x = b.buffer(program::F32, {8});
  int h = b.buffer(program::F16, {8});
  int bf = b.buffer(program::BF16, {8});
  int f = b.buffer(program::F32, {8});
  setBool(b.kernel("cast", {x}, {h}), "saturate", true);
  setBool(b.kernel("cast", {x}, {bf}), "saturate", true);
  b.kernel("cast", {h}, {f});
  std::string src = generate(b.prog);
  EXPECT_NE(src.find("f = pt::saturate(f, 65504.0f);"), std::string::npos);
  EXPECT_NE(src.find("f = pt::saturate(f, 3.38953139e38f);"),
            std::string::npos);
  // Only the casts marked saturate.
  EXPECT_EQ(src.find("saturate(", src.find("partita_cast_2(")),
            std::string::npos);
}

TEST(CudaCodeGen, IdenticalKernelsShareAFunction) {
  Builder b;
  int w = b.buffer(program::F32, {64}, program::Buffer::WEIGHT);
  std::vector<int> outs;
  for (int layer = 0; layer < 3; ++layer) {
    int x = b.buffer(program::F32, {2, 16, 64});
    int y = b.buffer(program::F32, {2, 16, 64});
    program::Kernel &k = b.kernel("layer_norm", {x, w, w}, {y},
                                  "/h." + std::to_string(layer) + "/ln");
    setInt(k, "axis", -1);
    setFloat(k, "epsilon", 1e-5);
    setBool(k, "has_scale", true);
    setBool(k, "has_bias", true);
  }
  int x = b.buffer(program::F32, {2, 16, 32});
  int y = b.buffer(program::F32, {2, 16, 32});
  int w32 = b.buffer(program::F32, {32}, program::Buffer::WEIGHT);
  program::Kernel &k = b.kernel("rms_norm", {x, w32}, {y}, "/final");
  setInt(k, "axis", 2);
  setFloat(k, "epsilon", 1e-6);
  setBool(k, "has_scale", true);
  std::string src = generate(b.prog);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(launch(b.prog, i).function(), "partita_layer_norm_0");
  EXPECT_EQ(launch(b.prog, 3).function(), "partita_rms_norm_0");
  EXPECT_EQ(count(src, "@NAME@"), 0u);
  EXPECT_EQ(count(src, "void __launch_bounds__(256) partita_layer_norm_0("),
            1u);
  EXPECT_NE(src.find("// partita_layer_norm_0: layer_norm\n//   at /h.0/ln\n"
                     "//   at /h.1/ln\n//   at /h.2/ln\n"),
            std::string::npos);
  // 32 rows of 64 (f32: float4 loads), a warp per row, 8 rows per block.
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{4, 1, 1}));
  EXPECT_NE(src.find("pt::norm_row<float, 64, 32, 4, true, true, true, true>"),
            std::string::npos);
}

TEST(CudaCodeGen, Deterministic) {
  Builder b;
  int x = b.buffer(program::BF16, {4, 4096});
  int y = b.buffer(program::BF16, {4, 4096});
  program::Kernel &k = b.kernel("softmax", {x}, {y});
  setInt(k, "axis", 1);
  int z = b.buffer(program::BF16, {4, 4096});
  step(k, "add", z);
  program::Program copy = b.prog;
  std::string first = generate(b.prog);
  std::string second = generate(copy);
  EXPECT_EQ(first, second);
  EXPECT_EQ(b.prog.SerializeAsString(), copy.SerializeAsString());
  // A block per row of 4096: 256 threads, 8 x bf16 loads.
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{4, 1, 1}));
  EXPECT_EQ(block(launch(b.prog, 0)), (std::vector<uint32_t>{256, 1, 1}));
  EXPECT_NE(first.find("pt::softmax_row<__nv_bfloat16, 4096, 1, 256, 8, true, "
                       "false>"),
            std::string::npos);
}

TEST(CudaCodeGen, SoftmaxOverAnInnerAxis) {
  Builder b;
  int x = b.buffer(program::F32, {2, 10, 3});
  int y = b.buffer(program::F32, {2, 10, 3});
  program::Kernel &k = b.kernel("log_softmax", {x}, {y});
  setInt(k, "axis", 1);
  std::string src = generate(b.prog);
  EXPECT_NE(src.find("pt::softmax_row<float, 10, 3, 32, 1, true, true>"),
            std::string::npos);
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{1, 1, 1}));
}

TEST(CudaCodeGen, Reduce) {
  Builder b;
  int x = b.buffer(program::F32, {4, 6, 8});
  int rows = b.buffer(program::F32, {4, 6, 1});
  program::Kernel &k = b.kernel("reduce", {x}, {rows});
  setString(k, "kind", "mean");
  setInts(k, "axes", {2});
  setBool(k, "keepdims", true);
  int cols = b.buffer(program::I64, {4, 8});
  int xi = b.buffer(program::I64, {4, 6, 8});
  program::Kernel &k2 = b.kernel("reduce", {xi}, {cols});
  setString(k2, "kind", "max");
  setInts(k2, "axes", {1});
  std::string src = generate(b.prog);
  EXPECT_EQ(launch(b.prog, 0).function(), "partita_reduce_mean_0");
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{3, 1, 1}));
  EXPECT_EQ(launch(b.prog, 1).function(), "partita_reduce_max_0");
  // Kept [4, 8] (strides 48, 1), reduced [6] (stride 8).
  EXPECT_NE(src.find("pt::ldi(a0 + ((o / 8) * 48 + (o % 8)) + k * 8)"),
            std::string::npos);
}

TEST(CudaCodeGen, MatmulFoldsBiasGeluAndResidual) {
  Builder b;
  int x = b.buffer(program::BF16, {2, 16, 64});
  int w = b.buffer(program::BF16, {64, 256}, program::Buffer::WEIGHT);
  int bias = b.buffer(program::BF16, {256}, program::Buffer::WEIGHT);
  int h = b.buffer(program::BF16, {2, 16, 256});
  program::Kernel &fc = b.kernel("matmul", {x, w, bias}, {h});
  setBool(fc, "has_bias", true);
  step(fc, "gelu")
      .mutable_attributes()
      ->operator[]("approximation")
      .set_s("tanh");
  int w2 = b.buffer(program::BF16, {256, 64}, program::Buffer::WEIGHT);
  int out = b.buffer(program::BF16, {2, 16, 64});
  program::Kernel &proj = b.kernel("matmul", {h, w2}, {out});
  step(proj, "add", x, true);
  // gelu(erf) first: cuBLASLt cannot; the residual add then follows it.
  int out2 = b.buffer(program::BF16, {2, 16, 64});
  program::Kernel &other = b.kernel("matmul", {h, w2}, {out2});
  step(other, "gelu")
      .mutable_attributes()
      ->operator[]("approximation")
      .set_s("none");
  step(other, "add", x);
  std::string src = generate(b.prog);

  const program::CublasLtMatmul &m0 =
      b.prog.instructions(0).kernel().cuda(0).matmul();
  EXPECT_EQ(b.prog.instructions(0).kernel().cuda_size(), 1);
  EXPECT_EQ(m0.a(), x);
  EXPECT_EQ(m0.b(), w);
  EXPECT_EQ(m0.d(), h);
  EXPECT_EQ(m0.bias(), bias);
  EXPECT_EQ(m0.c(), -1);
  EXPECT_EQ(m0.m(), 32);
  EXPECT_EQ(m0.n(), 256);
  EXPECT_EQ(m0.k(), 64);
  EXPECT_EQ(m0.batch(), 1);
  EXPECT_TRUE(m0.gelu());

  const program::CublasLtMatmul &m1 =
      b.prog.instructions(1).kernel().cuda(0).matmul();
  EXPECT_EQ(b.prog.instructions(1).kernel().cuda_size(), 1);
  EXPECT_EQ(m1.c(), x);
  EXPECT_EQ(m1.bias(), -1);
  EXPECT_FALSE(m1.gelu());

  const program::Kernel &k2 = b.prog.instructions(2).kernel();
  ASSERT_EQ(k2.cuda_size(), 2);
  EXPECT_EQ(k2.cuda(0).matmul().c(), -1);
  EXPECT_FALSE(k2.cuda(0).matmul().gelu());
  EXPECT_EQ(k2.cuda(1).launch().function(), "partita_matmul_epilogue_0");
  EXPECT_EQ(args(k2.cuda(1).launch()), (std::vector<int>{out2, x}));
  EXPECT_NE(src.find("// partita_matmul_epilogue_0: matmul epilogue: "
                     "gelu(none), add"),
            std::string::npos);
}

TEST(CudaCodeGen, MatmulBatches) {
  Builder b;
  int q = b.buffer(program::F32, {4, 8, 16});
  int k = b.buffer(program::F32, {4, 16, 8});
  int s = b.buffer(program::F32, {4, 8, 8});
  b.kernel("matmul", {q, k}, {s});
  int a = b.buffer(program::F32, {8, 16});
  int s2 = b.buffer(program::F32, {4, 8, 8});
  b.kernel("matmul", {a, k}, {s2});
  generate(b.prog);
  const program::CublasLtMatmul &m0 =
      b.prog.instructions(0).kernel().cuda(0).matmul();
  EXPECT_EQ(m0.batch(), 4);
  EXPECT_EQ(m0.m(), 8);
  EXPECT_EQ(m0.stride_a(), 128);
  EXPECT_EQ(m0.stride_b(), 128);
  EXPECT_EQ(m0.stride_d(), 64);
  const program::CublasLtMatmul &m1 =
      b.prog.instructions(1).kernel().cuda(0).matmul();
  EXPECT_EQ(m1.batch(), 4);
  EXPECT_EQ(m1.stride_a(), 0);
  EXPECT_EQ(m1.stride_b(), 128);

  // Not one stride per operand: a generated kernel, epilogue included.
  Builder odd;
  int l = odd.buffer(program::F32, {2, 1, 8, 16});
  int r = odd.buffer(program::F32, {1, 3, 16, 8});
  int d = odd.buffer(program::F32, {2, 3, 8, 8});
  int e = odd.buffer(program::F32, {8});
  program::Kernel &bmm = odd.kernel("matmul", {l, r}, {d}, "/bmm");
  step(bmm, "add", e);
  std::string src = generate(odd.prog);
  ASSERT_EQ(odd.prog.instructions(0).kernel().cuda_size(), 1);
  EXPECT_EQ(launch(odd.prog, 0).function(), "partita_matmul_0");
  EXPECT_EQ(args(launch(odd.prog, 0)), (std::vector<int>{l, r, d, e}));
  EXPECT_EQ(grid(launch(odd.prog, 0)), (std::vector<uint32_t>{6, 1, 1}));
  EXPECT_NE(src.find("const pt::u64 aOff = (bt / 3) * 128ULL;"),
            std::string::npos)
      << src.substr(src.find("partita_matmul_0("));
  EXPECT_NE(src.find("const pt::u64 bOff = (bt % 3) * 128ULL;"),
            std::string::npos);
}

TEST(CudaCodeGen, Attention) {
  Builder b;
  int q = b.buffer(program::BF16, {2, 8, 40, 128});
  int k = b.buffer(program::BF16, {2, 2, 50, 128});
  int v = b.buffer(program::BF16, {2, 2, 50, 64});
  int mask = b.buffer(program::BOOL, {40, 50});
  int o = b.buffer(program::BF16, {2, 8, 40, 64});
  program::Kernel &a = b.kernel("attention", {q, k, v, mask}, {o});
  setBool(a, "causal", true);
  setBool(a, "has_mask", true);
  setFloat(a, "scale", 0.125);
  int q2 = b.buffer(program::F32, {1, 4, 16, 64});
  int k2 = b.buffer(program::F32, {1, 4, 32, 64});
  int qpos = b.buffer(program::I64, {16});
  int kpos = b.buffer(program::I64, {32});
  int o2 = b.buffer(program::F32, {1, 4, 16, 64});
  int rowMax = b.buffer(program::F32, {1, 4, 16});
  int rowSum = b.buffer(program::F32, {1, 4, 16});
  program::Kernel &p = b.kernel("attention_partial", {q2, k2, k2, qpos, kpos},
                                {o2, rowMax, rowSum});
  setBool(p, "has_positions", true);
  setFloat(p, "scale", 0.125);
  std::string src = generate(b.prog);
  // Head dim 128: 4 rows per warp, 16 per block: 3 query blocks per head.
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{48, 1, 1}));
  EXPECT_EQ(block(launch(b.prog, 0)), (std::vector<uint32_t>{128, 1, 1}));
  EXPECT_EQ(args(launch(b.prog, 0)), (std::vector<int>{q, k, v, mask, o}));
  EXPECT_NE(src.find("pt::attention<__nv_bfloat16, unsigned char, 2, 8, 2, "
                     "40, 50, 128, 64, 4, 4, true, true, 1, 0LL, 0LL, 50LL, "
                     "1LL, false, false>"),
            std::string::npos);
  EXPECT_EQ(launch(b.prog, 1).function(), "partita_attention_partial_0");
  EXPECT_EQ(grid(launch(b.prog, 1)), (std::vector<uint32_t>{4, 1, 1}));
  EXPECT_EQ(args(launch(b.prog, 1)),
            (std::vector<int>{q2, k2, k2, qpos, kpos, o2, rowMax, rowSum}));
}

TEST(CudaCodeGen, AttentionGrad) {
  Builder b;
  int q = b.buffer(program::BF16, {2, 8, 40, 64});
  int k = b.buffer(program::BF16, {2, 2, 50, 64});
  int v = b.buffer(program::BF16, {2, 2, 50, 32});
  int mask = b.buffer(program::F32, {40, 50});
  int o = b.buffer(program::BF16, {2, 8, 40, 32});
  int g = b.buffer(program::BF16, {2, 8, 40, 32});
  int dq = b.buffer(program::BF16, {2, 8, 40, 64});
  int dk = b.buffer(program::BF16, {2, 2, 50, 64});
  int dv = b.buffer(program::BF16, {2, 2, 50, 32});
  program::Kernel &a =
      b.kernel("attention_grad", {q, k, v, mask, o, g}, {dq, dk, dv});
  setBool(a, "causal", true);
  setBool(a, "has_mask", true);
  setFloat(a, "scale", 0.125);
  std::string src = generate(b.prog);
  // One block per (batch, kv head); the rows' statistics in the scratch.
  EXPECT_EQ(grid(launch(b.prog, 0)), (std::vector<uint32_t>{4, 1, 1}));
  EXPECT_EQ(block(launch(b.prog, 0)), (std::vector<uint32_t>{128, 1, 1}));
  EXPECT_EQ(args(launch(b.prog, 0)),
            (std::vector<int>{q, k, v, mask, o, g, dq, dk, dv}));
  EXPECT_NE(src.find("pt::attention_grad<__nv_bfloat16, float, 2, 8, 2, 40, "
                     "50, 64, 32, 4, true, 2, 0LL, 0LL, 50LL, 1LL>"),
            std::string::npos);
  EXPECT_NE(src.find("__device__ float partita_attention_grad_0_stats[1920];"),
            std::string::npos);
}

TEST(CudaCodeGen, DataMovement) {
  Builder b;
  int x = b.buffer(program::BF16, {2, 16, 8, 32});
  int t = b.buffer(program::BF16, {2, 8, 16, 32});
  program::Kernel &tr = b.kernel("transpose", {x}, {t});
  setInts(tr, "permutation", {0, 2, 1, 3});
  int m = b.buffer(program::F32, {64, 48});
  int mt = b.buffer(program::F32, {48, 64});
  program::Kernel &tr2 = b.kernel("transpose", {m}, {mt});
  setInts(tr2, "permutation", {1, 0});
  int s0 = b.buffer(program::F32, {64, 16});
  int s1 = b.buffer(program::F32, {64, 32});
  program::Kernel &sp = b.kernel("split", {m}, {s0, s1});
  setInt(sp, "axis", 1);
  int table = b.buffer(program::F32, {100, 48}, program::Buffer::WEIGHT);
  int ids = b.buffer(program::I64, {2, 5});
  int pos = b.buffer(program::F32, {5, 48}, program::Buffer::WEIGHT);
  int e = b.buffer(program::F32, {2, 5, 48});
  program::Kernel &emb = b.kernel("embedding", {table, ids}, {e});
  step(emb, "add", pos);
  std::string src = generate(b.prog);
  EXPECT_EQ(launch(b.prog, 0).function(), "partita_transpose_0");
  EXPECT_EQ(launch(b.prog, 1).function(), "partita_transpose_1");
  EXPECT_NE(src.find("// partita_transpose_1: transpose (tiled)"),
            std::string::npos);
  EXPECT_EQ(grid(launch(b.prog, 1)), (std::vector<uint32_t>{4, 1, 1}));
  EXPECT_EQ(args(launch(b.prog, 2)), (std::vector<int>{m, s0, s1}));
  EXPECT_EQ(args(launch(b.prog, 3)), (std::vector<int>{table, ids, e, pos}));
  EXPECT_NE(src.find("// partita_embedding_0: embedding epilogue: add"),
            std::string::npos);
}

TEST(CudaCodeGen, MoeIsFourEntryPointsOfOneFunction) {
  // 6 tokens, top 2 of 3 experts, hidden 40, 24 features (SwiGLU with
  // fc3), i32 ids, a residual add in the combine's epilogue.
  Builder b;
  int x = b.buffer(program::F32, {6, 40});
  int ids = b.buffer(program::I32, {6, 2});
  int w = b.buffer(program::F32, {6, 2});
  int fc1 = b.buffer(program::F32, {3, 24, 40});
  int fc2 = b.buffer(program::F32, {3, 40, 24});
  int fc3 = b.buffer(program::F32, {3, 24, 40});
  int bias3 = b.buffer(program::F32, {3, 24});
  int y = b.buffer(program::F32, {6, 40});
  program::Kernel &k =
      b.kernel("moe", {x, ids, w, fc1, fc2, fc3, bias3}, {y}, "/moe");
  setString(k, "activation", "swiglu");
  setBool(k, "has_fc3", true);
  setBool(k, "has_fc3_bias", true);
  setFloat(k, "limit", 7.0);
  step(k, "add", x);
  std::string src = generate(b.prog);
  ASSERT_EQ(b.prog.instructions(0).kernel().cuda_size(), 4);
  const char *entries[] = {"route", "fc1", "fc2", "combine"};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(launch(b.prog, 0, i).function(),
              std::string("partita_moe_0_") + entries[i]);
  // Every entry takes every buffer; at most 12/16 + 3 tiles.
  EXPECT_EQ(args(launch(b.prog, 0, 0)),
            (std::vector<int>{x, ids, w, fc1, fc2, fc3, bias3, y, x}));
  EXPECT_EQ(grid(launch(b.prog, 0, 0)), (std::vector<uint32_t>{1, 1, 1}));
  EXPECT_EQ(grid(launch(b.prog, 0, 1)), (std::vector<uint32_t>{4, 2, 1}));
  EXPECT_EQ(grid(launch(b.prog, 0, 2)), (std::vector<uint32_t>{4, 3, 1}));
  EXPECT_EQ(grid(launch(b.prog, 0, 3)), (std::vector<uint32_t>{1, 1, 1}));
  EXPECT_EQ(block(launch(b.prog, 0, 1)), (std::vector<uint32_t>{256, 1, 1}));
  EXPECT_NE(src.find("__device__ float partita_moe_0_act[288];"),
            std::string::npos);
  EXPECT_NE(src.find("pt::moe_route<int, 12, 3>("), std::string::npos);
  EXPECT_NE(src.find("pt::moe_fc1<float, 2, 40, 24, 3, 4, 1, false, true>("),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("7.000000000e+00f"), std::string::npos);
  EXPECT_EQ(count(src, "extern \"C\" __global__"), 4u);
  EXPECT_EQ(count(src, "//   at /moe\n"), 1u);
}

TEST(CudaCodeGen, MoeErrors) {
  auto moeError = [](const std::string &activation,
                     std::vector<int64_t> fc2Shape, int64_t experts, bool fc3) {
    Builder b;
    int x = b.buffer(program::F32, {4, 8});
    int ids = b.buffer(program::I64, {4, 1});
    int w = b.buffer(program::F32, {4, 1});
    int fc1 = b.buffer(program::F32, {experts, 16, 8});
    int fc2 = b.buffer(program::F32, fc2Shape);
    int y = b.buffer(program::F32, {4, 8});
    std::vector<int> operands = {x, ids, w, fc1, fc2};
    if (fc3)
      operands.push_back(b.buffer(program::F32, {experts, 16, 8}));
    program::Kernel &k = b.kernel("moe", operands, {y}, "/moe");
    setString(k, "activation", activation);
    setBool(k, "has_fc3", fc3);
    return generateError(b.prog);
  };
  EXPECT_EQ(moeError("tanh", {2, 8, 16}, 2, false),
            "moe at /moe: unknown activation 'tanh'");
  EXPECT_EQ(moeError("relu", {2, 8, 16}, 2, true),
            "moe at /moe: fc3, interleaved and limit belong to a swiglu");
  EXPECT_EQ(moeError("relu", {2, 8, 12}, 2, false),
            "moe at /moe: fc1 must be f32 [2, 12, 8], got f32 [2, 16, 8]");
  EXPECT_EQ(moeError("relu", {5000, 8, 16}, 5000, false),
            "moe at /moe: more than 4096 experts are not supported (the "
            "routing block counts them in shared memory)");
}

TEST(CudaCodeGen, Errors) {
  {
    Builder b;
    int x = b.buffer(program::F32, {4});
    b.kernel("frobnicate", {x}, {x}, "/node");
    EXPECT_EQ(generateError(b.prog),
              "frobnicate at /node: no CUDA kernel for this op");
  }
  {
    Builder b;
    int x = b.buffer(program::F32, {4});
    int y = b.buffer(program::F32, {4});
    b.kernel("and", {x, y}, {y}, "/and");
    EXPECT_EQ(generateError(b.prog), "and at /and: step 'and' does not apply "
                                     "to f32");
  }
  {
    Builder b;
    int q = b.buffer(program::F32, {1, 1, 4, 256});
    int o = b.buffer(program::F32, {1, 1, 4, 256});
    b.kernel("attention", {q, q, q}, {o}, "/attn");
    EXPECT_NE(generateError(b.prog).find(
                  "attention at /attn: head dimensions 256 and 256"),
              std::string::npos);
  }
  {
    Builder b;
    int q = b.buffer(program::F32, {1, 1, 4, 256});
    b.kernel("attention_grad", {q, q, q, q, q}, {q, q, q}, "/grad");
    EXPECT_NE(generateError(b.prog).find(
                  "attention_grad at /grad: head dimensions 256 and 256"),
              std::string::npos);
  }
  {
    Builder b;
    int q = b.buffer(program::F32, {1, 1, 4, 8});
    program::Kernel &a =
        b.kernel("attention_grad", {q, q, q, q, q}, {q, q, q}, "/grad");
    step(a, "neg");
    EXPECT_EQ(generateError(b.prog), "attention_grad at /grad: takes no "
                                     "epilogue (it has three results)");
  }
}

TEST(CudaCodeGen, BuffersTooLargeToCountAreErrors) {
  // Sizes the emitters compute (elements, bytes, strides) would overflow
  // int64_t: refused before any kernel is emitted (issue 14).
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{int64_t(1) << 62, 8},
        {int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40},
        {0, int64_t(1) << 40, int64_t(1) << 40},
        {-4, 2}}) {
    Builder b;
    int x = b.buffer(program::F32, shape);
    int y = b.buffer(program::F32, shape);
    b.kernel("relu", {x}, {y}, "/relu");
    EXPECT_EQ(generateError(b.prog),
              "buffer 0 has a negative dimension or more elements than 64-bit "
              "sizes can count");
  }
}

TEST(CudaCodeGen, NvccEmbedsPtxOfTheLowestPortableArchitecture) {
  NvccOptions options;
  options.archs = {"sm_90a", "sm_100", "sm_80"};
  std::vector<std::string> args = nvccArguments(options, "in.cu", "out");
  // By number, not as text ("sm_100" < "sm_80"): PTX for compute_80 is what
  // an sm_90 GPU without SASS of its own can still JIT.
  EXPECT_TRUE(llvm::is_contained(args, "arch=compute_80,code=compute_80"));
  EXPECT_FALSE(llvm::is_contained(args, "arch=compute_100,code=compute_100"));
  EXPECT_TRUE(llvm::is_contained(args, "arch=compute_100,code=sm_100"));
}

//===----------------------------------------------------------------------===//
// Model programs
//===----------------------------------------------------------------------===//

/// Runs `command` with its stdout in a temporary file; returns the output.
std::optional<std::string> run(llvm::ArrayRef<llvm::StringRef> command,
                               std::string *errors = nullptr) {
  llvm::SmallString<128> out, err;
  if (llvm::sys::fs::createTemporaryFile("partita-cg", "out", out) ||
      llvm::sys::fs::createTemporaryFile("partita-cg", "err", err))
    return std::nullopt;
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, out.str(),
                                                err.str()};
  int rc =
      llvm::sys::ExecuteAndWait(command[0], command, std::nullopt, redirects);
  auto outText = llvm::MemoryBuffer::getFile(out);
  auto errText = llvm::MemoryBuffer::getFile(err);
  std::string result = outText ? (*outText)->getBuffer().str() : "";
  if (errors)
    *errors = (errText ? (*errText)->getBuffer().str() : "") + result;
  llvm::sys::fs::remove(out);
  llvm::sys::fs::remove(err);
  if (rc != 0)
    return std::nullopt;
  return result;
}

/// partita-compile: $PARTITA_COMPILE, else the build's; empty if absent.
std::string compilerPath() {
  const char *env = std::getenv("PARTITA_COMPILE");
  std::string path = env ? env : PARTITA_COMPILE;
  return llvm::sys::fs::can_execute(path) ? path : "";
}

/// Every rank's program of `partita-compile <model> --emit exec <flags>`.
std::vector<program::Program> compileModel(const std::string &model,
                                           std::vector<std::string> flags) {
  std::string path = std::string(PARTITA_MODELS_DIR) + "/" + model + ".onnx";
  std::vector<std::string> argv = {compilerPath(), path, "--emit", "exec"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::vector<llvm::StringRef> refs(argv.begin(), argv.end());
  std::string errors;
  std::optional<std::string> text = run(refs, &errors);
  if (!text) {
    ADD_FAILURE() << "partita-compile failed: " << errors;
    return {};
  }
  // Ranks are separated by "# rank N" lines.
  std::vector<std::string> pieces(1);
  for (llvm::StringRef line : llvm::split(*text, '\n')) {
    if (line.starts_with("# rank ")) {
      if (!pieces.back().empty())
        pieces.emplace_back();
      continue;
    }
    pieces.back() += line.str() + "\n";
  }
  std::vector<program::Program> programs;
  for (const std::string &piece : pieces) {
    program::Program prog;
    if (!google::protobuf::TextFormat::ParseFromString(piece, &prog)) {
      ADD_FAILURE() << "cannot parse the program of " << model;
      return {};
    }
    programs.push_back(std::move(prog));
  }
  return programs;
}

struct ModelCase {
  const char *model;
  std::vector<std::string> flags;
};

const ModelCase kModelCases[] = {
    {"gpt2", {}},
    {"gpt2", {"--mesh", "tp=2"}},
    {"gpt2", {"--mesh", "sp=2", "--sp-mode", "ring"}},
    {"gpt2", {"--mesh", "tp=2", "--sp-mode", "megatron"}},
    {"llama", {}},
    {"llama", {"--mesh", "tp=2"}},
    {"bert", {}},
    {"bert", {"--mesh", "tp=2"}},
};

std::string caseName(const ModelCase &c) {
  std::string name = c.model;
  for (const std::string &f : c.flags)
    if (f.rfind("--", 0) != 0)
      name += "_" + f;
  return name;
}

TEST(CudaCodeGenModels, EveryKernelLowers) {
  if (compilerPath().empty())
    GTEST_SKIP() << "partita-compile not built";
  for (const ModelCase &c : kModelCases) {
    SCOPED_TRACE(caseName(c));
    std::vector<program::Program> programs = compileModel(c.model, c.flags);
    ASSERT_FALSE(programs.empty());
    for (program::Program &prog : programs) {
      std::string src = generate(prog);
      ASSERT_FALSE(src.empty());
      // PARTITA_CUDA_DUMP_DIR=dir keeps every generated module to look at.
      if (const char *dir = std::getenv("PARTITA_CUDA_DUMP_DIR")) {
        std::error_code ec;
        llvm::raw_fd_ostream os(std::string(dir) + "/" + caseName(c) + ".rank" +
                                    std::to_string(prog.rank()) + ".cu",
                                ec);
        os << src;
        llvm::raw_fd_ostream text(std::string(dir) + "/" + caseName(c) +
                                      ".rank" + std::to_string(prog.rank()) +
                                      ".txt",
                                  ec);
        std::string printed;
        google::protobuf::TextFormat::PrintToString(prog, &printed);
        text << printed;
      }
      std::map<std::string, int> launches;
      for (const program::Instruction &inst : prog.instructions()) {
        if (!inst.has_kernel())
          continue;
        EXPECT_GT(inst.kernel().cuda_size(), 0) << inst.location();
        for (const program::CudaStep &s : inst.kernel().cuda())
          if (s.has_launch()) {
            ++launches[s.launch().function()];
            EXPECT_NE(src.find("void __launch_bounds__"), std::string::npos);
            EXPECT_NE(src.find(" " + s.launch().function() + "("),
                      std::string::npos);
          }
      }
      // The layers repeat: far fewer functions than launches.
      int total = 0;
      for (auto &[name, n] : launches)
        total += n;
      EXPECT_LE(launches.size() * 2, static_cast<size_t>(total) + 2)
          << launches.size() << " functions for " << total << " launches";
    }
  }
}

//===----------------------------------------------------------------------===//
// nvcc
//===----------------------------------------------------------------------===//

/// Spills per function from `ptxas -v`, for every architecture compiled.
struct PtxasReport {
  std::map<std::string, std::vector<std::string>> spills; // name -> lines
  std::map<std::string, int> registers;                   // name -> max
};

PtxasReport parsePtxas(llvm::StringRef log) {
  PtxasReport report;
  std::string current;
  for (llvm::StringRef line : llvm::split(log, '\n')) {
    size_t at = line.find("Function properties for ");
    if (at != llvm::StringRef::npos) {
      current = line.substr(at + 24).trim().str();
      continue;
    }
    if (!current.empty() && line.contains("spill stores"))
      report.spills[current].push_back(line.trim().str());
    at = line.find("Used ");
    if (!current.empty() && at != llvm::StringRef::npos &&
        line.contains("registers")) {
      int regs = 0;
      line.substr(at + 5).consumeInteger(10, regs);
      report.registers[current] = std::max(report.registers[current], regs);
    }
  }
  return report;
}

/// Compiles `source` for sm_80 and sm_90a; returns ptxas's log.
std::optional<std::string> compileWithNvcc(const std::string &source,
                                           const std::string &name) {
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("partita-cg", dir))
    return std::nullopt;
  const char *dump = std::getenv("PARTITA_CUDA_DUMP_DIR");
  std::string cu =
      ((dump ? llvm::Twine(dump) : llvm::Twine(dir)) + "/" + name + ".cu")
          .str();
  std::string fatbin = (dir + "/" + name + ".fatbin").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(cu, ec);
    if (ec)
      return std::nullopt;
    os << source;
  }
  std::vector<llvm::StringRef> argv = {PARTITA_NVCC,
                                       "-std=c++17",
                                       "-fatbin",
                                       "-gencode",
                                       "arch=compute_80,code=sm_80",
                                       "-gencode",
                                       "arch=compute_90a,code=sm_90a",
                                       "-Xptxas",
                                       "-v",
                                       "-o",
                                       fatbin,
                                       cu};
  std::string log;
  std::optional<std::string> ok = run(argv, &log);
  if (!ok) {
    ADD_FAILURE() << "nvcc failed on " << cu << ":\n" << log;
    return std::nullopt;
  }
  if (!dump)
    llvm::sys::fs::remove(cu);
  llvm::sys::fs::remove(fatbin);
  // Generated code compiles cleanly.
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  llvm::sys::fs::remove(dir);
  return log;
}

/// The attention and normalization kernels must not spill.
void expectNoSpills(const PtxasReport &report) {
  int checked = 0;
  for (const auto &[name, lines] : report.spills) {
    llvm::StringRef n(name);
    if (!n.contains("attention") && !n.contains("norm") &&
        !n.contains("softmax"))
      continue;
    ++checked;
    for (const std::string &line : lines)
      EXPECT_NE(line.find("0 bytes spill stores, 0 bytes spill loads"),
                std::string::npos)
          << name << ": " << line;
    auto regs = report.registers.find(name);
    if (regs != report.registers.end())
      std::printf("%s: %d registers\n", name.c_str(), regs->second);
  }
  EXPECT_GT(checked, 0);
}

bool haveNvcc() {
  return llvm::StringRef(PARTITA_NVCC).size() > 0 &&
         llvm::sys::fs::can_execute(PARTITA_NVCC);
}

TEST(CudaCodeGenNvcc, Gpt2Compiles) {
  if (!haveNvcc())
    GTEST_SKIP() << "nvcc not found";
  if (compilerPath().empty())
    GTEST_SKIP() << "partita-compile not built";
  // PARTITA_CUDA_COMPILE_ALL=1 compiles every model case (slow).
  bool all = std::getenv("PARTITA_CUDA_COMPILE_ALL") != nullptr;
  for (const ModelCase &c : kModelCases) {
    if (!all && caseName(c) != "gpt2")
      continue;
    SCOPED_TRACE(caseName(c));
    std::vector<program::Program> programs = compileModel(c.model, c.flags);
    ASSERT_FALSE(programs.empty());
    for (size_t rank = 0; rank < (all ? programs.size() : 1); ++rank) {
      std::string src = generate(programs[rank]);
      std::optional<std::string> log =
          compileWithNvcc(src, caseName(c) + ".rank" + std::to_string(rank));
      ASSERT_TRUE(log);
      expectNoSpills(parsePtxas(*log));
    }
  }
}

/// One kernel of every family and code path the models do not reach.
void addEveryFamily(Builder &b) {
  // Elementwise: every unary op on f16, integer arithmetic, compare, where.
  int h = b.buffer(program::F16, {3, 5, 7});
  int h2 = b.buffer(program::F16, {3, 5, 7});
  program::Kernel &u = b.kernel("exp", {h}, {h2});
  for (const char *op : {"neg", "abs", "log", "sqrt", "rsqrt", "reciprocal",
                         "tanh", "erf", "sigmoid", "relu", "silu"})
    step(u, op);
  step(u, "gelu");
  step(u, "pow", b.constant(3.0f));
  step(u, "pow", h);
  step(u, "max", h, true);
  step(u, "min", h);
  step(u, "div", h);
  step(u, "sub", h, true);
  int i8 = b.buffer(program::I8, {3, 5, 7});
  int i64 = b.buffer(program::I64, {7});
  int i8r = b.buffer(program::I8, {3, 5, 7});
  program::Kernel &ints = b.kernel("div", {i8, i64}, {i8r});
  for (const char *op :
       {"add", "sub", "mul", "pow", "max", "min", "and", "or", "xor"})
    step(ints, op, i64);
  step(ints, "neg");
  step(ints, "abs");
  step(ints, "not");
  int mask = b.buffer(program::BOOL, {3, 5, 7});
  program::Kernel &cmp = b.kernel("compare", {h, h2}, {mask});
  setString(cmp, "direction", "ge");
  step(cmp, "not");
  int w = b.buffer(program::BF16, {5, 1});
  int wr = b.buffer(program::BF16, {3, 5, 7});
  program::Kernel &where = b.kernel("where", {mask, w, w}, {wr});
  step(where, "cast");
  step(where, "add", i64);
  step(where, "cast");
  // Reductions: rows, columns, integers.
  int x = b.buffer(program::F32, {6, 40, 33});
  int rsum = b.buffer(program::F32, {6, 40});
  program::Kernel &r1 = b.kernel("reduce", {x}, {rsum});
  setString(r1, "kind", "sum");
  setInts(r1, "axes", {2});
  int rmin = b.buffer(program::F32, {1, 40, 1});
  program::Kernel &r2 = b.kernel("reduce", {x}, {rmin});
  setString(r2, "kind", "min");
  setInts(r2, "axes", {0, 2});
  setBool(r2, "keepdims", true);
  int xi = b.buffer(program::I32, {6, 40, 33});
  int rmean = b.buffer(program::I32, {40, 33});
  program::Kernel &r3 = b.kernel("reduce", {xi}, {rmean});
  setString(r3, "kind", "mean");
  setInts(r3, "axes", {0});
  // Softmax over a middle axis, log_softmax over a row too long to cache.
  int sm = b.buffer(program::F32, {6, 40, 33});
  program::Kernel &s1 = b.kernel("softmax", {x}, {sm});
  setInt(s1, "axis", 1);
  int big = b.buffer(program::F16, {2, 50257});
  int bigr = b.buffer(program::F16, {2, 50257});
  program::Kernel &s2 = b.kernel("log_softmax", {big}, {bigr});
  setInt(s2, "axis", -1);
  // Rope, both layouts, r < d.
  int q = b.buffer(program::BF16, {2, 4, 16, 64});
  int cs = b.buffer(program::BF16, {2, 16, 16});
  int qr = b.buffer(program::BF16, {2, 4, 16, 64});
  for (bool interleaved : {false, true}) {
    program::Kernel &rope = b.kernel("rope", {q, cs, cs}, {qr});
    setBool(rope, "interleaved", interleaved);
  }
  // Data movement.
  int t = b.buffer(program::BF16, {2, 64, 4, 48});
  int tr = b.buffer(program::BF16, {2, 48, 4, 64});
  program::Kernel &tp = b.kernel("transpose", {t}, {tr});
  setInts(tp, "permutation", {0, 3, 2, 1});
  int trf = b.buffer(program::F32, {2, 48, 4, 64});
  program::Kernel &tp2 = b.kernel("transpose", {t}, {trf});
  setInts(tp2, "permutation", {0, 3, 2, 1});
  step(tp2, "cast");
  int sl = b.buffer(program::BF16, {2, 16, 2, 48});
  program::Kernel &slice = b.kernel("slice", {t}, {sl});
  setInts(slice, "start", {0, 1, 0, 0});
  setInts(slice, "limit", {2, 64, 4, 48});
  setInts(slice, "stride", {1, 4, 2, 1});
  int p0 = b.buffer(program::BF16, {2, 64, 1, 48});
  int p1 = b.buffer(program::BF16, {2, 64, 3, 48});
  program::Kernel &sp = b.kernel("split", {t}, {p0, p1});
  setInt(sp, "axis", 2);
  step(sp, "mul", b.buffer(program::BF16, {48}));
  int cat = b.buffer(program::BF16, {2, 64, 4, 48});
  program::Kernel &concat = b.kernel("concat", {p1, p0}, {cat});
  setInt(concat, "axis", -2);
  int bc = b.buffer(program::BF16, {3, 5, 7});
  b.kernel("broadcast_to", {w}, {bc});
  int idx = b.buffer(program::I32, {3, 2});
  int g = b.buffer(program::BF16, {2, 3, 2, 4, 48});
  program::Kernel &gather = b.kernel("gather", {t, idx}, {g});
  setInt(gather, "axis", 1);
  b.kernel("copy", {t}, {b.buffer(program::BF16, {128, 192})});
  // A matmul whose epilogue needs a kernel of its own.
  int a = b.buffer(program::BF16, {4, 8, 16});
  int m = b.buffer(program::BF16, {4, 16, 8});
  int d = b.buffer(program::BF16, {4, 8, 8});
  program::Kernel &mm = b.kernel("matmul", {a, m}, {d});
  step(mm, "gelu")
      .mutable_attributes()
      ->operator[]("approximation")
      .set_s("tanh");
  step(mm, "mul", b.buffer(program::BF16, {8}));
  step(mm, "sigmoid");
  int l = b.buffer(program::BF16, {2, 1, 40, 24});
  int r = b.buffer(program::BF16, {3, 24, 20});
  int bias = b.buffer(program::BF16, {20});
  int lr = b.buffer(program::BF16, {2, 3, 40, 20});
  program::Kernel &bmm = b.kernel("matmul", {l, r, bias}, {lr});
  setBool(bmm, "has_bias", true);
}

/// Head dims 64 and 128, f32 and bf16, masks and positions; norms and
/// softmax over long rows; and every other family once.
TEST(CudaCodeGenNvcc, SyntheticModuleCompilesWithoutSpills) {
  if (!haveNvcc())
    GTEST_SKIP() << "nvcc not found";
  Builder b;
  for (DType dtype : {program::BF16, program::F32}) {
    for (int64_t d : {64, 128}) {
      int q = b.buffer(dtype, {1, 8, 256, d});
      int k = b.buffer(dtype, {1, 2, 256, d});
      int mask = b.buffer(dtype, {1, 1, 256, 256});
      int o = b.buffer(dtype, {1, 8, 256, d});
      program::Kernel &a = b.kernel("attention", {q, k, k, mask}, {o});
      setBool(a, "causal", true);
      setBool(a, "has_mask", true);
      int qpos = b.buffer(program::I64, {256});
      int rowMax = b.buffer(program::F32, {1, 8, 256});
      int rowSum = b.buffer(program::F32, {1, 8, 256});
      int o2 = b.buffer(dtype, {1, 8, 256, d});
      program::Kernel &p = b.kernel("attention_partial", {q, k, k, qpos, qpos},
                                    {o2, rowMax, rowSum});
      setBool(p, "has_positions", true);
      int dq = b.buffer(dtype, {1, 8, 256, d});
      int dk = b.buffer(dtype, {1, 2, 256, d});
      program::Kernel &g =
          b.kernel("attention_grad", {q, k, k, mask, o, o}, {dq, dk, dk});
      setBool(g, "causal", true);
      setBool(g, "has_mask", true);
    }
    for (int64_t n : {768, 4096, 5000, 8192, 12288, 16384, 65536}) {
      int x = b.buffer(dtype, {4, n});
      int w = b.buffer(dtype, {n}, program::Buffer::WEIGHT);
      int y = b.buffer(dtype, {4, n});
      program::Kernel &ln = b.kernel("layer_norm", {x, w, w}, {y});
      setInt(ln, "axis", 1);
      setFloat(ln, "epsilon", 1e-5);
      setBool(ln, "has_scale", true);
      setBool(ln, "has_bias", true);
      step(ln, "add", x);
      program::Kernel &rms = b.kernel("rms_norm", {x, w}, {y});
      setInt(rms, "axis", 1);
      setFloat(rms, "epsilon", 1e-6);
      setBool(rms, "has_scale", true);
      program::Kernel &sm = b.kernel("softmax", {x}, {y});
      setInt(sm, "axis", 1);
    }
  }
  addEveryFamily(b);
  std::string src = generate(b.prog);
  std::optional<std::string> log = compileWithNvcc(src, "families");
  ASSERT_TRUE(log);
  expectNoSpills(parsePtxas(*log));
}

} // namespace
