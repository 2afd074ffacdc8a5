//===- WeightViewTest.cpp - views of weights and their strided copy -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/WeightView.h"
#include "partita/runtime/Float16.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

/// The same tensor as a view, spelled out naively: for each dimension the
/// source index of every view index, and the dtypes.
struct Reference {
  std::vector<int64_t> sourceShape;
  std::vector<std::vector<int64_t>> map;
  DType from, to;

  std::vector<int64_t> shape() const {
    std::vector<int64_t> shape;
    for (const auto &indices : map)
      shape.push_back(int64_t(indices.size()));
    return shape;
  }

  /// The view's bytes, one element at a time by index arithmetic.
  std::vector<uint8_t> bytes(const uint8_t *source) const {
    std::vector<int64_t> shape = this->shape();
    int64_t elements = 1;
    for (int64_t dim : shape)
      elements *= dim;
    size_t inBytes = dtypeSize(from), outBytes = dtypeSize(to);
    std::vector<uint8_t> out(size_t(elements) * outBytes);
    for (int64_t flat = 0; flat < elements; ++flat) {
      // Row-major digits of `flat`, each mapped to its source index.
      int64_t rest = flat, offset = 0, stride = 1;
      for (size_t d = shape.size(); d-- > 0;) {
        int64_t i = rest % shape[d];
        rest /= shape[d];
        offset += map[d][size_t(i)] * stride;
        stride *= sourceShape[d];
      }
      const uint8_t *in = source + size_t(offset) * inBytes;
      uint8_t *at = out.data() + size_t(flat) * outBytes;
      if (from == to) {
        std::memcpy(at, in, inBytes);
        continue;
      }
      float value;
      std::memcpy(&value, in, 4);
      uint16_t half =
          to == program::BF16 ? floatToBf16(value) : floatToF16(value);
      std::memcpy(at, &half, 2);
    }
    return out;
  }
};

Reference referenceOf(DType dtype, const std::vector<int64_t> &shape) {
  Reference reference{shape, {}, dtype, dtype};
  for (int64_t dim : shape) {
    std::vector<int64_t> indices(static_cast<size_t>(dim));
    std::iota(indices.begin(), indices.end(), 0);
    reference.map.push_back(indices);
  }
  return reference;
}

/// Random source bytes; f32 sources hold finite values of every magnitude
/// (NaN handling is Float16.h's, tested there).
std::vector<uint8_t> randomSource(DType dtype,
                                  const std::vector<int64_t> &shape,
                                  std::mt19937_64 &random) {
  int64_t elements = 1;
  for (int64_t dim : shape)
    elements *= dim;
  std::vector<uint8_t> bytes(size_t(elements) * dtypeSize(dtype));
  for (uint8_t &byte : bytes)
    byte = uint8_t(random());
  if (dtype == program::F32)
    for (size_t i = 0; i < bytes.size(); i += 4) {
      float value = std::ldexp(float(int32_t(random())) / 2147483648.0f,
                               int(random() % 40) - 20);
      std::memcpy(&bytes[i], &value, 4);
    }
  return bytes;
}

std::vector<uint8_t> copyOf(const WeightView &view) {
  std::vector<uint8_t> out(view.byteSize());
  view.copyTo(out.data());
  return out;
}

/// A random permutation of 0..n-1: arbitrary, or a permutation of equal
/// blocks (the fused-QKV reordering's kind), or the identity.
std::vector<int64_t> randomPermutation(int64_t n, std::mt19937_64 &random) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  int kind = int(random() % 3);
  if (kind == 0) {
    std::shuffle(order.begin(), order.end(), random);
    return order;
  }
  if (kind == 1 && n > 1) {
    std::vector<int64_t> divisors;
    for (int64_t d = 2; d <= n; ++d)
      if (n % d == 0)
        divisors.push_back(d);
    int64_t blocks = divisors[random() % divisors.size()];
    int64_t size = n / blocks;
    std::vector<int64_t> blockOrder(static_cast<size_t>(blocks));
    std::iota(blockOrder.begin(), blockOrder.end(), 0);
    std::shuffle(blockOrder.begin(), blockOrder.end(), random);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t i = 0; i < size; ++i)
        order[size_t(b * size + i)] = blockOrder[size_t(b)] * size + i;
  }
  return order;
}

