// Package-private pieces of the ZeRO builders (zero_builder.h): partition units, gradient
// buckets, buffer ids and the instruction-stream builders for stages 0-2 (dense_stream.cc) and
// stage 3 (stage3_stream.cc). See Note [Plan layout] in zero_builder.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "proto/plan.pb.h"
#include "runtime/plan/model_facts.h"
#include "runtime/plan/plan_config.h"
#include "zero/plan/zero_builder.h"

namespace ds::zero::internal {

using plan::AlignUp;
using plan::BlockFacts;
using plan::kFlatAlign;
using plan::ModelFacts;
using plan::ParamFacts;
using plan::PlanConfig;

// A contiguous flat range split over the dp ranks (proto::PartitionUnit).
struct Unit {
  int64_t offset = 0;
  int64_t count = 0;         // elements of the range (real data and alignment padding)
  int64_t numel = 0;         // parameter elements in it (what the stage-3 knobs count)
  int64_t chunk = 0;         // per rank, aligned to kFlatAlign
  int64_t shard_offset = 0;  // position of the chunk in each rank's shard buffer
  std::vector<int> blocks;   // blocks that read it, ascending
  bool persistent = false;
  bool expert = false;           // split over the expert-data-parallel group (proto::PartitionUnit)
  int64_t secondary_chunk = 0;   // hpZ: per hpz-group rank (zeropp.cc)
  int64_t secondary_offset = 0;  // its place in each rank's secondary partition
};

// Backward positions: 0 is the first block backward runs (the highest block).
struct Bucket {
  std::vector<proto::ParamRange> ranges;
  std::vector<int> units;            // stage 3
  int64_t count = 0;                 // elements reduced
  int64_t numel = 0;                 // parameter elements
  std::vector<int64_t> rank_counts;  // what each rank keeps after a reduce-scatter
  int open_pos = 0;                  // first backward position that writes a gradient into it
  int ready_pos = 0;                 // backward position after which all its gradients are final
  bool expert = false;               // experts' gradients: reduced over the edp group
};

struct BufferIds {
  int params = -1;               // PARAM_FULL: every param (stages 0-2) or the persistent
                                 // ones (stage 3)
  int param_shard = -1;          // stage 3
  int master = -1;               // fp32 master (mixed precision only)
  int grads = -1;                // GRAD_FULL (stages 0-1) or GRAD_SHARD (2-3)
  std::vector<int> states;       // optimizer states
  int batch = -1;                // token ids + targets
  std::vector<int> activations;  // per block position
  std::vector<int> buckets;      // per bucket (stages 2-3)
  std::vector<int> gathers;      // per unit (stage 3; -1 for persistent units)
  std::vector<int> swap_slots;   // SWAP_BUFFER per slot (offload_optimizer nvme)
  std::vector<int> param_slots;  // per slot: its sub-group's 16-bit shard pages (offload_param)
  int secondary = -1;            // PARAM_SECONDARY (hpZ)
};

// Expert parallelism: the ranks a unit (or bucket) of `expert` parameters is split over, and dp
// rank d's place among them. Experts: the dp / ep ranks holding the same experts (edp).
inline int GroupSize(bool expert, int dp, int ep) { return expert ? dp / ep : dp; }
inline int GroupRank(bool expert, int d, int ep) { return expert ? d / ep : d; }

struct Context {
  PlanConfig config;
  int dp = 1;
  int ep = 1;  // expert parallelism: the experts' units are split over dp / ep ranks
  ModelFacts facts;
  std::vector<Unit> units;
  std::vector<Bucket> buckets;
  BufferIds buf;
  proto::DataType model_dtype = proto::DT_F32;
  proto::DataType comm_dtype = proto::DT_F32;
  proto::SwapPlan swap;  // offload_optimizer nvme (MakeSwapPlan); sub_groups empty otherwise

  int Ranks(const Unit& u) const { return GroupSize(u.expert, dp, ep); }
  int Ranks(const Bucket& b) const { return GroupSize(b.expert, dp, ep); }
  int RankIn(const Unit& u, int dp_rank) const { return GroupRank(u.expert, dp_rank, ep); }
};

// An async instruction not yet waited for, and the bucket buffer it frees when it completes.
struct Pending {
  int instruction = -1;
  int buffer = -1;
  int buffer2 = -1;  // a second one (a swap slot's parameter pages)
};

class Stream {
 public:
  int Add(proto::Instruction ins) {
    list.push_back(std::move(ins));
    return static_cast<int>(list.size()) - 1;
  }
  int size() const { return static_cast<int>(list.size()); }
  proto::Instruction& back() { return list.back(); }

