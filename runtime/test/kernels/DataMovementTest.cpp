//===- DataMovementTest.cpp - layout kernels and gathers ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

const DType kAllTypes[] = {program::F32, program::F16, program::BF16,
                           program::I64, program::I32, program::I8,
                           program::BOOL};

std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t> &shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t> &index,
              const std::vector<int64_t> &shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    i = i * shape[d] + index[d];
  return i;
}

void expectOk(const Status &s) { ASSERT_TRUE(s.isOk()) << s.message(); }

TEST(DataMovementTest, Transpose) {
  std::mt19937 rng(70);
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  for (DType dtype : kAllTypes)
    for (Case c : {Case{{3, 5}, {1, 0}}, Case{{2, 3, 4, 5}, {0, 2, 1, 3}},
                   Case{{2, 3, 40, 70}, {0, 1, 3, 2}},
                   Case{{4, 3, 2}, {2, 0, 1}}, Case{{1, 6, 1, 9}, {3, 2, 1, 0}},
                   Case{{33, 65}, {1, 0}}, Case{{5}, {0}}}) {
      SCOPED_TRACE(typeName(dtype) + " " + shapeString(c.shape) + " perm " +
                   shapeString(c.perm));
      Buffer x = randomBuffer(rng, dtype, c.shape, -100, 100);
      std::vector<int64_t> outShape;
      for (int64_t p : c.perm)
        outShape.push_back(c.shape[p]);
      Buffer out(dtype, outShape);
      expectOk(KernelBuilder("transpose")
                   .operand(x)
                   .result(out)
                   .attr("permutation", c.perm)
                   .run(testPool()));
      for (int64_t i = 0; i < out.numElements(); ++i) {
        std::vector<int64_t> o = unravel(i, outShape), in(c.shape.size());
        for (size_t d = 0; d < c.perm.size(); ++d)
          in[c.perm[d]] = o[d];
        ASSERT_EQ(out.get(i), x.get(ravel(in, c.shape))) << i;
      }
    }
}

TEST(DataMovementTest, BroadcastTo) {
  std::mt19937 rng(71);
  for (DType dtype : kAllTypes)
    for (auto [from, to] :
         std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
             {{1, 1, 8, 8}, {2, 12, 8, 8}},
             {{3, 1}, {2, 3, 4}},
             {{}, {5}},
             {{4}, {3, 4}}}) {
      Buffer x = randomBuffer(rng, dtype, from, -100, 100);
      Buffer out(dtype, to);
      expectOk(
          KernelBuilder("broadcast_to").operand(x).result(out).run(testPool()));
      for (int64_t i = 0; i < out.numElements(); ++i)
        ASSERT_EQ(out.get(i), x.get(broadcastIndex(i, to, from)))
            << typeName(dtype);
    }
}

TEST(DataMovementTest, SliceWithStrides) {
  std::mt19937 rng(72);
  for (DType dtype : kAllTypes) {
    Buffer x = randomBuffer(rng, dtype, {4, 9, 10}, -100, 100);
    std::vector<int64_t> start = {1, 0, 3}, limit = {4, 9, 10},
                         stride = {2, 4, 1};
    std::vector<int64_t> shape = {2, 3, 7};
    Buffer out(dtype, shape);
    expectOk(KernelBuilder("slice")
                 .operand(x)
                 .result(out)
                 .attr("start", start)
                 .attr("limit", limit)
                 .attr("stride", stride)
                 .run(testPool()));
    for (int64_t i = 0; i < out.numElements(); ++i) {
      std::vector<int64_t> o = unravel(i, shape), in(3);
      for (int d = 0; d < 3; ++d)
        in[d] = start[d] + o[d] * stride[d];
      ASSERT_EQ(out.get(i), x.get(ravel(in, x.shape))) << typeName(dtype);
    }
  }
  Buffer x(program::F32, {4}), out(program::F32, {2});
  Status s = KernelBuilder("slice")
                 .operand(x)
                 .result(out)
                 .attr("start", std::vector<int64_t>{3})
                 .attr("limit", std::vector<int64_t>{5})
                 .attr("stride", std::vector<int64_t>{1})
                 .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("slice"), std::string::npos);
}

TEST(DataMovementTest, ConcatAndSplitInvertEachOther) {
  std::mt19937 rng(73);
  for (DType dtype : kAllTypes)
    for (int64_t axis : {0, 1, 2, -1}) {
      SCOPED_TRACE(typeName(dtype) + " axis " + std::to_string(axis));
      int64_t a = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> base = {3, 4, 5};
      std::vector<Buffer> parts;
      std::vector<int64_t> sizes = {1, 3, 2};
      for (int64_t size : sizes) {
        std::vector<int64_t> shape = base;
        shape[a] = size;
        parts.push_back(randomBuffer(rng, dtype, shape, -100, 100));
      }
      std::vector<int64_t> joined = base;
      joined[a] = 6;
      Buffer cat(dtype, joined);
      KernelBuilder k("concat");
      for (Buffer &p : parts)
        k.operand(p);
      expectOk(k.result(cat).attr("axis", axis).run(testPool()));
      for (int64_t i = 0; i < cat.numElements(); ++i) {
        std::vector<int64_t> idx = unravel(i, joined);
        int64_t p = 0, offset = idx[a];
        while (offset >= sizes[p])
          offset -= sizes[p++];
        idx[a] = offset;
        ASSERT_EQ(cat.get(i), parts[p].get(ravel(idx, parts[p].shape)));
      }
      std::vector<Buffer> pieces;
      for (Buffer &p : parts)
        pieces.emplace_back(dtype, p.shape);
      KernelBuilder sk("split");
      sk.operand(cat);
      for (Buffer &p : pieces)
        sk.result(p);
      expectOk(sk.attr("axis", axis).run(testPool()));
      for (size_t p = 0; p < parts.size(); ++p)
        EXPECT_EQ(pieces[p].values(), parts[p].values());
    }
}

