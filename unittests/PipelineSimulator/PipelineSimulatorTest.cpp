//===- PipelineSimulatorTest.cpp - schedules against closed forms ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Simulates every schedule over a grid of stages, microbatches and chunks and
// checks makespan, bubble and live activations against the published
// formulas; then deadlock reports, order validation, the Chrome trace and
// option errors.
//
//===----------------------------------------------------------------------===//

#include "partita/PipelineSimulator/PipelineSimulator.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

using namespace partita::pipesim;

namespace {

constexpr double kTolerance = 1e-9;

Simulation run(const Options &options) {
  Simulation simulation;
  std::string error;
  EXPECT_TRUE(simulate(options, simulation, error)) << error;
  return simulation;
}

Options makeOptions(ScheduleKind kind, int stages, int microbatches,
                    bool training, Costs costs, int virtualStages = 1) {
  Options options;
  options.kind = kind;
  options.stages = stages;
  options.microbatches = microbatches;
  options.virtualStages = virtualStages;
  options.training = training;
  options.costs = costs;
  return options;
}

std::string errorOf(const Options &options) {
  Simulation simulation;
  std::string error;
  EXPECT_FALSE(simulate(options, simulation, error));
  return error;
}

double maxOf(const std::vector<double> &values) {
  return *std::max_element(values.begin(), values.end());
}

TEST(ScheduleKindTest, NamesRoundTrip) {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::Interleaved, ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved1F1B, ScheduleKind::ZeroBubbleH1,
        ScheduleKind::ZeroBubbleH2}) {
    ScheduleKind parsed = ScheduleKind::GPipe;
    EXPECT_TRUE(parseScheduleKind(scheduleKindName(kind), parsed));
    EXPECT_EQ(parsed, kind);
  }
  ScheduleKind parsed = ScheduleKind::GPipe;
  EXPECT_TRUE(parseScheduleKind("interleaved-1f1b", parsed));
  EXPECT_EQ(parsed, ScheduleKind::Interleaved1F1B);
  EXPECT_FALSE(parseScheduleKind("zb-v", parsed));
  EXPECT_EQ(workItemName({WorkKind::Forward, 3, 1}), "F mb3 c1");
}

// GPipe inference: (P - 1) / (M + P - 1) and a makespan of (M + P - 1) f;
// each activation is handed on as soon as it is made.
TEST(PipelineSimulatorTest, GPipeForward) {
  const double f = 0.75;
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 16}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " M=" + std::to_string(m));
      Simulation sim = run(makeOptions(ScheduleKind::GPipe, p, m,
                                       /*training=*/false, {f, 1, 0, 0}));
      EXPECT_NEAR(sim.bubbleFraction, gpipeBubble(p, m), kTolerance);
      EXPECT_NEAR(sim.makespan, (m + p - 1) * f, kTolerance);
      for (int rank = 0; rank < p; ++rank) {
        EXPECT_EQ(sim.ranks[rank].size(), static_cast<size_t>(m));
        EXPECT_EQ(sim.peakAlive[rank], 1);
      }
    }
  }
}

TEST(PipelineSimulatorTest, TransferLatencyDelaysEveryHop) {
  const double f = 1, c = 0.25;
  Simulation sim = run(
      makeOptions(ScheduleKind::GPipe, 4, 8, /*training=*/false, {f, 1, 0, c}));
  EXPECT_NEAR(sim.makespan, (8 + 4 - 1) * f + (4 - 1) * c, kTolerance);
  EXPECT_NEAR(sim.ranks[3][0].start, 3 * (f + c), kTolerance);
}

// A slow second stage makes the first hold activations it cannot hand on:
// rank 0 makes F(m) in [m, m+1), rank 1 takes it at 1 + 2m, so mb2 and mb3
// are both waiting in [3, 5).
TEST(PipelineSimulatorTest, ForwardAliveCountsUntilHandedOn) {
  Options options =
      makeOptions(ScheduleKind::GPipe, 2, 4, /*training=*/false, {1, 1, 0, 0});
  options.chunkCosts = {{1, 1, 0, 0}, {2, 1, 0, 0}};
  Simulation sim = run(options);
  EXPECT_EQ(sim.peakAlive[0], 2);
  EXPECT_EQ(sim.peakAlive[1], 1);
  EXPECT_NEAR(sim.makespan, 9, kTolerance);
}

