//===- CommunicatorTest.cpp - host collectives and transfers --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Float16.h"
#include "partita/runtime/HostCommunicator.h"

#include "TestUtil.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

using namespace partita::runtime;
namespace program = partita::program;
using namespace std::chrono_literals;

namespace {

/// Generous: only the deadline tests rely on a wait expiring.
constexpr std::chrono::milliseconds kPatient = 60s;

/// Runs fn(rank, communicator) on one thread per rank; returns each rank's
/// status.
std::vector<Status>
runRanks(HostWorld &world,
         const std::function<Status(int32_t, Communicator &)> &fn) {
  std::vector<Status> statuses(size_t(world.worldSize()));
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < world.worldSize(); ++rank)
    threads.emplace_back([&, rank] {
      statuses[size_t(rank)] = fn(rank, world.communicator(rank));
    });
  for (std::thread &thread : threads)
    thread.join();
  return statuses;
}

void expectAllOk(const std::vector<Status> &statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank)
    EXPECT_TRUE(statuses[rank].isOk())
        << "rank " << rank << ": " << statuses[rank].message();
}

/// Host data of one dtype, with the conversions the reference needs.
struct Buffer {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  Buffer(DType dtype, std::vector<int64_t> shape)
      : dtype(dtype), shape(std::move(shape)) {
    bytes.resize(size_t(elements()) * dtypeSize(dtype));
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  float get(int64_t i) const {
    if (dtype == program::F32)
      return reinterpret_cast<const float *>(bytes.data())[i];
    return bf16ToFloat(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
  }
  void set(int64_t i, float value) {
    if (dtype == program::F32)
      reinterpret_cast<float *>(bytes.data())[i] = value;
    else
      reinterpret_cast<uint16_t *>(bytes.data())[i] = floatToBf16(value);
  }
  Tensor tensor() { return Tensor{bytes.data(), dtype, shape}; }
};

/// Values that differ by rank and element and are not exact in bf16 sums.
float inputValue(int32_t rank, int64_t i) {
  return 0.3f * float(rank + 1) + 0.01f * float(i * i) - 1.7f * float(i % 3);
}

Buffer inputFor(DType dtype, const std::vector<int64_t> &shape, int32_t rank) {
  Buffer buffer(dtype, shape);
  for (int64_t i = 0; i < buffer.elements(); ++i)
    buffer.set(i, inputValue(rank, i));
  return buffer;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

std::vector<int64_t> indexOf(int64_t flat, const std::vector<int64_t> &shape) {
  std::vector<int64_t> index(shape.size());
  std::vector<int64_t> strides = stridesOf(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    index[d] = flat / strides[d];
    flat %= strides[d];
  }
  return index;
}

int64_t flatOf(const std::vector<int64_t> &index,
               const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides = stridesOf(shape);
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat += index[d] * strides[d];
  return flat;
}

/// Reduces element `i` of the members' inputs in group order, in fp32.
float reduced(const std::vector<Buffer> &inputs, const Group &group, int64_t i,
              Reduction reduction) {
  float acc = inputs[size_t(group[0])].get(i);
  for (size_t m = 1; m < group.size(); ++m) {
    float value = inputs[size_t(group[m])].get(i);
    if (reduction == Reduction::Sum)
      acc += value;
    else if (reduction == Reduction::Max)
      acc = std::max(acc, value);
    else
      acc = std::min(acc, value);
  }
  return acc;
}

/// Checks `out` of every member bit for bit against `expected(rank)`.
void expectOutputs(const std::vector<Buffer> &outputs,
                   const std::function<Buffer(int32_t)> &expected,
                   const Group &group, const std::string &what) {
  for (int32_t rank : group) {
    Buffer want = expected(rank);
    EXPECT_EQ(outputs[size_t(rank)].bytes, want.bytes)
        << what << ", rank " << rank;
  }
}

class CollectiveTest
    : public ::testing::TestWithParam<std::tuple<int32_t, DType>> {
protected:
  int32_t ranks() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  Group everyone() const {
    Group group;
    for (int32_t r = 0; r < ranks(); ++r)
      group.push_back(r);
    return group;
  }
  std::vector<Buffer> inputs(const std::vector<int64_t> &shape) const {
    std::vector<Buffer> buffers;
    for (int32_t r = 0; r < ranks(); ++r)
      buffers.push_back(inputFor(dtype(), shape, r));
    return buffers;
  }
  std::vector<Buffer> outputs(const std::vector<int64_t> &shape) const {
    return std::vector<Buffer>(size_t(ranks()), Buffer(dtype(), shape));
  }
};

TEST_P(CollectiveTest, AllReduce) {
  for (Reduction reduction : {Reduction::Sum, Reduction::Max, Reduction::Min}) {
    HostWorld world(ranks(), kPatient);
    std::vector<int64_t> shape = {3, 5};
    std::vector<Buffer> in = inputs(shape), out = outputs(shape);
    Group group = everyone();
    expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
      return comm.allReduce(in[size_t(rank)].tensor(),
                            out[size_t(rank)].tensor(), group, reduction);
    }));
    expectOutputs(
        out,
        [&](int32_t) {
          Buffer want(dtype(), shape);
          for (int64_t i = 0; i < want.elements(); ++i)
            want.set(i, reduced(in, group, i, reduction));
          return want;
        },
        group, "all_reduce " + reductionName(reduction));
  }
}

