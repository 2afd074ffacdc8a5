//===- DecodeKernelsTest.cpp - decode attention and kv_cache_write --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The decode kernels of lib/Target/CUDA, generated for one instruction and
// run on the emulator: flash-decoding attention (one query row, the keys
// split over blocks) against a reference softmax for key lengths that are
// not a multiple of the split, a wholly masked split, a row that sees no
// key and L = 1; kv_cache_write in place, into another result, and its
// refusal of a slot past the cache's end (the module's error record).
//
//===----------------------------------------------------------------------===//

#include "OneKernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace partita::runtime;
namespace program = partita::program;
namespace cudatarget = partita::target::cuda;

namespace {

struct DecodeShape {
  std::string name;
  int64_t batch, hq, hkv, keys, d;
  int64_t split;
  /// Keys masked out (bool mask [b, 1, 1, keys]); -1: none.
  int64_t maskedFrom = -1, maskedTo = -1;
  /// Batch row 1 sees no key at all.
  bool emptyRow = false;
  /// Gemma2's cap of the scores; 0: none.
  double softcap = 0;
  /// A causal sliding window: the last `window` keys only; 0: none.
  int64_t window = 0;
};

std::ostream &operator<<(std::ostream &os, const DecodeShape &s) {
  return os << s.name;
}

class DecodeAttention : public ::testing::TestWithParam<DecodeShape> {};

TEST_P(DecodeAttention, MatchesReference) {
  const DecodeShape &s = GetParam();
  OneKernel k;
  int32_t q = k.buffer(program::F32, {s.batch, s.hq, 1, s.d});
  int32_t kk = k.buffer(program::F32, {s.batch, s.hkv, s.keys, s.d});
  int32_t v = k.buffer(program::F32, {s.batch, s.hkv, s.keys, s.d});
  int32_t mask = k.buffer(program::BOOL, {s.batch, 1, 1, s.keys});
  int32_t out = k.buffer(program::F32, {s.batch, s.hq, 1, s.d});
  program::Kernel &kernel = k.kernel("attention", {q, kk, v, mask}, {out});
  (*kernel.mutable_attributes())["has_mask"].set_b(true);
  (*kernel.mutable_attributes())["causal"].set_b(s.window > 0);
  if (s.window > 0)
    (*kernel.mutable_attributes())["window"].set_i(s.window);
  if (s.softcap > 0)
    (*kernel.mutable_attributes())["softcap"].set_f(s.softcap);
  cudatarget::CodeGenOptions options;
  options.decodeKeySplit = s.split;
  Status built = k.build(options, s.name);
  ASSERT_TRUE(built) << built.message();
  int64_t splits = (s.keys + s.split - 1) / s.split;
  EXPECT_NE(k.source.find("pt::attention_decode<"), std::string::npos);
  EXPECT_EQ(k.program.instructions(0).kernel().cuda(0).launch().grid(0),
            uint32_t(s.batch * s.hq * splits));

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float> &x, size_t n) {
    x.resize(n);
    for (float &e : x)
      e = normal(rng);
  };
  std::vector<float> qs, ks, vs, os(size_t(s.batch * s.hq * s.d), NAN);
  fill(qs, size_t(s.batch * s.hq * s.d));
  fill(ks, size_t(s.batch * s.hkv * s.keys * s.d));
  fill(vs, size_t(s.batch * s.hkv * s.keys * s.d));
  std::vector<uint8_t> ms(size_t(s.batch * s.keys), 1);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.keys; ++j)
      if ((j >= s.maskedFrom && j < s.maskedTo) || (s.emptyRow && b == 1))
        ms[size_t(b * s.keys + j)] = 0;
  // The window's keys are the last `window`: the reference masks the rest.
  std::vector<uint8_t> seen = ms;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.keys - s.window && s.window > 0; ++j)
      seen[size_t(b * s.keys + j)] = 0;
  Status ran = k.run({qs.data(), ks.data(), vs.data(), ms.data(), os.data()});
  ASSERT_TRUE(ran) << ran.message();

  double scale = 1.0 / std::sqrt(double(s.d));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h) {
      int64_t hk = h / (s.hq / s.hkv);
      std::vector<double> p(size_t(s.keys), 0);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s.keys; ++j) {
        if (!seen[size_t(b * s.keys + j)])
          continue;
        double dot = 0;
        for (int64_t t = 0; t < s.d; ++t)
          dot += double(qs[size_t((b * s.hq + h) * s.d + t)]) *
                 ks[size_t(((b * s.hkv + hk) * s.keys + j) * s.d + t)];
        p[size_t(j)] = dot * scale;
        if (s.softcap > 0)
          p[size_t(j)] = s.softcap * std::tanh(p[size_t(j)] / s.softcap);
        mx = std::max(mx, p[size_t(j)]);
      }
      for (int64_t j = 0; j < s.keys; ++j)
        if (seen[size_t(b * s.keys + j)])
          sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
      for (int64_t t = 0; t < s.d; ++t) {
        double want = 0;
        for (int64_t j = 0; j < s.keys; ++j)
          if (seen[size_t(b * s.keys + j)])
            want += p[size_t(j)] / sum *
                    vs[size_t(((b * s.hkv + hk) * s.keys + j) * s.d + t)];
        float got = os[size_t((b * s.hq + h) * s.d + t)];
        EXPECT_NEAR(got, want, 1e-5 + 1e-4 * std::fabs(want))
            << "b " << b << " h " << h << " column " << t;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttention,
    ::testing::Values(
        // 100 keys in splits of 32: the last split holds 4.
        DecodeShape{"partial_split", 2, 4, 2, 100, 64, 32},
        // Keys 32..63 (the second split) masked out for every row.
        DecodeShape{"masked_split", 2, 2, 2, 100, 32, 32, 32, 64},
        // Batch row 1 sees no key: zeros, as the tiled kernel gives.
        DecodeShape{"empty_row", 2, 2, 1, 70, 16, 32, -1, -1, true},
        // One key (L = 1), one split.
        DecodeShape{"one_key", 2, 2, 2, 1, 64, 256},
        // Head dimension 128 (4 columns per lane) over 3 splits of 256.
        DecodeShape{"head_dim_128", 1, 2, 1, 600, 128, 256},
        // Gemma2's softcap, a cap of 0.5 on scores of a few units.
        DecodeShape{"softcap", 2, 4, 2, 100, 64, 32, 40, 50, false, 0.5},
        // A sliding window of the last 45 of 100 keys: the first split
        // sees none, the second some, keys 60..69 masked too.
        DecodeShape{"window", 2, 4, 2, 100, 32, 32, 60, 70, false, 0, 45}),
    [](const ::testing::TestParamInfo<DecodeShape> &info) {
      return info.param.name;
    });

