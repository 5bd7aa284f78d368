// ZeroCollectives: the ZeRO collectives of a step plan, each written once over StateView and
// picked by the plan's fields alone (Note [Placement] in zero/README.md):
//
//   ALL_REDUCE / REDUCE_SCATTER of a bucket's flat range   ReduceRanges
//   REDUCE_SCATTER of stage-3 units                          ReduceUnits
//   GATHER_PARAMS / ALL_GATHER of stage-3 units              GatherUnits
//   ALL_GATHER of the ranks' updated shard slices (1-2)      GatherSlices
//
// on the memory the collective's placement names (HOST, DEVICE; STAGED: the host copies, with
// the plan's staging copies around it; LOCAL: one rank, moved in place), packing through the
// plan's COMM_STAGING buffers, placed in one arena allocated at creation.
//
//   DS_ASSIGN_OR_RETURN(auto zero, ZeroCollectives::Create(&plan, rank, parts));
//   DS_RETURN_IF_ERROR(zero->Issue(index, instruction));   // completes at WaitFor(index)
//
// Not thread-safe; one thread drives it (collectives run on the communicator's thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "zero/collective_queue.h"
#include "zero/state_view.h"

namespace ds {
class DeviceMemory;
namespace proto {
class Instruction;
class Plan;
class RankPlan;
}  // namespace proto
namespace parallel {
class Communicator;
}
namespace zero {
class DeviceStates;
class Optimizer;
class OptimizerSwapper;
}  // namespace zero
}  // namespace ds

namespace ds::zero {

struct ZeroParts {
  ParamStore* params = nullptr;                 // sharded with LayoutFor(plan, rank)
  Optimizer* optimizer = nullptr;               // over `params`
  DeviceStates* device = nullptr;               // the plan's states_on_device
  parallel::Communicator* comm = nullptr;       // the data-parallel group
  parallel::Communicator* host_comm = nullptr;  // the same ranks on host memory; null: comm
  OptimizerSwapper* swapper = nullptr;          // offload_optimizer nvme
  // Host communicators of the other groups the plan's scalars name (the gradient norm and the
  // overflow flag over "world" with tensor parallelism) and of the experts' edp group (expert
  // parallelism), by ProcessGroup name.
  std::map<std::string, parallel::Communicator*> groups;
};

class ZeroCollectives {
 public:
  // Checks that the parts can run what the plan places (device buffers need a device
  // communicator and device states, host ones a host communicator) and allocates the staging.
  static StatusOr<std::unique_ptr<ZeroCollectives>> Create(const proto::Plan* plan, int rank,
                                                           const ZeroParts& parts);
  ~ZeroCollectives();

  // Starts collective instruction `index` (ALL_REDUCE, REDUCE_SCATTER, GATHER_PARAMS,
  // ALL_GATHER); a sync one completes here, an async one at WaitFor(index).
  Status Issue(int index, const proto::Instruction& in);
  Status WaitFor(int index) { return queue_.WaitFor(index); }
  // Tracks another kind of async job of instruction `index` (an NVMe swap) in the same queue, so
  // the plan's waits complete it.
  Status Track(int index, bool async, CollectiveJob job) {
    return queue_.Track(index, async, std::move(job));
  }
  Status WaitAll() { return queue_.WaitAll(); }

  // One float all-reduced over the group (`in`'s collective: HOST, or LOCAL for one rank).
  Status AllReduceScalar(const proto::Instruction& in, float* value, bool max);
  // A sum of doubles, the same on every rank whatever the ranks' shares (for the gradient norm).
  Status AllReduceSumExact(const proto::Instruction& in, double* value);
  // The step's loss over the group (LOSS_REDUCE), every rank gets it: the ranks' losses summed
  // and divided by the ranks that hold a whole one (`has`; a pipeline's earlier stages hold
  // none, or a part: their MoE layers' aux terms), and the MoE aux loss, the ranks' aux sums
  // over their counts. On return `loss` and `aux_sum` hold the results.
  struct LossSums {
    float loss = 0;
    bool has = false;
    float aux_sum = 0;
    float aux_count = 0;
  };
  Status ReduceLoss(const proto::Instruction& in, LossSums* sums);
  // Sequence parallelism's TP_GRAD_ALL_REDUCE: the gradients at `in`'s ranges (flat, or shard
  // positions with in_shard) summed over `comm`, in place, on the host.
  Status ReduceGrads(const proto::Instruction& in, parallel::Communicator* comm);
  // A pipeline's TIED_GRAD_ALL_REDUCE: `in`'s ranges (flat, or shard positions with in_shard)
  // placed at their `at` in one zeroed buffer of the collective's count, summed over `comm`,
  // and copied back: every rank adds what it holds of the tied gradients.
  Status ReduceTied(const proto::Instruction& in, parallel::Communicator* comm);
  // The host communicator a scalar instruction's group names: one of ZeroParts::groups, else
  // the data-parallel one.
  parallel::Communicator* ScalarComm(const proto::Instruction& in) const;

  // "model states on <device>: N MiB allocated; host " with device states, else empty.
  std::string DeviceStatesLine() const;

  // The states an instruction's placement names (STAGED: the host's, then the device's).
  std::vector<StateView*> ViewsFor(const proto::Instruction& in) const;

  // Stage 3 outside a step (evaluation, export): every partitioned unit gathered into the host
  // flat parameters (a collective: all ranks call it), and released again. No-ops below 3.
  Status GatherAll();
  void ReleaseAll();
  // The same for the plan's partition units `units` only (the hybrid engine's groups of layers;
  // persistent ones are skipped: they stay resident). Every rank passes the same units.
  Status GatherParamUnits(const std::vector<int>& units);
  void ReleaseParamUnits(const std::vector<int>& units);

  int64_t staging_bytes() const { return staging_bytes_; }

 private:
  struct Impl;
  ZeroCollectives(const proto::Plan* plan, int rank, const ZeroParts& parts);
  Status CheckParts() const;
  Status CheckPlacements(const proto::RankPlan& mine) const;
  Status Start(const proto::Instruction& in, StateView* v, parallel::Communicator* comm,
               char* stage_in, char* stage_out, CollectiveJob* job);
  bool IsExpertGroup(const std::string& group) const;

  const proto::Plan* plan_;
  int rank_;
  ZeroParts parts_;
  std::unique_ptr<StateView> host_;
  std::unique_ptr<StateView> device_;
  CollectiveQueue queue_;
  std::unique_ptr<Impl> impl_;  // the staging arena
  int64_t staging_bytes_ = 0;
  DType comm_dtype_ = DType::kF32;  // of gradient reductions (the plan's)
  std::vector<char> tied_sum_;      // ReduceTied's buffer, kept from step to step
  std::string edp_group_;           // expert parallelism: this rank's edp group ("": none)
};

}  // namespace ds::zero