TEST_P(CollectiveTest, AllReduceInPlace) {
  HostWorld world(ranks(), kPatient);
  std::vector<Buffer> in = inputs({7}), inout = inputs({7});
  Group group = everyone();
  expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
    Tensor tensor = inout[size_t(rank)].tensor();
    return comm.allReduce(tensor, tensor, group, Reduction::Sum);
  }));
  expectOutputs(
      inout,
      [&](int32_t) {
        Buffer want(dtype(), {7});
        for (int64_t i = 0; i < 7; ++i)
          want.set(i, reduced(in, group, i, Reduction::Sum));
        return want;
      },
      group, "in-place all_reduce");
}

TEST_P(CollectiveTest, AllGather) {
  for (int64_t dim : {0, 1}) {
    HostWorld world(ranks(), kPatient);
    std::vector<int64_t> shape = {2, 3};
    std::vector<int64_t> gathered = shape;
    gathered[size_t(dim)] *= ranks();
    std::vector<Buffer> in = inputs(shape), out = outputs(gathered);
    Group group = everyone();
    expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
      return comm.allGather(in[size_t(rank)].tensor(),
                            out[size_t(rank)].tensor(), group, dim);
    }));
    expectOutputs(
        out,
        [&](int32_t) {
          Buffer want(dtype(), gathered);
          for (int64_t i = 0; i < want.elements(); ++i) {
            std::vector<int64_t> index = indexOf(i, gathered);
            int64_t member = index[size_t(dim)] / shape[size_t(dim)];
            index[size_t(dim)] %= shape[size_t(dim)];
            want.set(i, in[size_t(member)].get(flatOf(index, shape)));
          }
          return want;
        },
        group, "all_gather dim " + std::to_string(dim));
  }
}

TEST_P(CollectiveTest, ReduceScatter) {
  for (int64_t dim : {0, 1}) {
    HostWorld world(ranks(), kPatient);
    std::vector<int64_t> shape = {2 * ranks(), 3 * ranks()};
    std::vector<int64_t> piece = shape;
    piece[size_t(dim)] /= ranks();
    std::vector<Buffer> in = inputs(shape), out = outputs(piece);
    Group group = everyone();
    expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
      return comm.reduceScatter(in[size_t(rank)].tensor(),
                                out[size_t(rank)].tensor(), group, dim,
                                Reduction::Sum);
    }));
    expectOutputs(
        out,
        [&](int32_t rank) {
          Buffer want(dtype(), piece);
          for (int64_t i = 0; i < want.elements(); ++i) {
            std::vector<int64_t> index = indexOf(i, piece);
            index[size_t(dim)] += rank * piece[size_t(dim)];
            want.set(i,
                     reduced(in, group, flatOf(index, shape), Reduction::Sum));
          }
          return want;
        },
        group, "reduce_scatter dim " + std::to_string(dim));
  }
}