/// kv_cache_write writes the update at the device-side slot, in place or
/// into another result, and refuses a slot past the end.
TEST(KvCacheWrite, WritesTheSliceAndRefusesOverflow) {
  OneKernel k;
  int32_t cache = k.buffer(program::F32, {2, 8, 3});
  int32_t update = k.buffer(program::F32, {2, 2, 3});
  int32_t position = k.buffer(program::I64, {1});
  int32_t out = k.buffer(program::F32, {2, 8, 3});
  program::Kernel &kernel =
      k.kernel("kv_cache_write", {cache, update, position}, {out});
  (*kernel.mutable_attributes())["axis"].set_i(1);
  Status built = k.build({}, "kv");
  ASSERT_TRUE(built) << built.message();
  EXPECT_EQ(k.program.instructions(0).kernel().cuda(0).launch().grid(0), 1u);

  std::vector<float> c(48), u(12);
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = float(i);
  for (size_t i = 0; i < u.size(); ++i)
    u[i] = -1.0f - float(i);
  auto expected = [&](int64_t slot) {
    std::vector<float> e = c;
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t t = 0; t < 2; ++t)
        for (int64_t i = 0; i < 3; ++i)
          e[size_t((o * 8 + slot + t) * 3 + i)] =
              u[size_t((o * 2 + t) * 3 + i)];
    return e;
  };
  int64_t slot = 5;
  // In place: out is the cache's memory.
  std::vector<float> inPlace = c;
  Status ran = k.run({inPlace.data(), u.data(), &slot, inPlace.data()});
  ASSERT_TRUE(ran) << ran.message();
  EXPECT_EQ(inPlace, expected(5));
  // Into another result: the rest of the cache is copied.
  std::vector<float> other(48, NAN);
  slot = 0;
  ran = k.run({c.data(), u.data(), &slot, other.data()});
  ASSERT_TRUE(ran) << ran.message();
  EXPECT_EQ(other, expected(0));
  // Past the end (slot 7 + 2 tokens > 8): refused, the cache untouched.
  std::vector<float> kept = c;
  slot = 7;
  ran = k.run({kept.data(), u.data(), &slot, kept.data()});
  ASSERT_FALSE(ran);
  EXPECT_NE(ran.message().find("kv_cache_write: writing 2 tokens at slot 7 "
                               "overflows the cache of 8 slots"),
            std::string::npos)
      << ran.message();
  EXPECT_EQ(kept, c);
  // The record is cleared: the next run succeeds.
  slot = 6;
  ran = k.run({kept.data(), u.data(), &slot, kept.data()});
  EXPECT_TRUE(ran) << ran.message();
  EXPECT_EQ(kept, expected(6));
}

