// Note [Plan layout]
// Parameters, gradients and optimizer state use the flat layout of ParamStore: graph parameter
// order, every start aligned to 16 elements. ZeRO shards are slices of it:
//  - Stages 1-2: one partition unit over the whole flat buffer, padded to 16 x dp elements, so rank
//    r owns the contiguous shard [r x chunk, (r + 1) x chunk) (DeepSpeed's flat partition).
//  - Stage 3: one unit per run of consecutive parameters read by the same blocks (and equally
//    persistent), each split over the ranks. A block's gather is then balanced over the ranks,
//    where one contiguous shard would make each gather a broadcast from one or two owners.
// Gradient buckets take parameters in reverse order (the order backward completes them), up to
// reduce_bucket_size elements; one parameter (stage 3: one unit) larger than that forms its own
// bucket, as DeepSpeed allows. A bucket is reduced after the backward of the block that writes its
// last gradient: stages 0-1 keep full gradients and reduce at the last micro-batch (during its
// backward with overlap_comm, after it otherwise); stages 2-3 keep only their gradient shard and
// reduce-scatter every micro-batch, through bucket buffers of which at most two reductions are in
// flight (DeepSpeed's double-buffered ipg buckets).
#include "zero/plan/zero_builder.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/core/proto_dtype.h"
#include "zero/plan/builder_context.h"