// Interleaved inference with chunks of cost f/V: (P - 1) / (V M + P - 1).
TEST(PipelineSimulatorTest, InterleavedForward) {
  const double f = 1;
  for (int p : {2, 4}) {
    for (int v : {2, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " V=" + std::to_string(v) +
                     " M=" + std::to_string(m));
        Simulation sim =
            run(makeOptions(ScheduleKind::Interleaved, p, m,
                            /*training=*/false, {f / v, 1, 0, 0}, v));
        EXPECT_NEAR(sim.bubbleFraction, interleavedBubble(p, m, v), kTolerance);
        EXPECT_NEAR(sim.makespan, (v * m + p - 1) * f / v, kTolerance);
        for (int rank = 0; rank < p; ++rank)
          EXPECT_EQ(sim.peakAlive[rank], 1);
      }
    }
  }
}

// 1F1B: GPipe's bubble, whatever f, b and w, for every M; stage s holds
// min(P - s, M) microbatches where GPipe holds M.
TEST(PipelineSimulatorTest, OneFOneBAndGPipeTraining) {
  for (Costs costs : {Costs{1, 1, 0, 0}, Costs{1, 2, 0.5, 0}}) {
    for (int p : {2, 4, 8}) {
      for (int m : {1, 4, 8, 16}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " M=" + std::to_string(m) +
                     " b=" + std::to_string(costs.backward));
        Simulation sim = run(makeOptions(ScheduleKind::OneFOneB, p, m,
                                         /*training=*/true, costs));
        double step = costs.forward + costs.backward + costs.weightGrad;
        EXPECT_NEAR(sim.bubbleFraction, gpipeBubble(p, m), kTolerance);
        EXPECT_NEAR(sim.makespan, (m + p - 1) * step, kTolerance);
        for (int s = 0; s < p; ++s)
          EXPECT_EQ(sim.peakAlive[s], std::min(p - s, m));

        Simulation gpipe = run(makeOptions(ScheduleKind::GPipe, p, m,
                                           /*training=*/true, costs));
        EXPECT_NEAR(gpipe.bubbleFraction, gpipeBubble(p, m), kTolerance);
        for (int s = 0; s < p; ++s)
          EXPECT_EQ(gpipe.peakAlive[s], m);
      }
    }
  }
}

// Megatron's interleaved 1F1B with chunks of cost f/V and b/V: the bubble
// time is (P - 1)(f + b)/V, Narayanan et al.'s (1/V)(P - 1)/M relative to the
// ideal M (f + b); as a fraction of the makespan, (P - 1) / (V M + P - 1).
// Exact for every M that is a multiple of P, M == P (all warm-up) included.
// Rank r warms up with 2(P - r - 1) + (V - 1) P chunk forwards and holds one
// more once the steady state starts.
TEST(PipelineSimulatorTest, Interleaved1F1B) {
  const double f = 1, b = 2;
  for (int p : {2, 4}) {
    for (int v : {2, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " V=" + std::to_string(v) +
                     " M=" + std::to_string(m));
        Simulation sim =
            run(makeOptions(ScheduleKind::Interleaved1F1B, p, m,
                            /*training=*/true, {f / v, b / v, 0, 0}, v));
        EXPECT_NEAR(sim.bubbleFraction, interleavedBubble(p, m, v), kTolerance);
        EXPECT_NEAR(sim.makespan, m * (f + b) + (p - 1) * (f + b) / v,
                    kTolerance);
        for (int rank = 0; rank < p; ++rank) {
          int expected = m == p ? m * v : 2 * (p - rank - 1) + (v - 1) * p + 1;
          EXPECT_EQ(sim.peakAlive[rank], expected);
        }
      }
    }
  }
}

// ZB-H1 (Qi et al. 2023): a bubble time of (P - 1)(f + b - w) against
// 1F1B's (P - 1)(f + b + w), at 1F1B's peak of P microbatches on stage 0
// (every stage holds P, since each keeps its W pending).
TEST(PipelineSimulatorTest, ZeroBubbleH1) {
  for (Costs costs : {Costs{1, 1, 1, 0}, Costs{1, 2, 0.5, 0}, Costs{2, 2, 1, 0},
                      Costs{2, 1, 1, 0}}) {
    const double f = costs.forward, b = costs.backward, w = costs.weightGrad;
    for (int p : {2, 4, 8}) {
      for (int m : {p, p + 1, 2 * p, 4 * p}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " M=" + std::to_string(m) +
                     " f=" + std::to_string(f) + " b=" + std::to_string(b) +
                     " w=" + std::to_string(w));
        Simulation sim = run(makeOptions(ScheduleKind::ZeroBubbleH1, p, m,
                                         /*training=*/true, costs));
        double bubble = zeroBubbleH1BubbleTime(p, costs);
        EXPECT_NEAR(bubble, (p - 1) * (f + b - w), kTolerance);
        EXPECT_NEAR(sim.makespan - m * (f + b + w), bubble, kTolerance);
        EXPECT_NEAR(sim.bubbleFraction, bubble / sim.makespan, kTolerance);
        EXPECT_NEAR(sim.spanIdle[0], bubble, kTolerance);
        for (int s = 0; s < p; ++s)
          EXPECT_EQ(sim.peakAlive[s], p);

        Simulation oneFOneB = run(makeOptions(ScheduleKind::OneFOneB, p, m,
                                              /*training=*/true, costs));
        EXPECT_NEAR(oneFOneB.makespan - m * (f + b + w), (p - 1) * (f + b + w),
                    kTolerance);
        EXPECT_EQ(oneFOneB.peakAlive[0], sim.peakAlive[0]);
      }
    }
  }
}