TEST(WeightView, OfChecksBytesAgainstShape) {
  float data[6] = {};
  WeightView view =
      WeightView::of(data, sizeof(data), program::F32, {2, 3}, nullptr);
  ASSERT_TRUE(view.valid());
  EXPECT_TRUE(view.isWhole());
  EXPECT_EQ(view.byteSize(), 24u);
  EXPECT_EQ(view.sourceBytes(), 24u);
  EXPECT_EQ(view.rows(), 2);
  EXPECT_FALSE(view.isFileMapped());
  EXPECT_EQ(view.runs(1), (std::vector<IndexRun>{{0, 3}}));
  EXPECT_FALSE(WeightView::of(data, 20, program::F32, {2, 3}, nullptr).valid());
  EXPECT_FALSE(
      WeightView::of(nullptr, 24, program::F32, {2, 3}, nullptr).valid());
  EXPECT_FALSE(WeightView::of(data, 0, program::F32, {-1}, nullptr).valid());
  EXPECT_FALSE(
      WeightView::of(data, 24, program::DTYPE_UNSPECIFIED, {2, 3}, nullptr)
          .valid());
  EXPECT_FALSE(WeightView().valid());
  // No bytes are needed for no elements.
  WeightView empty = WeightView::of(nullptr, 0, program::F32, {0, 3}, nullptr);
  EXPECT_TRUE(empty.valid());
  EXPECT_TRUE(empty.runs(0).empty());
  WeightView scalar = WeightView::of(data, 4, program::F32, {}, nullptr);
  EXPECT_TRUE(scalar.valid());
  EXPECT_EQ(scalar.rows(), 1);
  EXPECT_EQ(scalar.elements(), 1);
}

TEST(WeightView, TheOwnerKeepsTheSourceAlive) {
  auto bytes = std::make_shared<std::vector<float>>(4, 2.5f);
  WeightView view = WeightView::of(bytes->data(), 16, program::F32, {4},
                                   std::shared_ptr<const void>(bytes))
                        .slice(0, 1, 2);
  std::weak_ptr<std::vector<float>> alive = bytes;
  bytes.reset();
  ASSERT_FALSE(alive.expired());
  float out[2];
  view.copyTo(out);
  EXPECT_EQ(out[0], 2.5f);
  view = WeightView();
  EXPECT_TRUE(alive.expired());
}

TEST(WeightView, InvalidOperationsGiveInvalidViews) {
  float data[12] = {};
  WeightView view =
      WeightView::of(data, sizeof(data), program::F32, {3, 4}, nullptr);
  EXPECT_FALSE(view.slice(2, 0, 1).valid());
  EXPECT_FALSE(view.slice(-1, 0, 1).valid());
  EXPECT_FALSE(view.slice(1, 3, 2).valid());
  EXPECT_FALSE(view.slice(1, -1, 1).valid());
  EXPECT_FALSE(view.slice(1, 0, -1).valid());
  EXPECT_TRUE(view.slice(1, 4, 0).valid());
  EXPECT_FALSE(view.block(0, 2, 0).valid());
  EXPECT_FALSE(view.block(1, 2, 2).valid());
  EXPECT_FALSE(view.block(1, 0, 0).valid());
  EXPECT_FALSE(view.permute(1, {0, 1, 2}).valid());
  EXPECT_FALSE(view.permute(1, {0, 1, 1, 2}).valid());
  EXPECT_FALSE(view.permute(1, {0, 1, 2, 4}).valid());
  EXPECT_FALSE(view.permute(3, {0}).valid());
  EXPECT_FALSE(view.convert(program::I64).valid());
  EXPECT_FALSE(view.convert(program::BF16).convert(program::F16).valid());
  EXPECT_TRUE(view.convert(program::BF16).convert(program::BF16).valid());
  int64_t ints[2] = {1, 2};
  EXPECT_FALSE(WeightView::of(ints, sizeof(ints), program::I64, {2}, nullptr)
                   .convert(program::BF16)
                   .valid());
  // Operations on an invalid view stay invalid.
  EXPECT_FALSE(WeightView().slice(0, 0, 0).valid());
  EXPECT_FALSE(view.slice(2, 0, 1).convert(program::F32).valid());

  // copyRows outside the rows writes nothing.
  float out[12];
  std::fill(out, out + 12, 7.0f);
  view.copyRows(2, 2, out);
  view.copyRows(-1, 1, out);
  WeightView().copyTo(out);
  EXPECT_TRUE(std::all_of(out, out + 12, [](float v) { return v == 7.0f; }));
}