TEST_P(CollectiveTest, AllToAll) {
  for (std::pair<int64_t, int64_t> dims :
       {std::pair<int64_t, int64_t>{0, 1}, {1, 0}, {1, 1}, {2, 0}}) {
    // Lambdas below capture these; C++17 lambdas cannot capture bindings.
    int64_t split = dims.first, concat = dims.second;
    HostWorld world(ranks(), kPatient);
    std::vector<int64_t> shape = {ranks(), 2 * ranks(), ranks() + 1};
    if (shape[size_t(split)] % ranks() != 0)
      continue;
    std::vector<int64_t> piece = shape;
    piece[size_t(split)] /= ranks();
    std::vector<int64_t> result = piece;
    result[size_t(concat)] *= ranks();
    std::vector<Buffer> in = inputs(shape), out = outputs(result);
    Group group = everyone();
    expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
      return comm.allToAll(in[size_t(rank)].tensor(),
                           out[size_t(rank)].tensor(), group, split, concat);
    }));
    expectOutputs(
        out,
        [&](int32_t rank) {
          Buffer want(dtype(), result);
          for (int64_t i = 0; i < want.elements(); ++i) {
            // Piece `member` of the result is this rank's piece of member's
            // input.
            std::vector<int64_t> index = indexOf(i, result);
            int64_t member = index[size_t(concat)] / piece[size_t(concat)];
            index[size_t(concat)] %= piece[size_t(concat)];
            index[size_t(split)] += rank * piece[size_t(split)];
            want.set(i, in[size_t(member)].get(flatOf(index, shape)));
          }
          return want;
        },
        group,
        "all_to_all " + std::to_string(split) + "->" + std::to_string(concat));
  }
}

TEST_P(CollectiveTest, CollectivePermute) {
  for (int64_t shift : {1, -1, 2}) {
    HostWorld world(ranks(), kPatient);
    std::vector<Buffer> in = inputs({4}), out = outputs({4});
    Group group = everyone();
    expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
      return comm.collectivePermute(in[size_t(rank)].tensor(),
                                    out[size_t(rank)].tensor(), group, shift);
    }));
    expectOutputs(
        out,
        [&](int32_t rank) {
          int32_t source =
              int32_t(((rank - shift) % ranks() + ranks()) % ranks());
          return in[size_t(source)];
        },
        group, "collective_permute shift " + std::to_string(shift));
  }
}

TEST_P(CollectiveTest, Barrier) {
  HostWorld world(ranks(), kPatient);
  Group group = everyone();
  expectAllOk(runRanks(world, [&](int32_t, Communicator &comm) {
    for (int i = 0; i < 3; ++i)
      PARTITA_RETURN_IF_ERROR(comm.barrier(group));
    return Status::ok();
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectiveTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(program::F32,
                                                              program::BF16)),
                         [](const auto &info) {
                           return std::to_string(std::get<0>(info.param)) +
                                  "ranks_" + dtypeName(std::get<1>(info.param));
                         });

TEST(HostCommunicator, IntegerReductions) {
  HostWorld world(3, kPatient);
  std::vector<std::vector<int64_t>> in = {{1, -5}, {10, 7}, {100, 2}};
  std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(2));
  std::vector<std::vector<int32_t>> in32 = {{1, -5}, {10, 7}, {100, 2}};
  std::vector<std::vector<int64_t>> sums(3, std::vector<int64_t>(2));
  expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
    size_t r = size_t(rank);
    PARTITA_RETURN_IF_ERROR(comm.allReduce({in[r].data(), program::I64, {2}},
                                           {sums[r].data(), program::I64, {2}},
                                           {0, 1, 2}, Reduction::Sum));
    return comm.allReduce({in32[r].data(), program::I32, {2}},
                          {out[r].data(), program::I32, {2}}, {0, 1, 2},
                          Reduction::Max);
  }));
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[r], (std::vector<int64_t>{111, 4}));
    EXPECT_EQ(out[r], (std::vector<int32_t>{100, 7}));
  }
}