namespace ds::zero {
namespace {

using internal::Bucket;
using internal::BufferIds;
using internal::Context;
using internal::Unit;
using plan::BlockFacts;
using plan::ModelFacts;
using plan::ParamFacts;
using plan::PlanConfig;

std::string Str(int64_t v) { return std::to_string(v); }

Status Bad(const std::string& setting, const std::string& what) {
  return InvalidArgumentError("plan: " + setting + " " + what);
}

// Stage 3 gathers every parameter one block reads at once.
Status CheckLiveParameters(const Context& ctx) {
  if (ctx.config.stage != 3) return OkStatus();
  int64_t most = 0;
  int block = 0;
  for (int pos = 0; pos < static_cast<int>(ctx.facts.blocks.size()); ++pos) {
    const int64_t need = internal::GatheredElements(ctx, pos);
    if (need > most) {
      most = need;
      block = ctx.facts.blocks[pos].block;
    }
  }
  if (most <= ctx.config.max_live_parameters) return OkStatus();
  return Bad("zero_optimization.stage3_max_live_parameters",
             Str(ctx.config.max_live_parameters) + " is smaller than the " + Str(most) +
                 " parameter elements block " + Str(block) +
                 " gathers at once; raise it to at least " + Str(most));
}

int AddBuffer(proto::Plan* plan, const std::string& name, proto::PlanBuffer::Kind kind,
              int64_t elements, DType dtype, bool whole_step) {
  proto::PlanBuffer* b = plan->add_buffers();
  b->set_id(plan->buffers_size() - 1);
  b->set_name(name);
  b->set_kind(kind);
  b->set_bytes(elements * static_cast<int64_t>(DTypeSize(dtype)));
  b->set_dtype(ToProtoDType(dtype));
  b->set_whole_step(whole_step);
  return b->id();
}

// A transient buffer of `bytes` (activations and their gradients: their dtypes vary).
int AddBytesBuffer(proto::Plan* plan, const std::string& name, int64_t bytes,
                   proto::PlanBuffer::Kind kind = proto::PlanBuffer::ACTIVATIONS) {
  int id = AddBuffer(plan, name, kind, 0, DType::kF32, false);
  plan->mutable_buffers(id)->set_bytes(bytes);
  plan->mutable_buffers(id)->set_dtype(proto::DT_INVALID);
  return id;
}

// NVMe offload's staging slots (and, with offload_param, each slot's parameter part).
void AddSwapSlots(Context* ctx, proto::Plan* plan) {
  using K = proto::PlanBuffer;
  BufferIds& ids = ctx->buf;
  for (int i = 0; i < ctx->swap.slots(); ++i) {
    ids.swap_slots.push_back(
        AddBuffer(plan, "swap.slot" + Str(i), K::SWAP_BUFFER, 0, DType::kF32, false));
    plan->mutable_buffers(ids.swap_slots.back())->set_bytes(ctx->swap.slot_bytes());
    if (!ctx->swap.params()) continue;
    int64_t largest = 0;
    for (const proto::SubGroup& g : ctx->swap.sub_groups()) largest = std::max(largest, g.stride());
    ids.param_slots.push_back(AddBuffer(plan, "swap.slot" + Str(i) + ".params", K::SWAP_BUFFER,
                                        largest, ctx->config.model_dtype, false));
  }
}

// The micro-batch, each block's activations, the forward-only, activation-gradient and recompute
// arenas.
void AddActivationBuffers(Context* ctx, proto::Plan* plan) {
  BufferIds& ids = ctx->buf;
  ids.batch = AddBytesBuffer(plan, "micro_batch", ctx->facts.input_bytes);
  for (const BlockFacts& b : ctx->facts.blocks)
    ids.activations.push_back(
        AddBytesBuffer(plan, "activations.block" + Str(b.block), b.activation_bytes));
  if (ctx->facts.forward_arena_bytes > 0) {  // tensors only forward reads, by liveness
    const int arena = AddBytesBuffer(plan, "activations.forward", ctx->facts.forward_arena_bytes);
    plan->mutable_buffers(arena)->set_whole_step(true);
  }
  if (ctx->facts.activation_grad_bytes > 0) {  // backward's, by liveness (activation_grads.h)
    const int arena = AddBytesBuffer(plan, "activation_grads", ctx->facts.activation_grad_bytes,
                                     proto::PlanBuffer::ACTIVATION_GRADS);
    plan->mutable_buffers(arena)->set_whole_step(true);
  }
  if (ctx->facts.recompute_arena_bytes > 0) {  // one segment's recomputed tensors at a time
    const int arena =
        AddBytesBuffer(plan, "activations.recompute", ctx->facts.recompute_arena_bytes);
    plan->mutable_buffers(arena)->set_whole_step(true);
  }
}

void AddBuffers(Context* ctx, proto::Plan* plan) {
  using K = proto::PlanBuffer;
  const PlanConfig& c = ctx->config;
  const DType m = c.model_dtype;
  const bool mixed = m != DType::kF32;
  const int64_t flat = ctx->facts.flat_elements;
  const int64_t shard = c.stage == 0 ? flat : plan->partition().shard_elements();
  BufferIds& ids = ctx->buf;
  if (c.stage < 3) {
    int64_t padded = c.stage == 0 ? flat : 0;  // every group's chunks
    for (const Unit& u : ctx->units) padded += u.chunk * ctx->Ranks(u);
    ids.params = AddBuffer(plan, "params", K::PARAM_FULL, padded, m, true);
  } else {
    ids.param_shard = AddBuffer(plan, "params.shard", K::PARAM_SHARD, shard, m, true);
    plan->mutable_buffers(ids.param_shard)->set_nvme(ctx->swap.params());
    int64_t persistent = 0;
    for (const Unit& u : ctx->units) persistent += u.persistent ? u.chunk * ctx->Ranks(u) : 0;
    if (persistent > 0)
      ids.params = AddBuffer(plan, "params.persistent", K::PARAM_FULL, persistent, m, true);
  }
  if (mixed) ids.master = AddBuffer(plan, "master", K::MASTER_WEIGHTS, shard, DType::kF32, true);
  const bool nvme = ctx->swap.sub_groups_size() > 0;  // the swap file holds them
  if (nvme && ids.master >= 0) plan->mutable_buffers(ids.master)->set_nvme(true);
  ids.grads = c.stage < 2 ? AddBuffer(plan, "grads", K::GRAD_FULL, flat, m, true)
                          : AddBuffer(plan, "grads.shard", K::GRAD_SHARD, shard, m, true);
  for (int i = 0; i < c.optimizer_states; ++i)
    ids.states.push_back(
        AddBuffer(plan, "optimizer_state." + Str(i), K::OPTIMIZER_STATE, shard, DType::kF32, true));
  for (int id : ids.states) plan->mutable_buffers(id)->set_nvme(nvme);
  if (nvme) AddSwapSlots(ctx, plan);
  AddActivationBuffers(ctx, plan);
  if (c.stage >= 2)
    for (size_t b = 0; b < ctx->buckets.size(); ++b)
      ids.buckets.push_back(AddBuffer(plan, "grad_bucket." + Str(b), K::GRAD_BUCKET,
                                      ctx->buckets[b].count, m, false));
  if (c.stage == 3)
    for (size_t u = 0; u < ctx->units.size(); ++u)
      ids.gathers.push_back(ctx->units[u].persistent
                                ? -1
                                : AddBuffer(plan, "gathered.unit" + Str(u), K::GATHER_BUFFER,
                                            ctx->units[u].chunk * ctx->Ranks(ctx->units[u]), m,
                                            false));
  if (plan->partition().secondary_elements() > 0)  // hpZ: kept from a unit's first gather on
    ids.secondary = AddBuffer(plan, "params.secondary", K::PARAM_SECONDARY,
                              plan->partition().secondary_elements(), m, true);
}

void EchoLayout(const Context& ctx, proto::Plan* plan) {
  proto::PlanModel* m = plan->mutable_model();
  m->set_name(ctx.facts.name);
  m->set_num_parameters(ctx.facts.num_parameters);
  m->set_frozen_parameters(ctx.facts.frozen_elements);
  m->set_flat_elements(ctx.facts.flat_elements);
  m->set_num_blocks(static_cast<int>(ctx.facts.blocks.size()));
  int64_t largest = 0;
  for (const BlockFacts& b : ctx.facts.blocks) largest = std::max(largest, b.param_elements);
  m->set_largest_block_parameters(largest);
  for (const ParamFacts& p : ctx.facts.params) {
    proto::PlanParam* q = m->add_params();
    q->set_name(p.name);
    q->set_offset(p.offset);
    q->set_numel(p.numel);
    q->set_first_block(p.blocks.front());
    q->set_last_block(p.blocks.back());
    q->set_persistent(ctx.config.stage == 3 && p.numel <= ctx.config.param_persistence_threshold);
    q->set_expert(p.expert && ctx.ep > 1);
  }
  int64_t shard = 0, secondary = 0;
  for (size_t i = 0; i < ctx.units.size(); ++i) {
    const Unit& u = ctx.units[i];
    proto::PartitionUnit* q = plan->mutable_partition()->add_units();
    q->set_id(static_cast<int>(i));
    q->set_offset(u.offset);
    q->set_count(u.count);
    q->set_chunk(u.chunk);
    for (int b : u.blocks) q->add_blocks(b);
    q->set_persistent(u.persistent);
    q->set_shard_offset(u.shard_offset);
    q->set_expert(u.expert);
    q->set_secondary_chunk(u.secondary_chunk);
    q->set_secondary_offset(u.secondary_offset);
    shard += u.chunk;
    secondary += u.secondary_chunk;
  }
  plan->mutable_partition()->set_shard_elements(shard);
  plan->mutable_partition()->set_secondary_elements(secondary);
  for (size_t i = 0; i < ctx.buckets.size(); ++i) {
    const Bucket& b = ctx.buckets[i];
    proto::GradBucket* q = plan->add_buckets();
    q->set_id(static_cast<int>(i));
    for (const proto::ParamRange& r : b.ranges) *q->add_ranges() = r;
    q->set_count(b.count);
    for (int u : b.units) q->add_units(u);
    q->set_ready_block(ctx.facts.blocks[BackwardPosToBlockPos(ctx, b.ready_pos)].block);
  }
}

// The flat ranges rank `rank` updates and takes the gradient norm over: its owned chunks. Stage 0
// steps everything, but sums its norm over a 1/dp slice so the all-reduced sum is exact. Stages
// 2-3 sum the norm over their whole gradient shard (positions, in_shard).
int64_t ShardElements(const Context& ctx) {
  int64_t shard = 0;
  for (const Unit& u : ctx.units) shard += u.chunk;
  return shard;
}

void SetRankRanges(const Context& ctx, int rank, proto::Instruction* ins) {
  ins->clear_ranges();
  // A sub-group's step (offload_optimizer nvme) names its shard positions' part of the ranges.
  int64_t lo = 0, hi = INT64_MAX;
  if (ins->has_swap()) {
    const proto::SubGroup& g = ctx.swap.sub_groups(ins->swap().sub_group());
    lo = g.shard_begin();
    hi = lo + g.count();
  }
  // Flat [begin, end) at shard position `pos`.
  auto add = [&](int64_t begin, int64_t end, int64_t pos) {
    const int64_t from = std::max(pos, lo), to = std::min(pos + (end - begin), hi);
    if (to <= from) return;
    proto::ParamRange* q = ins->add_ranges();
    q->set_offset(begin + (from - pos));
    q->set_count(to - from);
  };
  const int64_t flat = ctx.facts.flat_elements;
  if (ins->kind() == proto::Instruction::GRAD_NORM_REDUCE && ctx.config.stage >= 2)
    return add(0, ShardElements(ctx), 0);
  if (ctx.units.empty() && ins->kind() == proto::Instruction::OPTIMIZER_STEP)
    return add(0, flat, 0);
  // Stage 0's norm: a slice of each group's run of parameters (expert parallelism: the experts'
  // over the ranks holding them), so that the sum over dp counts every element once.
  const std::vector<Unit> runs =
      ctx.units.empty() ? internal::MakeUnits(ctx.facts, 1, ctx.dp, ctx.ep, 0) : ctx.units;
  for (const Unit& u : runs) {
    const int64_t begin = u.offset + ctx.RankIn(u, rank) * u.chunk;
    const int64_t end = std::min({u.offset + u.count, begin + u.chunk, flat});
    add(begin, std::max(begin, end), ctx.units.empty() ? begin : u.shard_offset);
  }
}

// What the step runner would refuse, refused before any process starts.
Status CheckPlacement(const Context& ctx) {
  if (!ctx.config.states_on_device || ctx.config.stage != 3) return OkStatus();
  if (ctx.dp > 1 && !ctx.config.device_collectives)
    return UnimplementedError(
        "plan: ZeRO stage 3 with the model states on the device gathers and reduces on device "
        "buffers: it needs NCCL (libds_nccl.so), or offload_optimizer");
  if (ctx.comm_dtype != ctx.model_dtype)
    return UnimplementedError(
        "plan: ZeRO stage 3 with the model states on the device reduces in the model dtype: "
        "drop communication_data_type");
  return OkStatus();
}

// Expert parallelism: the experts' units have a group of their own, on host memory.
Status CheckExperts(const Context& ctx) {
  if (ctx.ep <= 1) return OkStatus();
  if (ctx.dp % ctx.ep != 0)
    return InternalError("plan: expert parallelism " + Str(ctx.ep) + " does not divide dp " +
                         Str(ctx.dp));
  if (ctx.config.states_on_device)
    return UnimplementedError(
        "plan: expert parallelism with the model states on the device (its expert-data-parallel "
        "collectives run on host memory only)");
  return OkStatus();
}

}  // namespace

Status CheckZeroSettings(const PlanConfig& c) {
  if (c.stage < 0 || c.stage > 3)
    return Bad("zero_optimization.stage", "must be 0, 1, 2 or 3, got " + Str(c.stage));
  if (c.reduce_bucket_size <= 0)
    return Bad("zero_optimization.reduce_bucket_size",
               "must be > 0 elements, got " + Str(c.reduce_bucket_size));
  if (c.allgather_bucket_size <= 0)
    return Bad("zero_optimization.allgather_bucket_size",
               "must be > 0 elements, got " + Str(c.allgather_bucket_size));
  if (c.stage != 3) return OkStatus();
  if (c.prefetch_bucket_size < 0)
    return Bad("zero_optimization.stage3_prefetch_bucket_size",
               "must be >= 0 elements, got " + Str(c.prefetch_bucket_size));
  if (c.max_reuse_distance < 0)
    return Bad("zero_optimization.stage3_max_reuse_distance",
               "must be >= 0 elements, got " + Str(c.max_reuse_distance));
  if (c.param_persistence_threshold < 0)
    return Bad("zero_optimization.stage3_param_persistence_threshold",
               "must be >= 0 elements, got " + Str(c.param_persistence_threshold));
  return OkStatus();
}

Status BuildZeroPlan(const ModelFacts& facts, const PlanConfig& config, int dp, proto::Plan* plan,
                     int ep) {
  Context ctx;
  ctx.config = config;
  ctx.dp = dp;
  ctx.ep = ep;
  ctx.facts = facts;
  ctx.model_dtype = ToProtoDType(config.model_dtype);
  ctx.comm_dtype = ToProtoDType(config.comm_dtype);
  DS_RETURN_IF_ERROR(CheckExperts(ctx));
  ctx.units =
      internal::MakeUnits(ctx.facts, config.stage, dp, ep, config.param_persistence_threshold,
                          config.param_nvme ? internal::kSwapAlign : plan::kFlatAlign);
  DS_RETURN_IF_ERROR(internal::CheckParamSwap(ctx));
  DS_RETURN_IF_ERROR(CheckLiveParameters(ctx));
  DS_RETURN_IF_ERROR(CheckPlacement(ctx));
  DS_RETURN_IF_ERROR(internal::CheckZeroPlusPlus(ctx));
  internal::AssignSecondary(&ctx);
  ctx.buckets =
      internal::MakeBuckets(ctx.facts, ctx.units, config.stage, dp, ep, config.reduce_bucket_size);
  EchoLayout(ctx, plan);
  if (config.optimizer_nvme) {
    const int64_t shard =
        config.stage == 0 ? facts.flat_elements : plan->partition().shard_elements();
    DS_RETURN_IF_ERROR(internal::MakeSwapPlan(ctx, shard, &ctx.swap));
    *plan->mutable_swap() = ctx.swap;
  }
  AddBuffers(&ctx, plan);
  if (ctx.facts.frozen_elements > 0)  // every rank's whole fp32 copy (runtime/graph/lora.h)
    AddBuffer(plan, "frozen", proto::PlanBuffer::FROZEN_WEIGHTS, ctx.facts.frozen_elements,
              DType::kF32, true);
  internal::Stream stream;
  if (config.stage == 3)
    internal::BuildStage3Stream(ctx, &stream);
  else
    internal::BuildDenseStream(ctx, &stream);
  DS_RETURN_IF_ERROR(internal::InsertParamSwapIns(ctx, plan, &stream));
  internal::PlaceInstructions(ctx, plan, &stream);
  for (int rank = 0; rank < dp; ++rank) {
    proto::RankPlan* rp = plan->add_ranks();
    rp->set_rank(rank);
    for (const proto::Instruction& ins : stream.list) {
      proto::Instruction* q = rp->add_instructions();
      *q = ins;
      const auto k = ins.kind();
      if (k == proto::Instruction::OPTIMIZER_STEP || k == proto::Instruction::GRAD_NORM_REDUCE ||
          k == proto::Instruction::OVERFLOW_REDUCE)
        SetRankRanges(ctx, rank, q);
      internal::SetStagingCopies(ctx, rank, q);
    }
  }
  return OkStatus();
}

}  // namespace ds::zero