// ZB-H2: no stage idles between its first and last item when f = b = w (the
// parallelogram; the ramps overlap the next iteration's once the optimizer
// step does not synchronize), (P - 1)(f + b - 2w) otherwise, for M >= 2P - 1,
// at a peak of 2P - 1 microbatches on every stage.
TEST(PipelineSimulatorTest, ZeroBubbleH2) {
  for (Costs costs : {Costs{1, 1, 1, 0}, Costs{1, 2, 1, 0}, Costs{2, 2, 1, 0},
                      Costs{2, 1, 1, 0}, Costs{1, 1, 2, 0}}) {
    const double f = costs.forward, b = costs.backward, w = costs.weightGrad;
    for (int p : {2, 4, 8}) {
      for (int m : {2 * p - 1, 2 * p, 4 * p}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " M=" + std::to_string(m) +
                     " f=" + std::to_string(f) + " b=" + std::to_string(b) +
                     " w=" + std::to_string(w));
        Simulation sim = run(makeOptions(ScheduleKind::ZeroBubbleH2, p, m,
                                         /*training=*/true, costs));
        double bubble = zeroBubbleH2BubbleTime(p, costs);
        EXPECT_NEAR(maxOf(sim.spanIdle), bubble, kTolerance);
        EXPECT_NEAR(sim.spanIdle[0], bubble, kTolerance);
        for (int s = 0; s < p; ++s)
          EXPECT_EQ(sim.peakAlive[s], 2 * p - 1);
        if (f == b && b == w) {
          EXPECT_NEAR(bubble, 0, kTolerance);
          // Only the ramps remain: stage s starts s f late.
          EXPECT_NEAR(sim.makespan, m * (f + b + w) + (p - 1) * f, kTolerance);
          EXPECT_NEAR(sim.bubbleFraction,
                      static_cast<double>(p - 1) / (3 * m + p - 1), kTolerance);
        }
      }
    }
  }
}

// Fewer microbatches than the warm-ups want: the schedules stay valid and
// hold no more than M.
TEST(PipelineSimulatorTest, FewMicrobatches) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1,
                            ScheduleKind::ZeroBubbleH2}) {
    for (int m : {1, 2, 3}) {
      Simulation sim =
          run(makeOptions(kind, 4, m, /*training=*/true, {1, 1, 1, 0.1}));
      for (int s = 0; s < 4; ++s)
        EXPECT_LE(sim.peakAlive[s], m);
    }
  }
}

// Rank 0 waits for B of chunk 1 before sending mb1 on; rank 1 waits for mb1
// before running that B.
TEST(PipelineSimulatorTest, DeadlockNamesEveryStuckRank) {
  Orders orders = {
      {{WorkKind::Forward, 0, 0},
       {WorkKind::Backward, 0, 0},
       {WorkKind::Forward, 1, 0},
       {WorkKind::Backward, 1, 0}},
      {{WorkKind::Forward, 1, 1},
       {WorkKind::Forward, 0, 1},
       {WorkKind::Backward, 0, 1},
       {WorkKind::Backward, 1, 1}},
  };
  Simulation sim;
  std::string error;
  EXPECT_FALSE(simulateOrders(2, 2, 1, orders, {Costs()}, sim, error));
  EXPECT_EQ(error, "deadlock: rank 0 waits at B mb0 c0 for B mb0 c1 on rank "
                   "1; rank 1 waits at F mb1 c1 for F mb1 c0 on rank 0");

  // A backward ahead of its own forward.
  orders = {{{WorkKind::Backward, 0, 0}, {WorkKind::Forward, 0, 0}}};
  EXPECT_FALSE(simulateOrders(1, 1, 1, orders, {Costs()}, sim, error));
  EXPECT_EQ(error, "deadlock: rank 0 waits at B mb0 c0 for F mb0 c0, later "
                   "in its own order");
}