/// Two disjoint groups reduce at the same time; a group listed out of rank
/// order gathers in group order.
TEST(HostCommunicator, Subgroups) {
  HostWorld world(4, kPatient);
  std::vector<float> in = {1, 2, 3, 4};
  std::vector<float> sums(4), gathered(8, -1);
  expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
    size_t r = size_t(rank);
    Group pair = rank < 2 ? Group{0, 1} : Group{2, 3};
    PARTITA_RETURN_IF_ERROR(comm.allReduce({&in[r], program::F32, {1}},
                                           {&sums[r], program::F32, {1}}, pair,
                                           Reduction::Sum));
    if (rank == 3 || rank == 1)
      return comm.allGather({&in[r], program::F32, {1}},
                            {&gathered[2 * r], program::F32, {2}}, {3, 1}, 0);
    return Status::ok();
  }));
  // Exact: integer sums.
  EXPECT_EQ(sums, (std::vector<float>{3, 3, 7, 7}));
  EXPECT_EQ(gathered, (std::vector<float>{-1, -1, 4, 2, -1, -1, 4, 2}));
}

TEST(HostCommunicator, SendRecv) {
  HostWorld world(2, kPatient);
  std::vector<float> first = {1, 2, 3}, second = {4, 5, 6}, third = {7, 8, 9};
  std::vector<float> a(3), b(3), c(3);
  expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
    if (rank == 0) {
      PARTITA_RETURN_IF_ERROR(
          comm.send({first.data(), program::F32, {3}}, 1, 7));
      PARTITA_RETURN_IF_ERROR(
          comm.send({second.data(), program::F32, {3}}, 1, 8));
      return comm.send({third.data(), program::F32, {3}}, 1, 7);
    }
    // Tags select the message; one tag keeps send order.
    PARTITA_RETURN_IF_ERROR(comm.recv({b.data(), program::F32, {3}}, 0, 8));
    PARTITA_RETURN_IF_ERROR(comm.recv({a.data(), program::F32, {3}}, 0, 7));
    return comm.recv({c.data(), program::F32, {3}}, 0, 7);
  }));
  EXPECT_EQ(a, first);
  EXPECT_EQ(b, second);
  EXPECT_EQ(c, third);
}

// Three ranks route rows of two floats unevenly (rank 2 sends nothing to
// rank 1, a row with destination -1 or 3 goes nowhere); each row's value
// names its sender and row. The return doubles what each rank received and
// sends it back, so every row sent comes back doubled to where it was.
TEST(HostCommunicator, DispatchAndReturn) {
  HostWorld world(3, kPatient);
  Group group{0, 1, 2};
  std::vector<std::vector<int64_t>> destinations = {
      {2, 0, 2, -1}, {1, 1, 0, 2}, {0, 2, 3, 2}};
  std::vector<std::vector<float>> received(3, std::vector<float>(12 * 2, -1));
  std::vector<std::vector<int64_t>> counts(3, std::vector<int64_t>(3, -1));
  std::vector<std::vector<float>> back(3, std::vector<float>(4 * 2, -1));
  expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
    size_t r = size_t(rank);
    std::vector<float> rows(8);
    for (size_t i = 0; i < 8; ++i)
      rows[i] = float(10 * (rank + 1) + int(i / 2)) + (i % 2 ? 0.5f : 0.0f);
    PARTITA_RETURN_IF_ERROR(
        comm.dispatch({rows.data(), program::F32, {4, 2}},
                      {destinations[r].data(), program::I64, {4}},
                      {received[r].data(), program::F32, {12, 2}},
                      {counts[r].data(), program::I64, {3}}, group));
    std::vector<float> doubled(received[r]);
    for (float &v : doubled)
      v *= 2;
    return comm.dispatchReturn({doubled.data(), program::F32, {12, 2}},
                               {counts[r].data(), program::I64, {3}},
                               {destinations[r].data(), program::I64, {4}},
                               {back[r].data(), program::F32, {4, 2}}, group);
  }));
  // Rank 0 gets rank 0's row 1, rank 1's row 2, rank 2's row 0.
  EXPECT_EQ(counts[0], (std::vector<int64_t>{1, 1, 1}));
  std::vector<float> expected0(24, 0.0f);
  std::vector<float> rows0 = {11, 11.5, 22, 22.5, 30, 30.5};
  std::copy(rows0.begin(), rows0.end(), expected0.begin());
  EXPECT_EQ(received[0], expected0);
  // Rank 1 gets its own rows 0 and 1, none from ranks 0 and 2.
  EXPECT_EQ(counts[1], (std::vector<int64_t>{0, 2, 0}));
  // Rank 2 gets rank 0's rows 0 and 2, rank 1's row 3, rank 2's 1 and 3.
  EXPECT_EQ(counts[2], (std::vector<int64_t>{2, 1, 2}));
  std::vector<float> rows2 = {10, 10.5, 12, 12.5, 23, 23.5, 31, 31.5, 33, 33.5};
  EXPECT_EQ(std::vector<float>(received[2].begin(), received[2].begin() + 10),
            rows2);
  EXPECT_EQ(received[2][10], 0.0f);
  // Each row back where it left, doubled; rows sent nowhere are zero.
  EXPECT_EQ(back[0], (std::vector<float>{20, 21, 22, 23, 24, 25, 0, 0}));
  EXPECT_EQ(back[1], (std::vector<float>{40, 41, 42, 43, 44, 45, 46, 47}));
  EXPECT_EQ(back[2], (std::vector<float>{60, 61, 62, 63, 0, 0, 66, 67}));
}

