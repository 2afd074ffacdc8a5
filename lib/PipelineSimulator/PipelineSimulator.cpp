//===- PipelineSimulator.cpp - pipeline schedules and their simulation ----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/PipelineSimulator/PipelineSimulator.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <utility>

namespace partita::pipesim {

namespace {

constexpr std::array<std::pair<ScheduleKind, std::string_view>, 6> kKindNames =
    {{{ScheduleKind::GPipe, "gpipe"},
      {ScheduleKind::Interleaved, "interleaved"},
      {ScheduleKind::OneFOneB, "1f1b"},
      {ScheduleKind::Interleaved1F1B, "interleaved-1f1b"},
      {ScheduleKind::ZeroBubbleH1, "zb-h1"},
      {ScheduleKind::ZeroBubbleH2, "zb-h2"}}};

bool fail(std::string &error, std::string message) {
  error = std::move(message);
  return false;
}

WorkItem forward(int microbatch, int chunk) {
  return {WorkKind::Forward, microbatch, chunk};
}
WorkItem backward(int microbatch, int chunk) {
  return {WorkKind::Backward, microbatch, chunk};
}
WorkItem weightGrad(int microbatch, int chunk) {
  return {WorkKind::WeightGrad, microbatch, chunk};
}

void buildGPipe(int stages, int microbatches, bool training, Orders &orders) {
  for (int rank = 0; rank < stages; ++rank) {
    for (int mb = 0; mb < microbatches; ++mb)
      orders[rank].push_back(forward(mb, rank));
    // The last microbatch's gradient is the first to reach each rank.
    if (training)
      for (int mb = microbatches - 1; mb >= 0; --mb)
        orders[rank].push_back(backward(mb, rank));
  }
}

// Megatron-LM's forward-only interleaving: a group of P microbatches passes
// through one chunk of every rank before the group enters the next chunk, so
// chunk v + 1 of microbatch m is ready on rank 0 just as rank 0 finishes the
// group's chunk v.
void buildInterleaved(int stages, int microbatches, int virtualStages,
                      Orders &orders) {
  for (int rank = 0; rank < stages; ++rank)
    for (int group = 0; group < microbatches / stages; ++group)
      for (int v = 0; v < virtualStages; ++v)
        for (int i = 0; i < stages; ++i)
          orders[rank].push_back(
              forward(group * stages + i, v * stages + rank));
}

void buildOneFOneB(int stages, int microbatches, Orders &orders) {
  for (int rank = 0; rank < stages; ++rank) {
    // Stage s holds P - s microbatches once the steady state starts.
    int warmup = std::min(stages - rank - 1, microbatches);
    std::vector<WorkItem> &order = orders[rank];
    for (int mb = 0; mb < warmup; ++mb)
      order.push_back(forward(mb, rank));
    for (int i = 0; i < microbatches - warmup; ++i) {
      order.push_back(forward(warmup + i, rank));
      order.push_back(backward(i, rank));
    }
    for (int mb = microbatches - warmup; mb < microbatches; ++mb)
      order.push_back(backward(mb, rank));
  }
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: virtual
// microbatch k (M V of them) is microbatch (k / PV) P + k % P on local chunk
// (k % PV) / P, counted from the last local chunk for backwards. Warm-up runs
// 2(P - r - 1) + (V - 1) P of them, every one when M == P.
void buildInterleaved1F1B(int stages, int microbatches, int virtualStages,
                          Orders &orders) {
  const int perGroup = stages * virtualStages;
  const int total = microbatches * virtualStages;
  for (int rank = 0; rank < stages; ++rank) {
    auto item = [&](int k, bool isForward) {
      int local = (k % perGroup) / stages;
      if (!isForward)
        local = virtualStages - 1 - local;
      int mb = (k / perGroup) * stages + k % stages;
      int chunk = local * stages + rank;
      return isForward ? forward(mb, chunk) : backward(mb, chunk);
    };
    int warmup =
        microbatches == stages
            ? total
            : std::min(2 * (stages - rank - 1) + (virtualStages - 1) * stages,
                       total);
    std::vector<WorkItem> &order = orders[rank];
    for (int k = 0; k < warmup; ++k)
      order.push_back(item(k, true));
    for (int i = 0; i < total - warmup; ++i) {
      order.push_back(item(warmup + i, true));
      order.push_back(item(i, false));
    }
    for (int k = total - warmup; k < total; ++k)
      order.push_back(item(k, false));
  }
}

// ZB-H1 as the paper's DeepSpeed schedule orders it: 1F1B's warm-up, then on
// stage s the first s backwards skip their W. Every stage then holds P
// microbatches, stage 0's 1F1B peak, and the s pending W fill the cool-down
// that 1F1B leaves idle.
void buildZeroBubbleH1(int stages, int microbatches, Orders &orders) {
  for (int rank = 0; rank < stages; ++rank) {
    std::vector<WorkItem> &order = orders[rank];
    int f = 0, b = 0, w = 0;
    for (int i = 0; i < stages - rank - 1 && f < microbatches; ++i)
      order.push_back(forward(f++, rank));
    for (int i = 0; i < rank && f < microbatches; ++i) {
      order.push_back(forward(f++, rank));
      order.push_back(backward(b++, rank));
    }
    while (f < microbatches) {
      order.push_back(forward(f++, rank));
      order.push_back(backward(b++, rank));
      order.push_back(weightGrad(w++, rank));
    }
    while (b < microbatches) {
      order.push_back(backward(b++, rank));
      order.push_back(weightGrad(w++, rank));
    }
    while (w < microbatches)
      order.push_back(weightGrad(w++, rank));
  }
}

// ZB-H2: stage s runs 2(P - s) - 1 forwards before its first B (the time the
// first gradient takes to come back), then B(j), W(j - 2s), F(j + warm-up).
// The warm-up shrinks by 2 per stage while the W lag grows by 2, so every
// stage holds 2P - 1 microbatches and, with f = b = w, runs without a gap: the
// stages form a parallelogram (the diagonal symmetry Shardy's schedule notes).
void buildZeroBubbleH2(int stages, int microbatches, Orders &orders) {
  for (int rank = 0; rank < stages; ++rank) {
    std::vector<WorkItem> &order = orders[rank];
    int warmup = std::min(2 * (stages - rank) - 1, microbatches);
    int lag = 2 * rank;
    int w = 0;
    for (int mb = 0; mb < warmup; ++mb)
      order.push_back(forward(mb, rank));
    for (int j = 0; j < microbatches; ++j) {
      order.push_back(backward(j, rank));
      // W before F frees a microbatch before the next one starts.
      if (j >= lag)
        order.push_back(weightGrad(w++, rank));
      if (j + warmup < microbatches)
        order.push_back(forward(j + warmup, rank));
    }
    while (w < microbatches)
      order.push_back(weightGrad(w++, rank));
  }
}

bool checkCosts(const Costs &costs, const std::string &where,
                std::string &error) {
  for (double value :
       {costs.forward, costs.backward, costs.weightGrad, costs.transfer})
    if (!std::isfinite(value) || value < 0)
      return fail(error, where + "costs must be finite and non-negative");
  return true;
}

void appendNumber(std::string &out, double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

void appendJsonString(std::string &out, std::string_view text) {
  out += '"';
  for (char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        static constexpr char kHex[] = "0123456789abcdef";
        out += "\\u00";
        out += kHex[(c >> 4) & 0xf];
        out += kHex[c & 0xf];
      } else {
        out += c;
      }
    }
  }
  out += '"';
}

std::string_view categoryName(WorkKind kind) {
  switch (kind) {
  case WorkKind::Forward:
    return "forward";
  case WorkKind::Backward:
    return "backward";
  case WorkKind::WeightGrad:
    return "weight_grad";
  }
  return "";
}

} // namespace

std::string_view scheduleKindName(ScheduleKind kind) {
  for (const auto &[k, name] : kKindNames)
    if (k == kind)
      return name;
  return "";
}

bool parseScheduleKind(std::string_view name, ScheduleKind &kind) {
  for (const auto &[k, n] : kKindNames) {
    if (n == name) {
      kind = k;
      return true;
    }
  }
  return false;
}

std::string workItemName(const WorkItem &item) {
  return std::string(1, static_cast<char>(item.kind)) + " mb" +
         std::to_string(item.microbatch) + " c" + std::to_string(item.chunk);
}

bool buildOrders(const Options &options, Orders &orders, std::string &error) {
  const int p = options.stages, m = options.microbatches,
            v = options.virtualStages;
  const std::string name(scheduleKindName(options.kind));
  if (p < 1 || m < 1 || v < 1)
    return fail(error, name + ": stages (" + std::to_string(p) +
                           "), microbatches (" + std::to_string(m) +
                           ") and virtual stages (" + std::to_string(v) +
                           ") must be positive");

  bool trainingOnly = false, oneChunk = false, groupsOfP = false;
  switch (options.kind) {
  case ScheduleKind::GPipe:
    oneChunk = true;
    break;
  case ScheduleKind::Interleaved:
    if (options.training)
      return fail(error, "interleaved is forward only; train with "
                         "interleaved-1f1b");
    groupsOfP = true;
    break;
  case ScheduleKind::OneFOneB:
  case ScheduleKind::ZeroBubbleH1:
  case ScheduleKind::ZeroBubbleH2:
    trainingOnly = oneChunk = true;
    break;
  case ScheduleKind::Interleaved1F1B:
    trainingOnly = groupsOfP = true;
    if (v < 2)
      return fail(error, "interleaved-1f1b needs 2 or more virtual stages; "
                         "use 1f1b for one");
    break;
  }
  if (trainingOnly && !options.training)
    return fail(error, name + " is a training schedule; run inference with "
                              "gpipe or interleaved");
  if (oneChunk && v != 1)
    return fail(error,
                name + " runs one chunk per rank, not " + std::to_string(v) +
                    "; interleave with " +
                    (options.training ? "interleaved-1f1b" : "interleaved"));
  if (groupsOfP && m % p != 0)
    return fail(error, name + " needs the microbatches (" + std::to_string(m) +
                           ") to be a multiple of the stages (" +
                           std::to_string(p) + ")");

  orders.assign(p, {});
  switch (options.kind) {
  case ScheduleKind::GPipe:
    buildGPipe(p, m, options.training, orders);
    break;
  case ScheduleKind::Interleaved:
    buildInterleaved(p, m, v, orders);
    break;
  case ScheduleKind::OneFOneB:
    buildOneFOneB(p, m, orders);
    break;
  case ScheduleKind::Interleaved1F1B:
    buildInterleaved1F1B(p, m, v, orders);
    break;
  case ScheduleKind::ZeroBubbleH1:
    buildZeroBubbleH1(p, m, orders);
    break;
  case ScheduleKind::ZeroBubbleH2:
    buildZeroBubbleH2(p, m, orders);
    break;
  }
  return true;
}

bool simulate(const Options &options, Simulation &out, std::string &error) {
  Orders orders;
  if (!buildOrders(options, orders, error))
    return false;
  const size_t chunks =
      static_cast<size_t>(options.stages) * options.virtualStages;
  if (!options.chunkCosts.empty() && options.chunkCosts.size() != chunks)
    return fail(error, "expected " + std::to_string(chunks) +
                           " chunk costs (stages * virtual stages), got " +
                           std::to_string(options.chunkCosts.size()));
  const std::vector<Costs> costs = options.chunkCosts.empty()
                                       ? std::vector<Costs>{options.costs}
                                       : options.chunkCosts;
  return simulateOrders(options.stages, options.microbatches,
                        options.virtualStages, orders, costs, out, error);
}

bool simulateOrders(int stages, int microbatches, int virtualStages,
                    const Orders &orders, const std::vector<Costs> &chunkCosts,
                    Simulation &out, std::string &error) {
  if (stages < 1 || microbatches < 1 || virtualStages < 1)
    return fail(error, "stages, microbatches and virtual stages must be "
                       "positive");
  const int p = stages, m = microbatches, k = stages * virtualStages;
  if (orders.size() != static_cast<size_t>(p))
    return fail(error, "expected one order per rank (" + std::to_string(p) +
                           "), got " + std::to_string(orders.size()));
  if (chunkCosts.size() != 1 && chunkCosts.size() != static_cast<size_t>(k))
    return fail(error, "expected 1 or " + std::to_string(k) +
                           " chunk costs, got " +
                           std::to_string(chunkCosts.size()));
  for (size_t c = 0; c < chunkCosts.size(); ++c)
    if (!checkCosts(
            chunkCosts[c],
            chunkCosts.size() == 1 ? "" : "chunk " + std::to_string(c) + ": ",
            error))
      return false;
  auto costsOf = [&](int chunk) -> const Costs & {
    return chunkCosts.size() == 1 ? chunkCosts[0] : chunkCosts[chunk];
  };

  // Items are stored by kind, then microbatch, then chunk.
  const size_t perKind = static_cast<size_t>(m) * k;
  auto kindIndex = [](WorkKind kind) {
    return kind == WorkKind::Forward ? 0 : kind == WorkKind::Backward ? 1 : 2;
  };
  auto slot = [&](const WorkItem &item) {
    return kindIndex(item.kind) * perKind +
           static_cast<size_t>(item.microbatch) * k + item.chunk;
  };
  std::vector<int> owner(3 * perKind, -1);
  std::array<size_t, 3> counts = {0, 0, 0};
  for (int rank = 0; rank < p; ++rank) {
    for (const WorkItem &item : orders[rank]) {
      if (item.kind != WorkKind::Forward && item.kind != WorkKind::Backward &&
          item.kind != WorkKind::WeightGrad)
        return fail(error,
                    "rank " + std::to_string(rank) + ": unknown work kind");
      if (item.microbatch < 0 || item.microbatch >= m || item.chunk < 0 ||
          item.chunk >= k)
        return fail(error, "rank " + std::to_string(rank) + ": " +
                               workItemName(item) + " is out of range (" +
                               std::to_string(m) + " microbatches, " +
                               std::to_string(k) + " chunks)");
      if (item.chunk % p != rank)
        return fail(error, "rank " + std::to_string(rank) + ": " +
                               workItemName(item) + " belongs to rank " +
                               std::to_string(item.chunk % p));
      int &seen = owner[slot(item)];
      if (seen >= 0)
        return fail(error, "rank " + std::to_string(rank) + ": " +
                               workItemName(item) + " appears twice");
      seen = rank;
      ++counts[kindIndex(item.kind)];
    }
  }
  const bool training = counts[1] > 0, split = counts[2] > 0;
  if (split && !training)
    return fail(error, "weight-gradient items need backward items");
  for (WorkKind kind :
       {WorkKind::Forward, WorkKind::Backward, WorkKind::WeightGrad}) {
    if ((kind == WorkKind::Backward && !training) ||
        (kind == WorkKind::WeightGrad && !split))
      continue;
    for (int mb = 0; mb < m; ++mb)
      for (int chunk = 0; chunk < k; ++chunk)
        if (owner[slot({kind, mb, chunk})] < 0)
          return fail(error, workItemName({kind, mb, chunk}) +
                                 " is in no rank's order");
  }

  // The dependencies of an item, with the latency each adds.
  struct Dependency {
    WorkItem item;
    double latency;
  };
  auto hop = [&](int from, int to) {
    return from % p == to % p ? 0.0 : costsOf(std::min(from, to)).transfer;
  };
  auto dependencies = [&](const WorkItem &item,
                          std::array<Dependency, 2> &deps) -> int {
    switch (item.kind) {
    case WorkKind::Forward:
      if (item.chunk == 0)
        return 0;
      deps[0] = {forward(item.microbatch, item.chunk - 1),
                 hop(item.chunk - 1, item.chunk)};
      return 1;
    case WorkKind::Backward:
      deps[0] = {forward(item.microbatch, item.chunk), 0.0};
      if (item.chunk == k - 1)
        return 1;
      deps[1] = {backward(item.microbatch, item.chunk + 1),
                 hop(item.chunk + 1, item.chunk)};
      return 2;
    case WorkKind::WeightGrad:
      deps[0] = {backward(item.microbatch, item.chunk), 0.0};
      return 1;
    }
    return 0;
  };
  auto duration = [&](const WorkItem &item) {
    const Costs &costs = costsOf(item.chunk);
    switch (item.kind) {
    case WorkKind::Forward:
      return costs.forward;
    case WorkKind::Backward:
      return split ? costs.backward : costs.backward + costs.weightGrad;
    case WorkKind::WeightGrad:
      return costs.weightGrad;
    }
    return 0.0;
  };

  // Each pass runs every rank as far as its next item's dependencies allow;
  // a pass that runs nothing while items remain is a deadlock.
  std::vector<char> done(3 * perKind, 0);
  std::vector<double> startOf(3 * perKind, 0), endOf(3 * perKind, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> freeAt(p, 0);
  out = Simulation();
  out.ranks.assign(p, {});
  size_t remaining = 0;
  for (const auto &order : orders)
    remaining += order.size();
  std::array<Dependency, 2> deps;
  while (remaining > 0) {
    bool progressed = false;
    for (int rank = 0; rank < p; ++rank) {
      for (; next[rank] < orders[rank].size(); ++next[rank]) {
        const WorkItem &item = orders[rank][next[rank]];
        int numDeps = dependencies(item, deps);
        double start = freeAt[rank];
        bool ready = true;
        for (int d = 0; d < numDeps && ready; ++d) {
          size_t s = slot(deps[d].item);
          ready = done[s];
          start = std::max(start, endOf[s] + deps[d].latency);
        }
        if (!ready)
          break;
        double end = start + duration(item);
        size_t s = slot(item);
        done[s] = 1;
        startOf[s] = start;
        endOf[s] = end;
        freeAt[rank] = end;
        out.ranks[rank].push_back(
            {item.kind, item.microbatch, item.chunk, rank, start, end});
        --remaining;
        progressed = true;
      }
    }
    if (progressed)
      continue;
    std::string message = "deadlock:";
    const char *separator = " ";
    for (int rank = 0; rank < p; ++rank) {
      if (next[rank] == orders[rank].size())
        continue;
      const WorkItem &item = orders[rank][next[rank]];
      int numDeps = dependencies(item, deps);
      for (int d = 0; d < numDeps; ++d) {
        size_t s = slot(deps[d].item);
        if (done[s])
          continue;
        message += separator +
                   ("rank " + std::to_string(rank) + " waits at " +
                    workItemName(item) + " for " + workItemName(deps[d].item));
        message += owner[s] == rank ? ", later in its own order"
                                    : " on rank " + std::to_string(owner[s]);
        separator = "; ";
        break;
      }
    }
    return fail(error, message);
  }

  double busy = 0;
  out.spanIdle.assign(p, 0);
  out.peakAlive.assign(p, 0);
  const WorkKind lastBackward =
      split ? WorkKind::WeightGrad : WorkKind::Backward;
  for (int rank = 0; rank < p; ++rank) {
    const std::vector<Event> &events = out.ranks[rank];
    double rankBusy = 0;
    // (time, +1 when an activation is created, -1 when it is freed).
    std::vector<std::pair<double, int>> marks;
    for (const Event &event : events) {
      rankBusy += event.end - event.start;
      out.makespan = std::max(out.makespan, event.end);
      if (event.kind == WorkKind::Forward) {
        marks.push_back({event.start, +1});
        if (!training)
          marks.push_back(
              {event.chunk == k - 1
                   ? event.end
                   : startOf[slot(forward(event.microbatch, event.chunk + 1))],
               -1});
      }
      if (training && event.kind == lastBackward)
        marks.push_back({event.end, -1});
    }
    busy += rankBusy;
    if (!events.empty())
      out.spanIdle[rank] = events.back().end - events.front().start - rankBusy;
    std::sort(marks.begin(), marks.end());
    int alive = 0;
    for (const auto &mark : marks) {
      alive += mark.second;
      out.peakAlive[rank] = std::max(out.peakAlive[rank], alive);
    }
  }
  out.bubbleFraction = out.makespan > 0 ? 1 - busy / (p * out.makespan) : 0;
  return true;
}

std::string toChromeTrace(const Simulation &simulation,
                          double microsecondsPerUnit) {
  std::string out = "{\"traceEvents\": [";
  const char *separator = "\n";
  for (size_t rank = 0; rank < simulation.ranks.size(); ++rank) {
    const std::string pid = std::to_string(rank);
    out += separator;
    separator = ",\n";
    out += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
           ", \"tid\": 0, \"args\": {\"name\": ";
    appendJsonString(out, "rank " + pid);
    out += "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " +
           pid + ", \"tid\": 0, \"args\": {\"sort_index\": " + pid + "}}";
    out += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid +
           ", \"tid\": 0, \"args\": {\"name\": \"compute\"}}";
    for (const Event &event : simulation.ranks[rank]) {
      out += ",\n{\"name\": ";
      appendJsonString(
          out, workItemName({event.kind, event.microbatch, event.chunk}));
      out += ", \"cat\": ";
      appendJsonString(out, categoryName(event.kind));
      out += ", \"ph\": \"X\", \"ts\": ";
      appendNumber(out, event.start * microsecondsPerUnit);
      out += ", \"dur\": ";
      appendNumber(out, (event.end - event.start) * microsecondsPerUnit);
      out += ", \"pid\": " + pid + ", \"tid\": 0, \"args\": {\"microbatch\": " +
             std::to_string(event.microbatch) +
             ", \"chunk\": " + std::to_string(event.chunk) + "}}";
    }
  }
  out += "\n]}\n";
  return out;
}

double gpipeBubble(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / (microbatches + stages - 1);
}

double interleavedBubble(int stages, int microbatches, int virtualStages) {
  return static_cast<double>(stages - 1) /
         (static_cast<double>(virtualStages) * microbatches + stages - 1);
}

double zeroBubbleH1BubbleTime(int stages, const Costs &costs) {
  return (stages - 1) * (costs.forward + costs.backward - costs.weightGrad);
}

double zeroBubbleH2BubbleTime(int stages, const Costs &costs) {
  return std::max(0.0, (stages - 1) * (costs.forward + costs.backward -
                                       2 * costs.weightGrad));
}

} // namespace partita::pipesim