  std::vector<proto::Instruction> list;
  std::deque<Pending> pending;  // async collectives in issue order
};

// ---- partition.cc ----
// Stage 0: none. Stages 1-2: one unit over the flat buffer (with expert parallelism, one per
// run of expert or other parameters). Stage 3: runs of consecutive params with the same reader
// blocks, persistence and group.
// chunk_align: elements each stage-3 chunk is a multiple of (kFlatAlign; kSwapAlign when the
// parameter shard is swapped, so every chunk is a whole number of 4 KiB O_DIRECT pages).
// Expert parameters form units of their own when ep > 1.
std::vector<Unit> MakeUnits(const ModelFacts& facts, int stage, int dp, int ep,
                            int64_t persistence_threshold, int64_t chunk_align = kFlatAlign);
// Buckets in reverse parameter order (stages 0-2: params; stage 3: units), each of one group.
std::vector<Bucket> MakeBuckets(const ModelFacts& facts, const std::vector<Unit>& units, int stage,
                                int dp, int ep, int64_t bucket_size);
// Parameter elements that block position `pos` must hold gathered at once (stage 3).
int64_t GatheredElements(const Context& ctx, int pos);

// ---- stream_util.cc ----
int BackwardPosToBlockPos(const Context& ctx, int bwd_pos);
// FORWARD / BACKWARD over block positions [lo, hi] for micro-batch `mb`.
proto::Instruction Compute(const Context& ctx, proto::Instruction::Kind kind, int mb, int lo,
                           int hi);
// On the dp group, or the edp group for `expert` units and buckets.
void SetCollective(proto::Instruction* ins, int64_t count, proto::DataType dtype, int bucket,
                   const std::vector<int64_t>& rank_counts, bool expert = false);
// The gradient reduction of bucket `b` (ALL_REDUCE or REDUCE_SCATTER); async when overlapping.
proto::Instruction ReduceBucket(const Context& ctx, int b);
// Adds the reduction of `b` to the stream; sync ones free the bucket buffer at once.
void EmitReduce(const Context& ctx, int b, Stream* stream);
// Moves every pending async instruction into ins->wait_for (and their buffers to frees).
void WaitAll(proto::Instruction* ins, Stream* stream);
// Before a bucket buffer is reused or a third one opened: waits on the oldest pending ones.
void WaitForBucketSlot(int buffer, proto::Instruction* ins, Stream* stream);
// GRAD_NORM_REDUCE, OVERFLOW_REDUCE (f16), OPTIMIZER_STEP, the all-gathers of updated
// parameters (stages 1-2: everything; stage 3: persistent units), then LOSS_REDUCE.
void EmitStepTail(const Context& ctx, Stream* stream);

// ---- zeropp.cc (Note [ZeRO++] in zero/README.md) ----
// InvalidArgument / Unimplemented for ZeRO++ settings the plan cannot carry out.
Status CheckZeroPlusPlus(const Context& ctx);
// hpZ: every gathered (non-persistent) unit's secondary chunk and offset in each rank's
// secondary partition (EchoLayout sums them); nothing without hpZ.
void AssignSecondary(Context* ctx);
// The bytes of a gather's packed input and output: each rank's part of `per_rank` elements in
// `elem` bytes, over `n` ranks; quantized, the part's blocks beside it.
std::pair<int64_t, int64_t> GatherStagingBytes(int64_t per_rank, int n, int64_t elem,
                                               const proto::Quantization& q);
// qgZ: a stage-3 reduce-scatter of units quantized by blocks, as all-to-alls inside the hpz
// group, then across the hpz groups (one all-to-all over dp without hpZ).
void QuantizeGradients(const Context& ctx, proto::Instruction* ins);
// Its packed input and output, n ranks with the first all-to-all over `first_stage` of them.
std::pair<int64_t, int64_t> ReduceStagingBytes(int64_t per_rank, int n, int first_stage,
                                               const proto::Quantization& q);

// ---- placement.cc ----
// Where each collective runs (Note [Placement] in zero/README.md): LOCAL at one rank, HOST for
// host states, DEVICE or STAGED for device states.
proto::Placement CollectivePlacement(const Context& ctx);
// Sets every instruction's placement (and in_shard), adds the COMM_STAGING buffers each
// collective packs into, with live ranges from issue to completion, and makes the last
// instruction wait for any async one nothing waited for.
void PlaceInstructions(const Context& ctx, proto::Plan* plan, Stream* stream);
// Rank `rank`'s STAGED copies around its collectives (they name its own part).
void SetStagingCopies(const Context& ctx, int rank, proto::Instruction* ins);

// ---- swap_stream.cc ----
// Elements of every swapped range's start and length: 4 KiB of 16-bit values (8 KiB of fp32).
inline constexpr int64_t kSwapAlign = 2048;
// offload_optimizer nvme: the sub-groups of the rank's shard, the swap file and buffers
// (Note [Optimizer swapping] in swap_stream.cc). InvalidArgument naming buffer_count when one
// sub-group's states do not fit the buffers.
Status MakeSwapPlan(const Context& ctx, int64_t shard_elements, proto::SwapPlan* swap);
// offload_param nvme: a SWAP_IN of each GATHER_PARAMS's units, issued one gather ahead while
// buffer_count allows, which the gather waits for (Note [Parameter swapping] in swap_stream.cc).
// InvalidArgument naming buffer_size when a unit's chunk is larger.
Status CheckParamSwap(const Context& ctx);
Status InsertParamSwapIns(const Context& ctx, proto::Plan* plan, Stream* stream);
// The step tail's `scalars` (GRAD_NORM_REDUCE, OVERFLOW_REDUCE) and OPTIMIZER_STEP: one step
// over the whole shard, or with a swap plan, swap-in, step and swap-out per sub-group (with
// pipeline_read, the first reads go before the scalars).
void EmitOptimizerSteps(const Context& ctx, std::vector<proto::Instruction> scalars,
                        Stream* stream);
// OPTIMIZER_STEP's reads and writes: gradients, weights, master, optimizer states.
proto::Instruction StepInstruction(const Context& ctx);

// ---- dense_stream.cc / stage3_stream.cc ----
void BuildDenseStream(const Context& ctx, Stream* stream);
void BuildStage3Stream(const Context& ctx, Stream* stream);

}  // namespace ds::zero::internal