/// One slot per row of the batch (GroupQueryAttention's decode step): each
/// row's update at its own slot, in place and into another result, and a
/// row past the end refusing the whole write.
TEST(KvCacheWrite, WritesEachRowAtItsSlot) {
  OneKernel k;
  // [batch 2, heads 2, slots 6, 3]: the slot is per batch row, so heads
  // of a row share it.
  int32_t cache = k.buffer(program::F32, {2, 2, 6, 3});
  int32_t update = k.buffer(program::F32, {2, 2, 1, 3});
  int32_t position = k.buffer(program::I64, {2});
  int32_t out = k.buffer(program::F32, {2, 2, 6, 3});
  program::Kernel &kernel =
      k.kernel("kv_cache_write", {cache, update, position}, {out});
  (*kernel.mutable_attributes())["axis"].set_i(2);
  Status built = k.build({}, "kv_rows");
  ASSERT_TRUE(built) << built.message();

  std::vector<float> c(72), u(12);
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = float(i);
  for (size_t i = 0; i < u.size(); ++i)
    u[i] = -1.0f - float(i);
  auto expected = [&](const int64_t (&slots)[2]) {
    std::vector<float> e = c;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 3; ++i)
          e[size_t(((b * 2 + h) * 6 + slots[b]) * 3 + i)] =
              u[size_t((b * 2 + h) * 3 + i)];
    return e;
  };
  int64_t slots[2] = {4, 1};
  std::vector<float> inPlace = c;
  Status ran = k.run({inPlace.data(), u.data(), slots, inPlace.data()});
  ASSERT_TRUE(ran) << ran.message();
  EXPECT_EQ(inPlace, expected(slots));
  std::vector<float> other(72, NAN);
  ran = k.run({c.data(), u.data(), slots, other.data()});
  ASSERT_TRUE(ran) << ran.message();
  EXPECT_EQ(other, expected(slots));
  std::vector<float> kept = c;
  int64_t past[2] = {0, 6};
  ran = k.run({kept.data(), u.data(), past, kept.data()});
  ASSERT_FALSE(ran);
  EXPECT_NE(ran.message().find("kv_cache_write: writing 1 tokens at slot 6 "
                               "overflows the cache of 6 slots"),
            std::string::npos)
      << ran.message();
  EXPECT_EQ(kept, c);
}

} // namespace