TEST(WeightView, RunsMergeWhereIndicesAreContiguous) {
  std::vector<float> data(64);
  WeightView view = WeightView::of(data.data(), data.size() * 4, program::F32,
                                   {4, 16}, nullptr);
  // Swapping the halves of the columns: two runs, not sixteen entries.
  std::vector<int64_t> swap(16);
  for (int64_t j = 0; j < 16; ++j)
    swap[size_t(j)] = (j + 8) % 16;
  WeightView swapped = view.permute(1, swap);
  EXPECT_EQ(swapped.runs(1), (std::vector<IndexRun>{{8, 8}, {0, 8}}));
  EXPECT_FALSE(swapped.isWhole());
  // Swapping back maps through the runs: the identity, one run, whole.
  WeightView back = swapped.permute(1, swap);
  EXPECT_EQ(back.runs(1), (std::vector<IndexRun>{{0, 16}}));
  EXPECT_TRUE(back.isWhole());
  EXPECT_EQ(back, view);
  // A block across the seam of the two runs keeps both pieces.
  EXPECT_EQ(swapped.slice(1, 6, 4).runs(1),
            (std::vector<IndexRun>{{14, 2}, {0, 2}}));
  EXPECT_EQ(swapped.block(1, 4, 1).runs(1), (std::vector<IndexRun>{{12, 4}}));
  // An empty slice has no runs.
  EXPECT_TRUE(view.slice(0, 2, 0).runs(0).empty());
  EXPECT_EQ(view.slice(0, 2, 0).elements(), 0);
}

TEST(WeightView, Equality) {
  std::vector<float> data(24), other(24);
  WeightView view =
      WeightView::of(data.data(), 96, program::F32, {4, 6}, nullptr);
  EXPECT_EQ(view, WeightView::of(data.data(), 96, program::F32, {4, 6},
                                 std::make_shared<int>(1)));
  EXPECT_NE(view,
            WeightView::of(other.data(), 96, program::F32, {4, 6}, nullptr));
  EXPECT_NE(view,
            WeightView::of(data.data(), 96, program::F32, {6, 4}, nullptr));
  EXPECT_NE(view,
            WeightView::of(data.data(), 96, program::I32, {4, 6}, nullptr));
  EXPECT_EQ(view.block(1, 3, 1), view.slice(1, 2, 2));
  EXPECT_EQ(view.slice(1, 1, 4).slice(1, 1, 2), view.slice(1, 2, 2));
  EXPECT_NE(view.slice(1, 2, 2), view.slice(0, 1, 2));
  EXPECT_EQ(view.permute(0, {0, 1, 2, 3}), view);
  EXPECT_NE(view.permute(0, {1, 0, 2, 3}), view);
  EXPECT_NE(view.convert(program::BF16), view);
  EXPECT_NE(view.convert(program::BF16), view.convert(program::F16));
  EXPECT_EQ(view.convert(program::BF16), view.convert(program::BF16));
  EXPECT_EQ(view.convert(program::F32), view);
}