// More rows arrive than the result holds: the receiver fails with the
// numbers, and its peers fail instead of waiting for it.
TEST(HostCommunicator, DispatchBeyondItsBoundFails) {
  HostWorld world(2, kPatient);
  std::vector<Status> statuses =
      runRanks(world, [&](int32_t rank, Communicator &comm) {
        std::vector<float> rows(3, 1.0f), out(2);
        std::vector<int64_t> destinations(3, 0), counts(2);
        PARTITA_RETURN_IF_ERROR(
            comm.dispatch({rows.data(), program::F32, {3, 1}},
                          {destinations.data(), program::I64, {3}},
                          {out.data(), program::F32, {2, 1}},
                          {counts.data(), program::I64, {2}}, {0, 1}));
        return comm.barrier({0, 1});
      });
  EXPECT_ERROR_CONTAINS(statuses[0], "dispatch over group [0, 1] on rank 0: "
                                     "6 rows arrive, more than the 2 its "
                                     "result holds");
  EXPECT_FALSE(statuses[1].isOk());
}

TEST(HostCommunicator, DispatchChecksItsBuffers) {
  HostWorld world(1, kPatient);
  std::vector<float> rows(4), out(4);
  std::vector<int64_t> destinations(3), counts(1);
  Communicator &comm = world.communicator(0);
  EXPECT_ERROR_CONTAINS(
      comm.dispatch({rows.data(), program::F32, {4, 1}},
                    {destinations.data(), program::I64, {3}},
                    {out.data(), program::F32, {4, 1}},
                    {counts.data(), program::I64, {1}}, {0}),
      "dispatch over group [0] on rank 0: the destinations should be i64 "
      "[4], one per row, they are i64 [3]");
  std::vector<int64_t> four(4);
  EXPECT_ERROR_CONTAINS(comm.dispatch({rows.data(), program::F32, {4, 1}},
                                      {four.data(), program::I64, {4}},
                                      {out.data(), program::F32, {2, 2}},
                                      {counts.data(), program::I64, {1}}, {0}),
                        "the result should be [2, 1], it is [2, 2]");
  // The counts inside the result: the rows would overwrite them.
  std::vector<int64_t> shared(4);
  EXPECT_ERROR_CONTAINS(
      comm.dispatch({rows.data(), program::F32, {4, 1}},
                    {four.data(), program::I64, {4}},
                    {shared.data(), program::F32, {4, 1}},
                    {shared.data() + 1, program::I64, {1}}, {0}),
      "its rows, result, destinations and counts must not share memory");
}

