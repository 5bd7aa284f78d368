#include "parallel/pipeline/pipe_schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace ds::parallel {
namespace {

std::string Str(int v) { return std::to_string(v); }

using Order = std::vector<PipeOp>;

// Rank r's 1F1B: warm-up forwards, one forward and one backward in turn, cool-down backwards.
Order OneFOneB(int p, int m, int r) {
  const int warm = std::min(p - r - 1, m);
  Order o;
  for (int i = 0; i < warm; ++i) o.push_back({PipeOp::kForward, i, 0});
  for (int i = 0; i < m - warm; ++i) {
    o.push_back({PipeOp::kForward, warm + i, 0});
    o.push_back({PipeOp::kBackward, i, 0});
  }
  for (int i = m - warm; i < m; ++i) o.push_back({PipeOp::kBackward, i, 0});
  return o;
}

// Megatron's interleaved order: the k-th forward of a rank is micro-batch
// (k / (p v)) p + k % p of chunk (k % (p v)) / p; backwards the same with the chunks reversed.
Order Interleaved(int p, int m, int v, int r) {
  const int total = m * v;
  auto chunk = [p, v](int k) { return (k % (p * v)) / p; };
  auto micro = [p, v](int k) { return (k / (p * v)) * p + k % p; };
  const int warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  Order o;
  for (int k = 0; k < warm; ++k) o.push_back({PipeOp::kForward, micro(k), chunk(k)});
  int b = 0;
  for (int k = warm; k < total; ++k, ++b) {
    o.push_back({PipeOp::kForward, micro(k), chunk(k)});
    o.push_back({PipeOp::kBackward, micro(b), v - 1 - chunk(b)});
  }
  for (; b < total; ++b) o.push_back({PipeOp::kBackward, micro(b), v - 1 - chunk(b)});
  return o;
}

// ZB-H1: 1F1B's forwards and input-gradient backwards; rank r keeps r weight-gradient parts
// pending and runs the rest in the cool-down.
Order ZbH1(int p, int m, int r) {
  const int warm = std::min(p - r - 1, m);
  Order o;
  int input = 0, weight = 0;
  auto backward = [&](int i) {
    o.push_back({PipeOp::kBackwardInput, i, 0});
    ++input;
    if (input - weight > r) o.push_back({PipeOp::kBackwardWeight, weight++, 0});
  };
  for (int i = 0; i < warm; ++i) o.push_back({PipeOp::kForward, i, 0});
  for (int i = 0; i < m - warm; ++i) {
    o.push_back({PipeOp::kForward, warm + i, 0});
    backward(i);
  }
  for (int i = m - warm; i < m; ++i) backward(i);
  while (weight < m) o.push_back({PipeOp::kBackwardWeight, weight++, 0});
  return o;
}

}  // namespace

StatusOr<PipeOrders> BuildPipelineSchedule(plan::PipeScheduleKind kind, int p, int m, int v) {
  const std::string name = std::string("pipeline.schedule ") + plan::PipeScheduleName(kind);
  if (p < 1) return InvalidArgumentError("parallel.pipeline " + Str(p) + " must be >= 1");
  if (m < 1)
    return InvalidArgumentError(name + ": gradient_accumulation_steps (micro-batches per step) " +
                                Str(m) + " must be >= 1");
  if (kind == plan::PipeScheduleKind::kInterleaved) {
    if (v < 2)
      return InvalidArgumentError(name + ": pipeline.virtual_stages " + Str(v) +
                                  " must be >= 2 (1 is the 1f1b schedule)");
    if (m % p != 0)
      return InvalidArgumentError(name + " with " + Str(p) +
                                  " stages needs the micro-batches per step (" + Str(m) +
                                  ") to be a multiple of " + Str(p) + "; the least is " + Str(p));
  } else if (v != 1) {
    return InvalidArgumentError(name + ": pipeline.virtual_stages " + Str(v) +
                                " needs schedule interleaved");
  }
  PipeOrders out{kind, p, m, v, {}};
  for (int r = 0; r < p; ++r)
    out.ops.push_back(kind == plan::PipeScheduleKind::kInterleaved ? Interleaved(p, m, v, r)
                      : kind == plan::PipeScheduleKind::kZbH1      ? ZbH1(p, m, r)
                                                                   : OneFOneB(p, m, r));
  return out;
}