/// Random compositions of slice, block, permute and convert on sources of
/// rank 0 to 4 (dimensions of size 0 included): copyTo and copyRows over
/// random row ranges equal the naive element-by-element reference.
TEST(WeightView, RandomCompositionsMatchTheReference) {
  std::mt19937_64 random(20240517);
  const DType kDTypes[] = {program::F32, program::I64, program::I8,
                           program::BF16};
  int checked = 0, converted = 0, multiRun = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    DType dtype = kDTypes[random() % 4];
    size_t rank = random() % 5;
    std::vector<int64_t> shape;
    for (size_t d = 0; d < rank; ++d)
      shape.push_back(random() % 12 == 0 ? 0 : int64_t(1 + random() % 7));
    std::vector<uint8_t> source = randomSource(dtype, shape, random);
    WeightView view =
        WeightView::of(source.data(), source.size(), dtype, shape, nullptr);
    ASSERT_TRUE(view.valid());
    Reference reference = referenceOf(dtype, shape);
    int steps = int(random() % 6);
    for (int step = 0; step < steps; ++step) {
      int op = int(random() % 4);
      if (op == 3 || rank == 0) {
        DType to = random() % 2 ? program::BF16 : program::F16;
        WeightView next = view.convert(to);
        if (reference.from == program::F32 && reference.to == program::F32) {
          ASSERT_TRUE(next.valid());
          reference.to = to;
        } else if (to != reference.to) {
          ASSERT_FALSE(next.valid());
          continue;
        }
        view = next;
        continue;
      }
      size_t dim = random() % rank;
      int64_t size = int64_t(reference.map[dim].size());
      std::vector<int64_t> &indices = reference.map[dim];
      if (op == 0) {
        int64_t start = int64_t(random() % uint64_t(size + 1));
        int64_t length = int64_t(random() % uint64_t(size - start + 1));
        view = view.slice(int64_t(dim), start, length);
        indices = std::vector<int64_t>(indices.begin() + start,
                                       indices.begin() + start + length);
      } else if (op == 1) {
        std::vector<int64_t> divisors;
        for (int64_t p = 1; p <= std::max<int64_t>(size, 1); ++p)
          if (size % p == 0)
            divisors.push_back(p);
        int64_t parts = divisors[random() % divisors.size()];
        int64_t block = int64_t(random() % uint64_t(parts));
        view = view.block(int64_t(dim), parts, block);
        int64_t length = size / parts;
        indices = std::vector<int64_t>(indices.begin() + block * length,
                                       indices.begin() + (block + 1) * length);
      } else {
        std::vector<int64_t> sourceOf = randomPermutation(size, random);
        view = view.permute(int64_t(dim), sourceOf);
        std::vector<int64_t> permuted;
        for (int64_t j : sourceOf)
          permuted.push_back(indices[size_t(j)]);
        indices = permuted;
      }
      ASSERT_TRUE(view.valid()) << "trial " << trial << " step " << step;
    }
    ASSERT_EQ(view.shape(), reference.shape());
    ASSERT_EQ(view.dtype(), reference.to);
    // The runs are the reference's indices, merged where contiguous.
    for (size_t d = 0; d < rank; ++d) {
      std::vector<int64_t> listed;
      for (const IndexRun &run : view.runs(int64_t(d))) {
        ASSERT_GT(run.length, 0);
        for (int64_t i = 0; i < run.length; ++i)
          listed.push_back(run.start + i);
      }
      ASSERT_EQ(listed, reference.map[d]);
      for (size_t r = 1; r < view.runs(int64_t(d)).size(); ++r)
        EXPECT_NE(view.runs(int64_t(d))[r - 1].start +
                      view.runs(int64_t(d))[r - 1].length,
                  view.runs(int64_t(d))[r].start);
      multiRun += view.runs(int64_t(d)).size() > 1;
    }
    std::vector<uint8_t> expected = reference.bytes(source.data());
    ASSERT_EQ(copyOf(view), expected) << "trial " << trial;
    converted += view.dtype() != view.sourceDType();

    int64_t rows = view.rows();
    int64_t first = int64_t(random() % uint64_t(rows + 1));
    int64_t count = int64_t(random() % uint64_t(rows - first + 1));
    size_t rowBytes = rows == 0 ? 0 : expected.size() / size_t(rows);
    // One byte past the rows: copyRows must not write it.
    std::vector<uint8_t> part(size_t(count) * rowBytes + 1, 0xA5);
    view.copyRows(first, count, part.data());
    EXPECT_EQ(part.back(), 0xA5);
    part.pop_back();
    EXPECT_EQ(part, std::vector<uint8_t>(
                        expected.begin() + first * int64_t(rowBytes),
                        expected.begin() + (first + count) * int64_t(rowBytes)))
        << "trial " << trial << " rows " << first << "+" << count;
    ++checked;
  }
  EXPECT_EQ(checked, 3000);
  // The sweep did exercise conversions and multi-run maps.
  EXPECT_GT(converted, 100);
  EXPECT_GT(multiRun, 300);
}

