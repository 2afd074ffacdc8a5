//===- PipelineSimulator.h - pipeline schedule simulation -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Generates the per-rank orders of the classic pipeline schedules and runs
// any per-rank order on a cost model: when each item starts and ends, the
// bubble, the activations each rank holds, and a Chrome trace of it all. Plain
// C++17 with no MLIR inside, so the compiler, the report and the benchmarks
// can share it, and a schedule the compiler writes into IR can be checked for
// deadlock with simulateOrders().
//
// The model: P stages (one per pipeline rank), M microbatches, V chunks per
// rank. Chunk k of the model (0 <= k < P*V, in model order) lives on rank
// k % P, so V > 1 interleaves the model over the ranks. Work items, for
// microbatch m and chunk k:
//   F(m, k)  forward; after F(m, k-1),
//   B(m, k)  backward (activation gradient); after F(m, k) and B(m, k+1),
//   W(m, k)  weight gradient; after B(m, k).
// A dependency on another rank adds the transfer latency of the hop between
// the two chunks. Each rank runs its items one at a time, in its order; an
// item starts when the rank is free and its dependencies are done.
//
// Only the zero-bubble schedules have W items; elsewhere the backward item
// computes both gradients and costs backward + weightGrad, so one Costs
// describes the model whatever the schedule.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PIPELINESIMULATOR_PIPELINESIMULATOR_H
#define PARTITA_PIPELINESIMULATOR_PIPELINESIMULATOR_H

#include <string>
#include <string_view>
#include <vector>