TEST(DataMovementTest, CopyKeepsBytes) {
  std::mt19937 rng(74);
  Buffer x = randomBuffer(rng, program::BF16, {3, 100000});
  Buffer out(program::BF16, {3, 100000});
  expectOk(KernelBuilder("copy").operand(x).result(out).run(testPool()));
  EXPECT_EQ(std::memcmp(x.data(), out.data(), 600000), 0);
}

TEST(DataMovementTest, GatherAlongEachAxisWithNegativeIndices) {
  std::mt19937 rng(75);
  for (DType dtype : kAllTypes)
    for (DType indexType : {program::I64, program::I32})
      for (int64_t axis : {0, 1, 2}) {
        SCOPED_TRACE(typeName(dtype) + " indices " + typeName(indexType) +
                     " axis " + std::to_string(axis));
        std::vector<int64_t> shape = {4, 5, 6};
        Buffer data = randomBuffer(rng, dtype, shape, -100, 100);
        Buffer indices =
            randomBuffer(rng, indexType, {2, 3}, -shape[axis], shape[axis] - 1);
        std::vector<int64_t> outShape(shape.begin(), shape.begin() + axis);
        outShape.insert(outShape.end(), {2, 3});
        outShape.insert(outShape.end(), shape.begin() + axis + 1, shape.end());
        Buffer out(dtype, outShape);
        expectOk(KernelBuilder("gather")
                     .operand(data)
                     .operand(indices)
                     .result(out)
                     .attr("axis", axis)
                     .run(testPool()));
        for (int64_t i = 0; i < out.numElements(); ++i) {
          std::vector<int64_t> o = unravel(i, outShape);
          std::vector<int64_t> in(o.begin(), o.begin() + axis);
          int64_t which = o[axis] * 3 + o[axis + 1];
          int64_t v = indices.getInt(which);
          in.push_back(v < 0 ? v + shape[axis] : v);
          in.insert(in.end(), o.begin() + axis + 2, o.end());
          ASSERT_EQ(out.get(i), data.get(ravel(in, shape)));
        }
      }
}

TEST(DataMovementTest, GatherScalarIndex) {
  Buffer data(program::I64, {4});
  data.setValues({10, 20, 30, 40});
  Buffer index(program::I64, {});
  index.setInt(0, -1);
  Buffer out(program::I64, {});
  expectOk(KernelBuilder("gather")
               .operand(data)
               .operand(index)
               .result(out)
               .attr("axis", 0)
               .run(testPool()));
  EXPECT_EQ(out.getInt(0), 40);
}

TEST(DataMovementTest, Embedding) {
  std::mt19937 rng(76);
  for (DType dtype : kFloatTypes)
    for (DType indexType : {program::I64, program::I32}) {
      Buffer table = randomBuffer(rng, dtype, {50, 12});
      Buffer ids = randomBuffer(rng, indexType, {2, 7}, 0, 49);
      Buffer out(dtype, {2, 7, 12});
      expectOk(KernelBuilder("embedding")
                   .operand(table)
                   .operand(ids)
                   .result(out)
                   .run(testPool()));
      for (int64_t t = 0; t < 14; ++t)
        for (int64_t e = 0; e < 12; ++e)
          ASSERT_EQ(out.get(t * 12 + e), table.get(ids.getInt(t) * 12 + e));
    }
}

TEST(DataMovementTest, OutOfRangeIndicesAreErrors) {
  Buffer data(program::F32, {4, 3}), out(program::F32, {2, 3});
  Buffer indices(program::I64, {2});
  indices.setInt(0, 1);
  indices.setInt(1, 4);
  Status s = KernelBuilder("gather")
                 .operand(data)
                 .operand(indices)
                 .result(out)
                 .attr("axis", 0)
                 .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("gather"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4"), std::string::npos) << s.message();
  indices.setInt(1, -5);
  s = KernelBuilder("gather")
          .operand(data)
          .operand(indices)
          .result(out)
          .attr("axis", 0)
          .run(testPool());
  EXPECT_FALSE(s.isOk());
  Buffer emb(program::F32, {2, 3});
  indices.setInt(1, 4);
  s = KernelBuilder("embedding")
          .operand(data)
          .operand(indices)
          .result(emb)
          .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("embedding"), std::string::npos) << s.message();
}

} // namespace
} // namespace partita::runtime::test
