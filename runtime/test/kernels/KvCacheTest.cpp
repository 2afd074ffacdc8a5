//===- KvCacheTest.cpp - kv_cache_write -----------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// kv_cache_write against a reference for every axis, update length, slot
// and element type, with the result in the cache's own memory (as the
// runtime binds a serving artifact's cache) and in a buffer of its own; the
// slots it must refuse; and the errors of a malformed kernel.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    ::partita::runtime::Status _s = (expr);                                    \
    ASSERT_TRUE(_s.isOk()) << _s.message();                                    \
  } while (false)

namespace partita::runtime::test {
namespace {

/// Runs kv_cache_write over views: `out` may be `cache`'s memory (in place).
Status runWrite(const Tensor &cache, const Tensor &update,
                const Tensor &position, const Tensor &out, int64_t axis) {
  program::Kernel kernel;
  kernel.set_op("kv_cache_write");
  for (int32_t id : {0, 1, 2})
    kernel.add_operands(id);
  kernel.add_results(3);
  (*kernel.mutable_attributes())["axis"].set_i(axis);
  Tensor views[] = {cache, update, position, out};
  BufferResolver resolver = [&](int32_t id) {
    return id >= 0 && id < 4 ? views[id] : Tensor{};
  };
  return runHostKernel(kernel, resolver, testPool());
}

/// Random bytes, whatever the element type: the kernel moves bytes.
Buffer randomBytes(std::mt19937 &rng, DType dtype, std::vector<int64_t> shape) {
  Buffer b(dtype, std::move(shape));
  auto *bytes = reinterpret_cast<uint8_t *>(b.data());
  for (size_t i = 0; i < size_t(b.numElements()) * dtypeSize(dtype); ++i)
    bytes[i] = uint8_t(rng());
  return b;
}

/// The reference: the cache with `update` written at `slot` along `axis`.
Buffer referenceWrite(const Buffer &cache, const Buffer &update, int64_t slot,
                      int64_t axis) {
  Buffer out = cache;
  size_t element = dtypeSize(cache.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= cache.shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < cache.shape.size(); ++d)
    inner *= cache.shape[d];
  int64_t slots = cache.shape[size_t(axis)],
          tokens = update.shape[size_t(axis)];
  auto *dst = reinterpret_cast<char *>(out.data());
  auto *src = reinterpret_cast<const char *>(update.data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t t = 0; t < tokens; ++t)
      std::memcpy(dst + ((o * slots + slot + t) * inner) * int64_t(element),
                  src + ((o * tokens + t) * inner) * int64_t(element),
                  size_t(inner) * element);
  return out;
}

bool sameBytes(const Buffer &a, const Buffer &b) {
  return a.shape == b.shape && a.dtype == b.dtype &&
         std::memcmp(a.data(), b.data(),
                     size_t(a.numElements()) * dtypeSize(a.dtype)) == 0;
}

Buffer positionOf(int64_t slot) {
  Buffer position(program::I64, {1});
  position.setInt(0, slot);
  return position;
}

TEST(KvCacheTest, EveryAxisLengthAndSlotInPlaceAndCopying) {
  std::mt19937 rng(7);
  const std::vector<std::vector<int64_t>> shapes = {
      {6}, {2, 5, 3}, {2, 3, 6, 4}, {1, 2, 7, 1}};
  for (const auto &shape : shapes)
    for (int64_t axis = 0; axis < int64_t(shape.size()); ++axis) {
      int64_t slots = shape[size_t(axis)];
      for (int64_t tokens : {int64_t(1), int64_t(2), slots}) {
        if (tokens > slots)
          continue;
        std::vector<int64_t> updateShape = shape;
        updateShape[size_t(axis)] = tokens;
        for (int64_t slot = 0; slot + tokens <= slots; ++slot) {
          SCOPED_TRACE(shapeString(shape) + " axis " + std::to_string(axis) +
                       ": " + std::to_string(tokens) + " at " +
                       std::to_string(slot));
          Buffer cache = randomBytes(rng, program::F32, shape);
          Buffer update = randomBytes(rng, program::F32, updateShape);
          Buffer position = positionOf(slot);
          Buffer expected = referenceWrite(cache, update, slot, axis);

          Buffer out = randomBytes(rng, program::F32, shape);
          ASSERT_OK(runWrite(cache.view(), update.view(), position.view(),
                             out.view(), axis));
          EXPECT_TRUE(sameBytes(out, expected));

          // In place, with a negative axis for good measure.
          Buffer resident = cache;
          ASSERT_OK(runWrite(resident.view(), update.view(), position.view(),
                             resident.view(), axis - int64_t(shape.size())));
          EXPECT_TRUE(sameBytes(resident, expected));
        }
      }
    }
}

TEST(KvCacheTest, EveryElementType) {
  std::mt19937 rng(11);
  for (DType dtype : {program::F32, program::F16, program::BF16, program::I64,
                      program::I32, program::I8, program::BOOL}) {
    SCOPED_TRACE(typeName(dtype));
    Buffer cache = randomBytes(rng, dtype, {2, 3, 8, 5});
    Buffer update = randomBytes(rng, dtype, {2, 3, 3, 5});
    Buffer position = positionOf(4);
    Buffer expected = referenceWrite(cache, update, 4, 2);
    Buffer out(dtype, {2, 3, 8, 5});
    ASSERT_OK(
        runWrite(cache.view(), update.view(), position.view(), out.view(), 2));
    EXPECT_TRUE(sameBytes(out, expected));
    ASSERT_OK(runWrite(cache.view(), update.view(), position.view(),
                       cache.view(), 2));
    EXPECT_TRUE(sameBytes(cache, expected));
  }
}

/// A cache larger than one copy block (256 KiB), copied in parallel.
TEST(KvCacheTest, LargeCacheIsCopiedWhole) {
  std::mt19937 rng(3);
  Buffer cache = randomBytes(rng, program::F32, {4, 8, 512, 64});
  Buffer update = randomBytes(rng, program::F32, {4, 8, 1, 64});
  Buffer position = positionOf(511);
  Buffer out(program::F32, {4, 8, 512, 64});
  ASSERT_OK(
      runWrite(cache.view(), update.view(), position.view(), out.view(), 2));
  EXPECT_TRUE(sameBytes(out, referenceWrite(cache, update, 511, 2)));
}

/// One position per row of the batch: each row's update at its own slot,
/// each row checked against the reference written with that row's slot.
TEST(KvCacheTest, PositionPerRow) {
  std::mt19937 rng(5);
  Buffer cache = randomBytes(rng, program::F32, {3, 2, 8, 4});
  Buffer update = randomBytes(rng, program::F32, {3, 2, 2, 4});
  const int64_t slots[] = {0, 6, 3};
  Buffer position(program::I64, {3});
  for (int64_t r = 0; r < 3; ++r)
    position.setInt(r, slots[r]);
  Buffer out(program::F32, {3, 2, 8, 4}), resident = cache;
  ASSERT_OK(
      runWrite(cache.view(), update.view(), position.view(), out.view(), 2));
  ASSERT_OK(runWrite(resident.view(), update.view(), position.view(),
                     resident.view(), 2));
  size_t rowBytes = size_t(2 * 8 * 4) * sizeof(float);
  for (int64_t r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    Buffer expected = referenceWrite(cache, update, slots[r], 2);
    const char *want = reinterpret_cast<const char *>(expected.data());
    for (const Buffer *got : {&out, &resident})
      EXPECT_EQ(std::memcmp(reinterpret_cast<const char *>(got->data()) +
                                r * rowBytes,
                            want + r * rowBytes, rowBytes),
                0);
  }
  // A row whose slot does not fit refuses the whole write.
  position.setInt(1, 7);
  Buffer before = resident;
  Status status = runWrite(resident.view(), update.view(), position.view(),
                           resident.view(), 2);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "kv_cache_write: writing 2 tokens at slot 7 "
                              "(row 1) overflows the cache of 8 slots");
  EXPECT_TRUE(sameBytes(resident, before));
}

/// A slot outside the cache is an error at run time that writes nothing.
TEST(KvCacheTest, OverflowIsAnError) {
  Buffer cache(program::F32, {1, 2, 8, 4});
  Buffer update(program::F32, {1, 2, 2, 4});
  update.setValues(std::vector<double>(16, 1.0));
  for (int64_t slot : {int64_t(7), int64_t(-1), int64_t(1) << 62}) {
    SCOPED_TRACE(slot);
    Buffer position = positionOf(slot);
    Buffer before = cache;
    Status status =
        runWrite(cache.view(), update.view(), position.view(), cache.view(), 2);
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.message(), "kv_cache_write: writing 2 tokens at slot " +
                                    std::to_string(slot) +
                                    " overflows the cache of 8 slots");
    EXPECT_TRUE(sameBytes(cache, before));
  }
  Buffer last = positionOf(6);
  EXPECT_TRUE(
      runWrite(cache.view(), update.view(), last.view(), cache.view(), 2)
          .isOk());
}