TEST(PipelineSimulatorTest, SimulateOrdersMatchesBuiltSchedule) {
  Options options = makeOptions(ScheduleKind::ZeroBubbleH1, 4, 8,
                                /*training=*/true, {1, 1, 1, 0});
  Orders orders;
  std::string error;
  ASSERT_TRUE(buildOrders(options, orders, error)) << error;
  Simulation fromOrders;
  ASSERT_TRUE(
      simulateOrders(4, 8, 1, orders, {options.costs}, fromOrders, error))
      << error;
  Simulation built = run(options);
  EXPECT_NEAR(fromOrders.makespan, built.makespan, kTolerance);
  EXPECT_EQ(fromOrders.ranks[2].size(), 3u * 8u);
}

TEST(PipelineSimulatorTest, InvalidOrders) {
  Simulation sim;
  std::string error;
  Orders wrongRank = {{{WorkKind::Forward, 0, 1}}, {{WorkKind::Forward, 0, 0}}};
  EXPECT_FALSE(simulateOrders(2, 1, 1, wrongRank, {Costs()}, sim, error));
  EXPECT_EQ(error, "rank 0: F mb0 c1 belongs to rank 1");

  Orders twice = {{{WorkKind::Forward, 0, 0}, {WorkKind::Forward, 0, 0}}};
  EXPECT_FALSE(simulateOrders(1, 1, 1, twice, {Costs()}, sim, error));
  EXPECT_EQ(error, "rank 0: F mb0 c0 appears twice");

  Orders missing = {{{WorkKind::Forward, 0, 0}}};
  EXPECT_FALSE(simulateOrders(1, 2, 1, missing, {Costs()}, sim, error));
  EXPECT_EQ(error, "F mb1 c0 is in no rank's order");

  Orders partialBackward = {{{WorkKind::Forward, 0, 0},
                             {WorkKind::Forward, 1, 0},
                             {WorkKind::Backward, 0, 0}}};
  EXPECT_FALSE(simulateOrders(1, 2, 1, partialBackward, {Costs()}, sim, error));
  EXPECT_EQ(error, "B mb1 c0 is in no rank's order");

  Orders outOfRange = {{{WorkKind::Forward, 5, 0}}};
  EXPECT_FALSE(simulateOrders(1, 1, 1, outOfRange, {Costs()}, sim, error));
  EXPECT_NE(error.find("out of range"), std::string::npos);

  Orders weightOnly = {
      {{WorkKind::Forward, 0, 0}, {WorkKind::WeightGrad, 0, 0}}};
  EXPECT_FALSE(simulateOrders(1, 1, 1, weightOnly, {Costs()}, sim, error));
  EXPECT_EQ(error, "weight-gradient items need backward items");

  Orders ok = {{{WorkKind::Forward, 0, 0}}, {{WorkKind::Forward, 0, 1}}};
  EXPECT_FALSE(
      simulateOrders(2, 1, 1, ok, {Costs(), Costs(), Costs()}, sim, error));
  EXPECT_EQ(error, "expected 1 or 2 chunk costs, got 3");
  std::vector<Costs> costs = {Costs(), Costs()};
  costs[1].transfer = -1;
  EXPECT_FALSE(simulateOrders(2, 1, 1, ok, costs, sim, error));
  EXPECT_EQ(error, "chunk 1: costs must be finite and non-negative");
}

