//===- IndexRuns.h - index maps of one dimension, as runs -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A view of a tensor maps each of its dimensions onto the source's: index i
// of the view is the i-th index a list of runs names. Slices, blocks and
// block permutations (the fused-QKV reordering) are a few runs each, and
// composing them is mapping runs through runs. A zero run names no source
// index: its indices read zeros (a vocabulary padded to a multiple of tp).
// The compiler's #nn.view and the artifact writer's WeightView share these
// functions.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_INDEXRUNS_H
#define PARTITA_RUNTIME_INDEXRUNS_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace partita::runtime {

/// The start of a zero run.
constexpr int64_t kZeroRunStart = -1;

/// Indices `start`, `start + 1`, ..., `start + length - 1` of a dimension
/// of the source; or, when `start` is kZeroRunStart, `length` indices that
/// read zeros.
struct IndexRun {
  int64_t start = 0;
  int64_t length = 0;
  bool isZero() const { return start == kZeroRunStart; }
  bool operator==(const IndexRun &other) const {
    return start == other.start && length == other.length;
  }
};

using IndexRuns = std::vector<IndexRun>;

/// How many indices `runs` lists.
inline int64_t runsLength(const IndexRuns &runs) {
  int64_t total = 0;
  for (const IndexRun &run : runs)
    total += run.length;
  return total;
}

/// Appends a run, merging it into the last one when they are contiguous
/// (or both zero runs).
inline void appendRun(IndexRuns &runs, IndexRun run) {
  if (run.length == 0)
    return;
  if (!runs.empty() && runs.back().isZero() == run.isZero() &&
      (run.isZero() || runs.back().start + runs.back().length == run.start)) {
    runs.back().length += run.length;
    return;
  }
  runs.push_back(run);
}

/// All of a dimension of `size`: one run (none when empty).
inline IndexRuns wholeRuns(int64_t size) {
  IndexRuns runs;
  appendRun(runs, {0, size});
  return runs;
}

/// True when `runs` lists 0..size-1 in order.
inline bool isWholeRuns(const IndexRuns &runs, int64_t size) {
  return size == 0
             ? runs.empty()
             : runs.size() == 1 && runs[0].start == 0 && runs[0].length == size;
}

/// The runs listing `indices` in order.
inline IndexRuns runsOf(const std::vector<int64_t> &indices) {
  IndexRuns runs;
  for (int64_t index : indices)
    appendRun(runs, {index, 1});
  return runs;
}

/// The indices `runs` lists, one entry each (kZeroRunStart for each index
/// of a zero run).
inline std::vector<int64_t> indicesOf(const IndexRuns &runs) {
  std::vector<int64_t> indices;
  for (const IndexRun &run : runs)
    for (int64_t i = 0; i < run.length; ++i)
      indices.push_back(run.isZero() ? kZeroRunStart : run.start + i);
  return indices;
}

/// `select` maps a new dimension onto positions of `current`, which maps
/// them onto the source: the composition, onto the source. Every index
/// `select` names must be below runsLength(current); a zero run of either
/// reads zeros in the composition. The run holding each
/// position is found by binary search, so a block permutation costs one
/// lookup per block.
inline IndexRuns composeRuns(const IndexRuns &current,
                             const IndexRuns &select) {
  // Where each run of `current` starts among its positions.
  std::vector<int64_t> firstPosition;
  firstPosition.reserve(current.size());
  int64_t position = 0;
  for (const IndexRun &run : current) {
    firstPosition.push_back(position);
    position += run.length;
  }
  IndexRuns result;
  for (const IndexRun &want : select) {
    if (want.length == 0)
      continue;
    if (want.isZero()) {
      appendRun(result, want);
      continue;
    }
    size_t r = size_t(std::upper_bound(firstPosition.begin(),
                                       firstPosition.end(), want.start) -
                      firstPosition.begin()) -
               1;
    int64_t within = want.start - firstPosition[r];
    for (int64_t left = want.length; left > 0; ++r, within = 0) {
      int64_t take = std::min(current[r].length - within, left);
      appendRun(result, {current[r].isZero() ? kZeroRunStart
                                             : current[r].start + within,
                         take});
      left -= take;
    }
  }
  return result;
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_INDEXRUNS_H
