//===- SupportTest.cpp - element types, thread pool, conversions ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <atomic>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

namespace partita::runtime::test {
namespace {

TEST(TensorTest, DTypeNamesAndSizes) {
  struct Case {
    DType dtype;
    const char *name;
    size_t size;
  };
  for (Case c : {Case{program::F32, "f32", 4}, Case{program::F16, "f16", 2},
                 Case{program::BF16, "bf16", 2}, Case{program::I64, "i64", 8},
                 Case{program::I32, "i32", 4}, Case{program::I8, "i8", 1},
                 Case{program::BOOL, "bool", 1}}) {
    EXPECT_EQ(dtypeName(c.dtype), c.name);
    EXPECT_EQ(dtypeSize(c.dtype), c.size);
    EXPECT_EQ(dtypeFromName(c.name), c.dtype);
  }
  EXPECT_EQ(dtypeSize(program::DTYPE_UNSPECIFIED), 0u);
  EXPECT_EQ(dtypeFromName("float32"), program::DTYPE_UNSPECIFIED);
  EXPECT_EQ(dtypeFromName(""), program::DTYPE_UNSPECIFIED);
}

TEST(TensorTest, ShapeString) {
  EXPECT_EQ(shapeString({2, 16, 64}), "[2, 16, 64]");
  EXPECT_EQ(shapeString({7}), "[7]");
  EXPECT_EQ(shapeString({}), "[]");
}

TEST(TensorTest, ByteSize) {
  Tensor t{nullptr, program::BF16, {3, 5}};
  EXPECT_EQ(t.numElements(), 15);
  EXPECT_EQ(t.byteSize(), 30u);
}

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (unsigned threads : {1u, 2u, 4u}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 7, 100, 10007}) {
      for (int64_t grain : {1, 3, 64, 100000}) {
        std::vector<std::atomic<int>> hits(n);
        std::mutex mutex;
        int64_t smallest = n;
        int chunks = 0;
        pool.parallelFor(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            hits[i].fetch_add(1);
          std::lock_guard<std::mutex> lock(mutex);
          smallest = std::min(smallest, e - b);
          ++chunks;
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "n " << n << " grain " << grain;
        if (n > 0 && chunks > 1) {
          EXPECT_GE(smallest, grain);
        }
      }
    }
  }
}

TEST(ThreadPoolTest, DefaultSizeIsHardwareThreads) {
  ThreadPool pool;
  EXPECT_EQ(pool.size(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(ThreadPoolTest, NestedLoopsRunInline) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  pool.parallelFor(16, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallelFor(100, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j)
          sum.fetch_add(j);
      });
  });
  EXPECT_EQ(sum.load(), 16 * 4950);
}

TEST(ThreadPoolTest, ConcurrentCallers) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        pool.parallelFor(1000, 10,
                         [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    });
  for (std::thread &t : callers)
    t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 1000);
}

/// Casts `input` to `dtype` through the kernel.
Buffer castTo(Buffer &input, DType dtype) {
  Buffer out(dtype, input.shape);
  Status s = KernelBuilder("cast").operand(input).result(out).run(testPool());
  EXPECT_TRUE(s.isOk()) << s.message();
  return out;
}

TEST(ConversionTest, HalfToFloatIsExactForEveryValue) {
  Buffer halves(program::F16, {65536});
  for (int64_t i = 0; i < 65536; ++i) {
    uint16_t b = static_cast<uint16_t>(i);
    std::memcpy(reinterpret_cast<char *>(halves.data()) + 2 * i, &b, 2);
  }
  Buffer floats = castTo(halves, program::F32);
  for (int64_t i = 0; i < 65536; ++i) {
    double expected = refFromHalf(static_cast<uint16_t>(i));
    double got = floats.get(i);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << i;
      continue;
    }
    ASSERT_EQ(got, expected) << "bits " << i;
    // The sign of zero survives too.
    ASSERT_EQ(std::signbit(got), std::signbit(expected)) << "bits " << i;
  }
}

TEST(ConversionTest, FloatToHalfRoundsToNearestEven) {
  std::mt19937 rng(7);
  std::vector<float> values;
  // Every tie between adjacent halves (normal and subnormal), and the
  // floats just beside each tie.
  for (uint32_t h = 0; h < 0x7C00; h += 37) {
    float a = static_cast<float>(refFromHalf(static_cast<uint16_t>(h)));
    float b = static_cast<float>(refFromHalf(static_cast<uint16_t>(h + 1)));
    float mid = (a + b) / 2; // Exact: halves have 11 significant bits.
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
      values.insert(values.end(), {v, -v});
  }
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 20000; ++i)
    values.insert(values.end(), {wide(rng), tiny(rng)});
  values.insert(values.end(), {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f,
                               -1e9f, std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(), 1e-10f,
                               5.96e-8f, 2.98e-8f, 2.99e-8f});
  Buffer in(program::F32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i)
    in.set(i, values[i]);
  Buffer out = castTo(in, program::F16);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, reinterpret_cast<const char *>(out.data()) + 2 * i, 2);
    ASSERT_EQ(got, refToHalf(values[i])) << "value " << values[i];
  }
  Buffer nan(program::F32, {1});
  nan.set(0, std::nan(""));
  EXPECT_TRUE(std::isnan(castTo(nan, program::F16).get(0)));
}

TEST(ConversionTest, FloatToBf16RoundsToNearestEven) {
  std::mt19937 rng(11);
  std::vector<float> values;
  for (uint32_t b = 0; b < 0x7F80; b += 13) {
    float lo = static_cast<float>(refFromBf16(static_cast<uint16_t>(b)));
    float hi = static_cast<float>(refFromBf16(static_cast<uint16_t>(b + 1)));
    float mid = (lo + hi) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)})
      values.insert(values.end(), {v, -v});
  }
  std::uniform_real_distribution<float> wide(-1e6f, 1e6f);
  for (int i = 0; i < 20000; ++i)
    values.push_back(wide(rng));
  values.insert(values.end(),
                {0.0f, -0.0f, 3.4e38f, std::numeric_limits<float>::infinity(),
                 std::numeric_limits<float>::denorm_min()});
  Buffer in(program::F32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i)
    in.set(i, values[i]);
  Buffer out = castTo(in, program::BF16);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, reinterpret_cast<const char *>(out.data()) + 2 * i, 2);
    ASSERT_EQ(got, refToBf16(values[i])) << "value " << values[i];
  }
  Buffer nan(program::F32, {1});
  nan.set(0, std::nan(""));
  EXPECT_TRUE(std::isnan(castTo(nan, program::BF16).get(0)));
}

} // namespace
} // namespace partita::runtime::test
