// Pipeline schedules: the order in which each pipeline rank runs the forward and backward of
// its stages' micro-batches, one builder per schedule (parallelism.md B). p ranks, m
// micro-batches per step (gradient accumulation steps, as DeepSpeed counts them), v model
// chunks per rank; chunk c of rank r is virtual stage c x p + r (Megatron's interleaving).
//
//   1f1b         PipeDream-flush (DeepSpeed's TrainSchedule, Megatron's default): rank r runs
//                min(p - r - 1, m) warm-up forwards, then one forward and one backward in turn,
//                then the remaining backwards. At most p - r micro-batches in flight.
//   interleaved  Megatron's interleaved 1F1B over v chunks: micro-batches in groups of p, chunk
//                by chunk; warm-up (p - r - 1) x 2 + (v - 1) x p. m a multiple of p.
//   zb-h1        zero bubble (Qi et al., arXiv 2401.10241): each backward split into its input
//                gradient (B, on the critical path) and its weight gradient (W); rank r holds
//                back r W's and runs them in the cool-down, where 1F1B idles. At most p
//                micro-batches' activations held, as 1F1B's first rank.
//
// SimulateSchedule runs the orders with blocking receives (a forward waits for the previous
// virtual stage's forward of its micro-batch, a backward for the next one's) and given op
// durations: it ends exactly when the orders cannot deadlock, and gives each rank's idle time.
//
//   DS_ASSIGN_OR_RETURN(PipeOrders o, BuildPipelineSchedule(PipeScheduleKind::k1F1B, 4, 8, 1));
//   const PipeSimulation s = SimulateSchedule(o, {1, 2, 0, 0});
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/plan/plan_config.h"

namespace ds::parallel {

struct PipeOp {
  // kBackward: the whole backward; kBackwardInput / kBackwardWeight: its two parts (zb-h1).
  enum Kind { kForward, kBackward, kBackwardInput, kBackwardWeight };
  Kind kind = kForward;
  int micro = 0;
  int chunk = 0;  // the rank's model chunk (0 unless interleaved)
};

struct PipeOrders {
  plan::PipeScheduleKind kind = plan::PipeScheduleKind::k1F1B;
  int stages = 1;  // p
  int micro_batches = 1;
  int chunks = 1;                        // v
  std::vector<std::vector<PipeOp>> ops;  // per pipeline rank, in run order
};

// InvalidArgument naming the key and the numbers: p or m below 1, v above 1 for a schedule
// without chunks, interleaved with v below 2 or m not a positive multiple of p (it needs at
// least p micro-batches).
StatusOr<PipeOrders> BuildPipelineSchedule(plan::PipeScheduleKind kind, int stages,
                                           int micro_batches, int chunks = 1);

struct PipeCosts {
  double forward = 1, backward = 2;  // a whole backward
  double backward_input = 1, backward_weight = 1;
};

struct PipeSimulation {
  bool finished = false;  // false: some rank waits forever (a deadlock), at `stuck_rank`
  int stuck_rank = -1;
  double makespan = 0;
  std::vector<double> idle;        // per rank: makespan minus its busy time
  std::vector<int> max_in_flight;  // per rank: micro-batch chunks forwarded, weight grads not done
};

PipeSimulation SimulateSchedule(const PipeOrders& orders, const PipeCosts& costs);

// The schedule's bubble (idle time of every rank per step) by its formula (parallelism.md B),
// for the costs of one op (one chunk of one micro-batch; B = B_in + W): 1f1b (p-1)(F+B);
// interleaved the same in chunk costs, which is (p-1)(F+B)/v of a whole stage's; zb-h1
// (p-1)(F+B_in-W), for m >= p (fewer micro-batches leave the cool-down idle).
double BubbleFormula(const PipeOrders& orders, const PipeCosts& costs);

}  // namespace ds::parallel