namespace {

double Cost(const PipeCosts& c, PipeOp::Kind k) {
  switch (k) {
    case PipeOp::kForward:
      return c.forward;
    case PipeOp::kBackward:
      return c.backward;
    case PipeOp::kBackwardInput:
      return c.backward_input;
    case PipeOp::kBackwardWeight:
      return c.backward_weight;
  }
  return 0;
}

// What op `op` of rank r waits for: (kind done, micro, virtual stage), or none (-1 stage).
std::tuple<int, int, int> Dependency(const PipeOrders& o, int r, const PipeOp& op) {
  const int last = o.stages * o.chunks - 1;
  const int vs = op.chunk * o.stages + r;
  switch (op.kind) {
    case PipeOp::kForward:
      return {PipeOp::kForward, op.micro, vs - 1};  // -1: the first stage reads the data
    case PipeOp::kBackward:
    case PipeOp::kBackwardInput:  // the loss, or the next stage's input gradient
      return vs == last ? std::make_tuple(int{PipeOp::kForward}, op.micro, vs)
                        : std::make_tuple(int{PipeOp::kBackward}, op.micro, vs + 1);
    case PipeOp::kBackwardWeight:
      return {PipeOp::kBackward, op.micro, vs};
  }
  return {0, 0, -1};
}

}  // namespace

PipeSimulation SimulateSchedule(const PipeOrders& o, const PipeCosts& costs) {
  const int p = o.stages;
  PipeSimulation sim;
  sim.idle.assign(p, 0);
  sim.max_in_flight.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0), busy(p, 0);
  std::vector<int> in_flight(p, 0);
  // (kind, micro, virtual stage) -> end time; a whole or input backward counts as kBackward.
  std::map<std::tuple<int, int, int>, double> done;
  size_t left = 0;
  for (const Order& ops : o.ops) left += ops.size();
  while (left > 0) {
    bool moved = false;
    for (int r = 0; r < p; ++r) {
      if (next[r] >= o.ops[r].size()) continue;
      const PipeOp& op = o.ops[r][next[r]];
      const auto dep = Dependency(o, r, op);
      double ready = 0;
      if (std::get<2>(dep) >= 0) {
        auto it = done.find(dep);
        if (it == done.end()) continue;
        ready = it->second;
      }
      const double start = std::max(free_at[r], ready), cost = Cost(costs, op.kind);
      free_at[r] = start + cost;
      busy[r] += cost;
      const int kind = op.kind == PipeOp::kBackwardInput ? PipeOp::kBackward : op.kind;
      done[{kind, op.micro, op.chunk * p + r}] = free_at[r];
      // Activations are held from the forward to the end of the weight gradient.
      if (op.kind == PipeOp::kForward)
        sim.max_in_flight[r] = std::max(sim.max_in_flight[r], ++in_flight[r]);
      if (op.kind == PipeOp::kBackward || op.kind == PipeOp::kBackwardWeight) --in_flight[r];
      ++next[r];
      --left;
      moved = true;
    }
    if (!moved) {
      for (int r = 0; r < p && sim.stuck_rank < 0; ++r)
        if (next[r] < o.ops[r].size()) sim.stuck_rank = r;
      return sim;
    }
  }
  sim.finished = true;
  sim.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int r = 0; r < p; ++r) sim.idle[r] = sim.makespan - busy[r];
  return sim;
}

double BubbleFormula(const PipeOrders& o, const PipeCosts& c) {
  const double p1 = o.stages - 1;
  if (o.kind == plan::PipeScheduleKind::kZbH1)
    return p1 * (c.forward + c.backward_input - c.backward_weight);
  return p1 * (c.forward + c.backward);
}

}  // namespace ds::parallel