TEST(HostCommunicator, RecvOfAnotherShapeFails) {
  HostWorld world(2, kPatient);
  std::vector<float> data(4);
  std::vector<Status> statuses =
      runRanks(world, [&](int32_t rank, Communicator &comm) {
        if (rank == 0)
          return comm.send({data.data(), program::F32, {4}}, 1, 0);
        return comm.recv({data.data(), program::F32, {2, 2}}, 0, 0);
      });
  EXPECT_ERROR_CONTAINS(statuses[1],
                        "recv on rank 1 from rank 0 (tag 0): expected f32 "
                        "[2, 2], rank 0 sent f32 [4]");
}

TEST(HostCommunicator, MismatchedCallsFail) {
  HostWorld world(2, kPatient);
  std::vector<float> in(4), out(8);
  std::vector<Status> statuses =
      runRanks(world, [&](int32_t rank, Communicator &comm) {
        if (rank == 0)
          return comm.allReduce({in.data(), program::F32, {4}},
                                {out.data(), program::F32, {4}}, {0, 1},
                                Reduction::Sum);
        return comm.allGather({in.data(), program::F32, {4}},
                              {out.data(), program::F32, {8}}, {0, 1}, 0);
      });
  for (const Status &status : statuses)
    EXPECT_ERROR_CONTAINS(status,
                          "mismatched collectives over group [0, 1] (call 0): "
                          "rank 0 called all_reduce(sum) f32 [4] -> [4], rank "
                          "1 called all_gather(dim 0) f32 [4] -> [8]");

  HostWorld shapes(2, kPatient);
  statuses = runRanks(shapes, [&](int32_t rank, Communicator &comm) {
    int64_t n = rank == 0 ? 4 : 2;
    return comm.allReduce({in.data(), program::F32, {n}},
                          {out.data(), program::F32, {n}}, {0, 1},
                          Reduction::Sum);
  });
  for (const Status &status : statuses)
    EXPECT_ERROR_CONTAINS(status, "mismatched collectives");
}

TEST(HostCommunicator, LocalErrorsNeedNoPeers) {
  HostWorld world(2, kPatient);
  Communicator &comm = world.communicator(0);
  std::vector<float> in(4), out(4);
  EXPECT_ERROR_CONTAINS(comm.allGather({in.data(), program::F32, {4}},
                                       {out.data(), program::F32, {4}}, {0, 1},
                                       0),
                        "the result should be [8], it is [4]");
  EXPECT_ERROR_CONTAINS(comm.allReduce({in.data(), program::F32, {4}},
                                       {out.data(), program::F32, {4}}, {1},
                                       Reduction::Sum),
                        "this rank is not a member");
  EXPECT_ERROR_CONTAINS(comm.reduceScatter({in.data(), program::F32, {4}},
                                           {out.data(), program::F32, {1}},
                                           {0, 1}, 0, Reduction::Sum),
                        "the result should be [2], it is [1]");
  EXPECT_ERROR_CONTAINS(comm.barrier({0, 0}), "distinct ranks");
  EXPECT_ERROR_CONTAINS(comm.send({in.data(), program::F32, {4}}, 2, 0),
                        "no such rank");
}

/// A rank that never arrives: the others fail after about the timeout, with
/// a message naming it and the collective.
TEST(HostCommunicator, Deadline) {
  HostWorld world(3, 200ms);
  std::vector<float> in(4), out(4);
  auto start = std::chrono::steady_clock::now();
  std::vector<Status> statuses =
      runRanks(world, [&](int32_t rank, Communicator &comm) {
        if (rank == 2)
          return Status::ok();
        return comm.allReduce({in.data(), program::F32, {4}},
                              {out.data(), program::F32, {4}}, {0, 1, 2},
                              Reduction::Sum);
      });
  auto elapsed = std::chrono::steady_clock::now() - start;
  for (int rank : {0, 1})
    EXPECT_ERROR_CONTAINS(statuses[size_t(rank)],
                          "all_reduce(sum) f32 [4] -> [4] over group [0, 1, "
                          "2]: rank 2 did not arrive within 200 ms");
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 10s);
  // The world has failed: later calls fail at once.
  EXPECT_ERROR_CONTAINS(world.communicator(2).barrier({2}),
                        "rank 2 did not arrive");

  HostWorld p2p(2, 200ms);
  std::vector<Status> received =
      runRanks(p2p, [&](int32_t rank, Communicator &comm) {
        if (rank == 0)
          return Status::ok();
        return comm.recv({in.data(), program::F32, {4}}, 0, 3);
      });
  EXPECT_ERROR_CONTAINS(received[1], "recv on rank 1 from rank 0 (tag 3): "
                                     "rank 0 did not send within 200 ms");
}