TEST(PipelineSimulatorTest, BadOptions) {
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::Interleaved, 4, 6,
                                /*training=*/false, Costs(), 2)),
            "interleaved needs the microbatches (6) to be a multiple of the "
            "stages (4)");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::Interleaved1F1B, 4, 6,
                                /*training=*/true, Costs(), 2)),
            "interleaved-1f1b needs the microbatches (6) to be a multiple of "
            "the stages (4)");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::GPipe, 4, 8,
                                /*training=*/false, Costs(), 2)),
            "gpipe runs one chunk per rank, not 2; interleave with "
            "interleaved");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::ZeroBubbleH2, 4, 8,
                                /*training=*/true, Costs(), 2)),
            "zb-h2 runs one chunk per rank, not 2; interleave with "
            "interleaved-1f1b");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::OneFOneB, 4, 8,
                                /*training=*/false, Costs())),
            "1f1b is a training schedule; run inference with gpipe or "
            "interleaved");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::Interleaved, 4, 8,
                                /*training=*/true, Costs(), 2)),
            "interleaved is forward only; train with interleaved-1f1b");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::Interleaved1F1B, 4, 8,
                                /*training=*/true, Costs(), 1)),
            "interleaved-1f1b needs 2 or more virtual stages; use 1f1b for "
            "one");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::GPipe, 0, 8,
                                /*training=*/false, Costs())),
            "gpipe: stages (0), microbatches (8) and virtual stages (1) must "
            "be positive");
  EXPECT_EQ(errorOf(makeOptions(ScheduleKind::GPipe, 2, 8,
                                /*training=*/false, {1, -1, 0, 0})),
            "costs must be finite and non-negative");
  Options wrongCosts =
      makeOptions(ScheduleKind::GPipe, 2, 8, /*training=*/false, Costs());
  wrongCosts.chunkCosts = {Costs()};
  EXPECT_EQ(errorOf(wrongCosts),
            "expected 2 chunk costs (stages * virtual stages), got 1");
}

// A small JSON reader: true when `text` is exactly one JSON value.
class JsonChecker {
public:
  explicit JsonChecker(const std::string &text) : text(text) {}

  bool valid() {
    skipSpace();
    if (!value())
      return false;
    skipSpace();
    return pos == text.size();
  }

private:
  void skipSpace() {
    while (pos < text.size() &&
           std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool consume(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool string() {
    if (!consume('"'))
      return false;
    while (pos < text.size() && text[pos] != '"') {
      if (static_cast<unsigned char>(text[pos]) < 0x20)
        return false;
      pos += text[pos] == '\\' ? 2 : 1;
    }
    return pos++ < text.size();
  }
  bool number() {
    size_t begin = pos;
    if (pos < text.size() && text[pos] == '-')
      ++pos;
    while (pos < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[pos])) ||
            text[pos] == '.' || text[pos] == 'e' || text[pos] == 'E' ||
            text[pos] == '+' || text[pos] == '-'))
      ++pos;
    return pos > begin;
  }
  bool value() {
    skipSpace();
    if (pos >= text.size())
      return false;
    char c = text[pos];
    if (c == '{') {
      ++pos;
      if (consume('}'))
        return true;
      do {
        skipSpace();
        if (!string() || !consume(':') || !value())
          return false;
      } while (consume(','));
      return consume('}');
    }
    if (c == '[') {
      ++pos;
      if (consume(']'))
        return true;
      do {
        if (!value())
          return false;
      } while (consume(','));
      return consume(']');
    }
    if (c == '"')
      return string();
    for (const char *word : {"true", "false", "null"}) {
      std::string w(word);
      if (text.compare(pos, w.size(), w) == 0) {
        pos += w.size();
        return true;
      }
    }
    return number();
  }

  const std::string &text;
  size_t pos = 0;
};

size_t countOf(const std::string &text, const std::string &needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1))
    ++count;
  return count;
}

TEST(PipelineSimulatorTest, ChromeTrace) {
  Simulation sim = run(makeOptions(ScheduleKind::ZeroBubbleH1, 4, 8,
                                   /*training=*/true, {1, 1, 0.5, 0.25}));
  std::string trace = toChromeTrace(sim, 1000);
  EXPECT_TRUE(JsonChecker(trace).valid()) << trace;
  EXPECT_EQ(trace.rfind("{\"traceEvents\": [", 0), 0u);
  // One complete event per item: F, B and W of 8 microbatches on 4 ranks.
  EXPECT_EQ(countOf(trace, "\"ph\": \"X\""), 3u * 8u * 4u);
  EXPECT_EQ(countOf(trace, "\"name\": \"process_name\""), 4u);
  EXPECT_NE(trace.find("\"args\": {\"name\": \"rank 3\"}"), std::string::npos);
  // Rank 1's first item, F mb0 c1, starts after F mb0 c0 and the hop.
  EXPECT_NE(trace.find("{\"name\": \"F mb0 c1\", \"cat\": \"forward\", \"ph\": "
                       "\"X\", \"ts\": 1250, \"dur\": 1000, \"pid\": 1, "
                       "\"tid\": 0, \"args\": {\"microbatch\": 0, \"chunk\": "
                       "1}}"),
            std::string::npos);

  EXPECT_FALSE(JsonChecker("{\"a\": [1, 2}").valid());
  EXPECT_FALSE(JsonChecker("{\"a\": 1} x").valid());
}

} // namespace