TEST(KvCacheTest, MalformedKernels) {
  Buffer cache(program::F32, {2, 8, 4});
  Buffer update(program::F32, {2, 1, 4});
  Buffer position = positionOf(0);
  auto errorOf = [&](const Tensor &c, const Tensor &u, const Tensor &p,
                     const Tensor &o, int64_t axis) {
    Status status = runWrite(c, u, p, o, axis);
    EXPECT_FALSE(status.isOk());
    return status.message();
  };
  Buffer wide(program::F32, {2, 1, 5}), longer(program::F32, {2, 9, 4}),
      flat(program::F32, {2, 4});
  EXPECT_EQ(
      errorOf(cache.view(), wide.view(), position.view(), cache.view(), 1),
      "kv_cache_write: the update [2, 1, 5] does not fit the cache [2, "
      "8, 4] along axis 1");
  EXPECT_EQ(
      errorOf(cache.view(), longer.view(), position.view(), cache.view(), 1),
      "kv_cache_write: the update [2, 9, 4] does not fit the cache [2, 8, 4] "
      "along axis 1");
  EXPECT_EQ(
      errorOf(cache.view(), flat.view(), position.view(), cache.view(), 1),
      "kv_cache_write: the update [2, 4] does not fit the cache [2, 8, "
      "4] along axis 1");
  Buffer half(program::F16, {2, 1, 4});
  EXPECT_EQ(
      errorOf(cache.view(), half.view(), position.view(), cache.view(), 1),
      "kv_cache_write: the update has element type f16, expected f32");
  Buffer small(program::F32, {2, 7, 4}), ints(program::I32, {2, 8, 4});
  EXPECT_EQ(
      errorOf(cache.view(), update.view(), position.view(), small.view(), 1),
      "kv_cache_write: the result has shape [2, 7, 4], expected [2, 8, 4]");
  EXPECT_EQ(
      errorOf(cache.view(), update.view(), position.view(), ints.view(), 1),
      "kv_cache_write: the result has element type i32, expected f32");
  // [2] is one position per row of the batch of 2; [3] is neither, and
  // along the batch itself rows cannot have positions of their own.
  Buffer narrow(program::I32, {1}), three(program::I64, {3}),
      pair(program::I64, {2});
  EXPECT_EQ(
      errorOf(cache.view(), update.view(), narrow.view(), cache.view(), 1),
      "kv_cache_write: the position is i32 [1], expected i64 with one "
      "element or one per row of the batch");
  EXPECT_EQ(errorOf(cache.view(), update.view(), three.view(), cache.view(), 1),
            "kv_cache_write: the position is i64 [3], expected i64 with one "
            "element or one per row of the batch");
  Buffer rows(program::F32, {1, 8, 4});
  EXPECT_EQ(errorOf(cache.view(), rows.view(), pair.view(), cache.view(), 0),
            "kv_cache_write: the position is i64 [2], expected i64 with one "
            "element or one per row of the batch");
  EXPECT_EQ(
      errorOf(cache.view(), update.view(), position.view(), cache.view(), 3),
      "kv_cache_write: axis 3 is out of range for rank 3");

  KernelBuilder noAxis("kv_cache_write");
  noAxis.operand(cache).operand(update).operand(position).result(cache);
  Status status = noAxis.run(testPool());
  EXPECT_EQ(status.message(), "kv_cache_write: missing attribute 'axis'");
  KernelBuilder epilogue("kv_cache_write");
  epilogue.operand(cache).operand(update).operand(position).result(cache);
  epilogue.attr("axis", 1).step("neg");
  status = epilogue.run(testPool());
  EXPECT_EQ(status.message(), "kv_cache_write: takes no epilogue (it writes "
                              "one slice of its result)");
}

} // namespace
} // namespace partita::runtime::test