namespace partita::pipesim {

enum class ScheduleKind {
  /// Inference: every F in microbatch order. Training: every F, then every
  /// B in reverse microbatch order (Huang et al. 2019). V = 1.
  GPipe,
  /// Inference with V chunks per rank (Megatron-LM's forward order):
  /// microbatches in groups of P, each group chunk by chunk. M % P == 0.
  Interleaved,
  /// Training, V = 1: P - s - 1 forwards on stage s, then one forward and one
  /// backward in turn, then the remaining backwards (Narayanan et al. 2019).
  OneFOneB,
  /// Training, V >= 2: Megatron-LM's interleaved 1F1B (Narayanan et al.
  /// 2021). M % P == 0.
  Interleaved1F1B,
  /// Training, V = 1, split backward: 1F1B's memory with W delayed to fill
  /// the cool-down (Qi et al. 2023, "Zero Bubble Pipeline Parallelism").
  ZeroBubbleH1,
  /// Training, V = 1, split backward: 2(P - s) - 1 warm-up forwards on stage
  /// s and W lagging 2s behind B: no bubble when f = b = w, at up to 2P - 1
  /// microbatches in flight (Qi et al. 2023).
  ZeroBubbleH2,
};

/// `gpipe`, `interleaved`, `1f1b`, `interleaved-1f1b`, `zb-h1`, `zb-h2`.
std::string_view scheduleKindName(ScheduleKind kind);
/// The inverse of scheduleKindName; false for an unknown name.
bool parseScheduleKind(std::string_view name, ScheduleKind &kind);

/// What one chunk costs, in one time unit throughout (toChromeTrace scales it
/// to microseconds). Every cost is finite and >= 0.
struct Costs {
  double forward = 1;
  /// The activation gradient (B).
  double backward = 1;
  /// The weight gradient (W); schedules without W add it to B.
  double weightGrad = 0;
  /// Latency of the hop between this chunk and the next, either direction;
  /// zero cost when both chunks live on one rank.
  double transfer = 0;
};

struct Options {
  ScheduleKind kind = ScheduleKind::GPipe;
  int stages = 1;
  int microbatches = 1;
  int virtualStages = 1;
  /// False: forward only. GPipe runs both ways; the other kinds are one or
  /// the other and reject the wrong one.
  bool training = false;
  /// The cost of every chunk, unless chunkCosts is given.
  Costs costs;
  /// Empty, or one Costs per chunk (stages * virtualStages, model order).
  std::vector<Costs> chunkCosts;
};

enum class WorkKind : char { Forward = 'F', Backward = 'B', WeightGrad = 'W' };

struct WorkItem {
  WorkKind kind = WorkKind::Forward;
  int microbatch = 0;
  int chunk = 0;
};

/// One rank's items, in the order it runs them; one per rank.
using Orders = std::vector<std::vector<WorkItem>>;

/// A work item as it ran.
struct Event {
  WorkKind kind = WorkKind::Forward;
  int microbatch = 0;
  int chunk = 0;
  int rank = 0;
  double start = 0;
  double end = 0;
};

struct Simulation {
  /// Per rank, its events in the order it ran them.
  std::vector<std::vector<Event>> ranks;
  /// When the last item ends; the first starts at 0.
  double makespan = 0;
  /// 1 - (busy time summed over ranks) / (P * makespan).
  double bubbleFraction = 0;
  /// Per rank, idle time between its first start and its last end. This is
  /// the bubble the zero-bubble paper counts: with no synchronization at the
  /// optimizer step, one iteration's ramp-down overlaps the next ramp-up.
  std::vector<double> spanIdle;
  /// Per rank, the most (microbatch, chunk) activations alive at once (for
  /// V > 1 each is one chunk's worth, 1/V of a rank's share of the model).
  /// Training: alive from the start of F until the end of the last backward
  /// item of that (microbatch, chunk), W where there is one, else B.
  /// Forward only: alive from the start of F until the next chunk's F starts
  /// (the activation was handed on), or until F ends for the last chunk.
  /// At equal times, releases come before acquisitions.
  std::vector<int> peakAlive;
};

/// The per-rank orders of `options.kind`; false with a message in `error`
/// when the options are invalid for that kind.
bool buildOrders(const Options &options, Orders &orders, std::string &error);

/// buildOrders, then simulateOrders.
bool simulate(const Options &options, Simulation &out, std::string &error);

/// Runs explicit per-rank orders: the check of a schedule written elsewhere.
/// Every F must appear exactly once on the rank of its chunk; B appears for
/// every (microbatch, chunk) or for none (forward only), and so does W,
/// which needs B. Any W makes the backward split (B costs `backward`, W
/// `weightGrad`); without W, B costs both. `chunkCosts` holds one Costs for
/// every chunk or a single one for all. Fails on an invalid order, and on a
/// deadlock, naming each stuck rank, the item it waits at and what that item
/// waits for.
bool simulateOrders(int stages, int microbatches, int virtualStages,
                    const Orders &orders, const std::vector<Costs> &chunkCosts,
                    Simulation &out, std::string &error);

/// `F mb3 c1`: the item's name in messages and traces.
std::string workItemName(const WorkItem &item);

/// Chrome trace-event JSON (Perfetto and chrome://tracing open it): a
/// complete ("X") event per item, named as workItemName, with pid = rank,
/// tid = 0 (the compute stream), and a "rank N" process name per rank. One
/// time unit becomes `microsecondsPerUnit` microseconds.
std::string toChromeTrace(const Simulation &simulation,
                          double microsecondsPerUnit = 1);

/// Closed forms, checked against the simulation by the unit tests.
///
/// GPipe, 1F1B: (P - 1) / (M + P - 1) with uniform costs; it holds for every
/// M, for forward-only GPipe, and for training whatever f, b and w.
double gpipeBubble(int stages, int microbatches);
/// Interleaved forward and interleaved 1F1B with uniform chunk costs:
/// (P - 1) / (V M + P - 1): the bubble lasts P - 1 chunk steps, not stage
/// steps.
double interleavedBubble(int stages, int microbatches, int virtualStages);
/// ZB-H1's bubble time, makespan - M (f + b + w): (P - 1)(f + b - w). Holds
/// for M >= P and w <= b.
double zeroBubbleH1BubbleTime(int stages, const Costs &costs);
/// ZB-H2's bubble time, the largest spanIdle: max(0, (P - 1)(f + b - 2w)).
/// Holds for M >= 2P - 1.
double zeroBubbleH2BubbleTime(int stages, const Costs &costs);

} // namespace partita::pipesim

#endif // PARTITA_PIPELINESIMULATOR_PIPELINESIMULATOR_H