/// Runs that match end cleanly, run after run.
TEST(HostCommunicator, MatchedRunsEnd) {
  HostWorld world(2, kPatient);
  std::vector<float> data(4);
  for (int run = 0; run < 3; ++run)
    expectAllOk(runRanks(world, [&](int32_t rank, Communicator &comm) {
      Tensor tensor{data.data(), program::F32, {4}};
      PARTITA_RETURN_IF_ERROR(rank == 0 ? comm.send(tensor, 1, run)
                                        : comm.recv(tensor, 0, run));
      return comm.endRun();
    }));
}

/// A message that no receive takes: the last rank to end the run fails,
/// naming the sender, the receiver and the tag, and the world with it.
TEST(HostCommunicator, UnreceivedSendFailsTheEndOfTheRun) {
  HostWorld world(2, kPatient);
  std::vector<float> data(4);
  std::vector<Status> statuses =
      runRanks(world, [&](int32_t rank, Communicator &comm) {
        if (rank == 0)
          PARTITA_RETURN_IF_ERROR(
              comm.send({data.data(), program::F32, {4}}, 1, 5));
        return comm.endRun();
      });
  int failed = 0;
  for (const Status &status : statuses) {
    if (status.isOk())
      continue;
    ++failed;
    EXPECT_ERROR_CONTAINS(status, "the run ended with 1 unmatched send: rank "
                                  "0 sent f32 [4] to rank 1 with tag 5, "
                                  "which rank 1 never received");
  }
  EXPECT_EQ(failed, 1);
  EXPECT_ERROR_CONTAINS(world.communicator(0).barrier({0}), "unmatched send");
}

/// A receive from a rank that has ended its run, or a collective one of
/// whose members has, fails at once instead of at the deadline.
TEST(HostCommunicator, WaitingForARankThatEndedFailsAtOnce) {
  auto start = std::chrono::steady_clock::now();
  HostWorld p2p(2, kPatient);
  std::vector<float> in(4), out(4);
  std::vector<Status> received =
      runRanks(p2p, [&](int32_t rank, Communicator &comm) {
        if (rank == 0)
          return comm.endRun();
        return comm.recv({in.data(), program::F32, {4}}, 0, 3);
      });
  EXPECT_ERROR_CONTAINS(received[1], "recv on rank 1 from rank 0 (tag 3): "
                                     "rank 0 ended its run without sending "
                                     "it");

  HostWorld group(3, kPatient);
  std::vector<Status> reduced =
      runRanks(group, [&](int32_t rank, Communicator &comm) {
        if (rank == 2)
          return comm.endRun();
        return comm.allReduce({in.data(), program::F32, {4}},
                              {out.data(), program::F32, {4}}, {0, 1, 2},
                              Reduction::Sum);
      });
  for (int rank : {0, 1})
    EXPECT_ERROR_CONTAINS(reduced[size_t(rank)],
                          "all_reduce(sum) f32 [4] -> [4] over group [0, 1, "
                          "2]: rank 2 ended its run without taking part (call "
                          "0 of the group)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(HostCommunicator, AbortReleasesWaitingRanks) {
  HostWorld world(2, kPatient);
  auto start = std::chrono::steady_clock::now();
  std::vector<Status> statuses =
      runRanks(world, [&](int32_t rank, Communicator &comm) {
        if (rank == 1) {
          std::this_thread::sleep_for(50ms);
          comm.abort("rank 1: kernel failed");
          return Status::ok();
        }
        return comm.barrier({0, 1});
      });
  EXPECT_ERROR_CONTAINS(statuses[0], "rank 1: kernel failed");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

} // namespace