TEST(WeightView, ColumnBlocksOfALargerMatrix) {
  // tp=4 column blocks of a fused matrix, converted to bf16: each rank's
  // block, row by row, is what the naive loop gives.
  std::mt19937_64 random(7);
  std::vector<int64_t> shape = {64, 96};
  std::vector<uint8_t> source = randomSource(program::F32, shape, random);
  WeightView view = WeightView::of(source.data(), source.size(), program::F32,
                                   shape, nullptr);
  const auto *values = reinterpret_cast<const float *>(source.data());
  for (int64_t rank = 0; rank < 4; ++rank) {
    WeightView shard = view.block(1, 4, rank).convert(program::BF16);
    std::vector<uint16_t> out(64 * 24);
    shard.copyTo(out.data());
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 24; ++j)
        ASSERT_EQ(out[size_t(i * 24 + j)],
                  floatToBf16(values[i * 96 + rank * 24 + j]));
  }
}

TEST(WeightView, ZeroRunsPadWithZeros) {
  // A 3x5 table padded to 4x8 (a vocabulary padded for tp), then split
  // into the blocks ranks hold, converted to bf16: every element is the
  // source's or, outside it, zero.
  std::vector<float> data(15);
  std::iota(data.begin(), data.end(), 1.0f);
  WeightView view = WeightView::of(data.data(), data.size() * 4, program::F32,
                                   {3, 5}, nullptr);
  WeightView padded = view.select(0, {{0, 3}, {kZeroRunStart, 1}})
                          .select(1, {{0, 5}, {kZeroRunStart, 3}});
  ASSERT_TRUE(padded.valid());
  EXPECT_EQ(padded.shape(), (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(padded.isWhole());
  EXPECT_NE(padded, view);
  // Padding again extends the zero run instead of adding one.
  EXPECT_EQ(padded.select(1, {{0, 8}, {kZeroRunStart, 2}}).runs(1),
            (std::vector<IndexRun>{{0, 5}, {kZeroRunStart, 5}}));
  // A slice inside the padding reads only zeros.
  EXPECT_EQ(padded.slice(1, 6, 2).runs(1),
            (std::vector<IndexRun>{{kZeroRunStart, 2}}));
  auto expected = [&](int64_t i, int64_t j) {
    return i < 3 && j < 5 ? data[size_t(i * 5 + j)] : 0.0f;
  };
  for (int64_t dim = 0; dim < 2; ++dim)
    for (int64_t rank = 0; rank < 4; ++rank) {
      WeightView shard = padded.block(dim, 4, rank);
      std::vector<float> out(size_t(shard.elements()));
      shard.copyTo(out.data());
      std::vector<uint16_t> half(out.size());
      shard.convert(program::BF16).copyTo(half.data());
      int64_t rows = shard.shape()[0], cols = shard.shape()[1];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          float want =
              dim == 0 ? expected(rank + i, j) : expected(i, rank * 2 + j);
          ASSERT_EQ(out[size_t(i * cols + j)], want) << dim << " " << rank;
          ASSERT_EQ(half[size_t(i * cols + j)], floatToBf16(want));
        }
    }
  // The reader, a row at a time, gives the same bytes.
  WeightViewReader reader(8 * 4);
  reader.reset(padded);
  std::vector<float> read;
  size_t bytes = 0;
  while (const void *piece = reader.next(bytes)) {
    const auto *floats = static_cast<const float *>(piece);
    read.insert(read.end(), floats, floats + bytes / 4);
  }
  ASSERT_EQ(read.size(), 32u);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 8; ++j)
      EXPECT_EQ(read[size_t(i * 8 + j)], expected(i, j));
}

