// StepRunner::Impl, private to the step runner's files: step_runner.cc (the dispatch table, the
// compute, ZeRO's and the optimizer's instructions, the step loop) and step_runner_parallel.cc
// (the tensor, expert, sequence and pipeline parallel instructions and the checkpoints'
// partitions).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/worker/plan_beacon.h"
#include "runtime/worker/state_memory.h"
#include "runtime/worker/step_runner.h"
#include "zero/zero_collectives.h"

namespace ds::worker {

struct StepRunner::Impl {
  using Instruction = proto::Instruction;
  using Handler = Status (Impl::*)(int index, const Instruction& in);
  struct Entry {
    Handler run = nullptr;
    bool lands_grads = false;  // gradients still on their way from a device land first
  };

  const proto::Plan* plan = nullptr;
  int rank = 0;
  StepParts p;
  std::unique_ptr<StepCompute> own_compute;
  StepCompute* compute = nullptr;
  const proto::RankPlan* mine = nullptr;
  std::unique_ptr<zero::ZeroCollectives> zero;
  std::array<Entry, Instruction::Kind_ARRAYSIZE> table{};

  // Per step.
  int64_t step = 0;
  int micro = 0;
  double loss_sum = 0;
  double aux_sum = 0;  // the MoE layers' aux losses over the micro-batches
  int aux_count = 0;
  int losses = 0;  // forwards that computed the loss (or a pipeline stage's part of it)
  double norm_sq = 0;
  bool overflow = false;
  StepResult result;

  Status Load(int, const Instruction& in);
  Status Forward(int, const Instruction& in);
  Status Backward(int, const Instruction& in);
  Status Collective(int index, const Instruction& in);
  Status GatherUpdated(int index, const Instruction& in);
  Status Release(int, const Instruction& in);
  Status GradNorm(int, const Instruction& in);
  Status Overflow(int, const Instruction& in);
  Status OptimizerStep(int, const Instruction& in);
  Status Swap(int index, const Instruction& in);
  Status ZeroGrads(int, const Instruction& in);
  Status Loss(int, const Instruction& in);
  Status ActAllReduce(int, const Instruction& in);
  Status ActGatherScatter(int, const Instruction& in);
  Status ActAllToAll(int, const Instruction& in);
  Status TpGrads(int, const Instruction& in);
  Status TiedGrads(int, const Instruction& in);
  Status PointToPoint(int index, const Instruction& in);
  Status Stash(int, const Instruction& in);
  Status Restore(int, const Instruction& in);
  Status Reload(int, const Instruction& in);
  StatusOr<parallel::Communicator*> Group(const Instruction& in);
  int GroupSize(const Instruction& in) {  // the ranks of the instruction's collective
    auto it = p.groups.find(in.collective().group());
    return it != p.groups.end() ? it->second->size() : p.comm ? p.comm->size() : 1;
  }
  void Fill();
  Status RunOne(int index, const Instruction& in);

  std::vector<std::pair<int64_t, int64_t>> persistent_ranges;  // stage 3: flat (offset, count)
  StateMemory memory;  // parts.memory_profile: peak resident bytes of the model states
  PlanBeacon beacon;   // where the rank is in its plan (the coordinator's hang diagnosis)

  bool profiling = false;  // DS_PROFILE_OPS=1: milliseconds per instruction kind
  std::map<std::string, double> profile;
};

}  // namespace ds::worker