TEST(WeightView, ReaderCutsWholeRows) {
  std::vector<float> data(10 * 6);
  std::iota(data.begin(), data.end(), 0.0f);
  WeightView whole = WeightView::of(data.data(), data.size() * 4, program::F32,
                                    {10, 6}, nullptr);
  // 100 bytes a piece: 4 rows of 24 bytes.
  WeightViewReader reader(100);
  reader.reset(whole);
  size_t bytes;
  const void *piece = reader.next(bytes);
  // Whole views are read in place.
  EXPECT_EQ(piece, data.data());
  EXPECT_EQ(bytes, 96u);
  std::vector<size_t> sizes = {bytes};
  while (reader.next(bytes))
    sizes.push_back(bytes);
  EXPECT_EQ(sizes, (std::vector<size_t>{96, 96, 48}));
  EXPECT_EQ(bytes, 0u);

  WeightView shard = whole.slice(1, 1, 4).convert(program::F16);
  reader.reset(shard);
  std::vector<uint8_t> streamed;
  while (const void *next = reader.next(bytes)) {
    EXPECT_NE(next, static_cast<const void *>(data.data()));
    const auto *at = static_cast<const uint8_t *>(next);
    streamed.insert(streamed.end(), at, at + bytes);
  }
  EXPECT_EQ(streamed, copyOf(shard));

  // A row larger than the chunk is a piece of its own.
  WeightViewReader small(5);
  small.reset(shard);
  int pieces = 0;
  while (small.next(bytes)) {
    EXPECT_EQ(bytes, 8u);
    ++pieces;
  }
  EXPECT_EQ(pieces, 10);

  WeightView empty = whole.slice(0, 3, 0);
  reader.reset(empty);
  EXPECT_EQ(reader.next(bytes), nullptr);
  EXPECT_EQ(bytes, 0u);
}

} // namespace

TEST(WeightView, RegisteredMappingsMarkViewsFileMapped) {
  std::vector<char> region(4096);
  EXPECT_FALSE(isInFileMapping(region.data(), 16));
  registerFileMapping(region.data() + 1024, 2048);
  EXPECT_TRUE(isInFileMapping(region.data() + 1024, 2048));
  EXPECT_TRUE(isInFileMapping(region.data() + 2000, 16));
  // Partly outside, or wholly outside, on either side.
  EXPECT_FALSE(isInFileMapping(region.data() + 1020, 16));
  EXPECT_FALSE(isInFileMapping(region.data() + 3064, 16));
  EXPECT_FALSE(isInFileMapping(region.data(), 16));
  EXPECT_FALSE(isInFileMapping(region.data() + 1024, 0));
  EXPECT_FALSE(isInFileMapping(nullptr, 16));

  WeightView inside =
      WeightView::of(region.data() + 1024, 64, program::F32, {16}, nullptr);
  WeightView outside =
      WeightView::of(region.data(), 64, program::F32, {16}, nullptr);
  EXPECT_TRUE(inside.isFileMapped());
  EXPECT_FALSE(outside.isFileMapped());
  // Derived views keep the source's mark.
  EXPECT_TRUE(inside.slice(0, 2, 4).isFileMapped());

  unregisterFileMapping(region.data() + 1024);
  EXPECT_FALSE(isInFileMapping(region.data() + 1024, 16));
  EXPECT_FALSE(
      WeightView::of(region.data() + 1024, 64, program::F32, {16}, nullptr)
          .isFileMapped());
}
