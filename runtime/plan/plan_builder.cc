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
#include "runtime/plan/plan_builder.h"

#include <algorithm>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/plan/memory_timeline.h"
#include "runtime/plan/plan_builder_internal.h"
#include "runtime/plan/plan_hash.h"

namespace ds::plan {
namespace {

using internal::Context;
using internal::Unit;

std::string Str(int64_t v) { return std::to_string(v); }

Status Bad(const std::string& setting, const std::string& what) {
  return InvalidArgumentError("plan: " + setting + " " + what);
}

bool ToProtoDType(DType t, proto::DataType* out) {
  switch (t) {
    case DType::kF32:
      *out = proto::DT_F32;
      return true;
    case DType::kBF16:
      *out = proto::DT_BF16;
      return true;
    case DType::kF16:
      *out = proto::DT_F16;
      return true;
    default:
      return false;
  }
}

Status CheckSettings(const Topology& topo, const PlanConfig& c) {
  if (topo.world < 1) return Bad("world size", "must be >= 1, got " + Str(topo.world));
  if (topo.dp != topo.world)
    return Bad("data-parallel size", Str(topo.dp) + " != world size " + Str(topo.world) +
                                         " (tensor and pipeline parallelism are not planned yet)");
  if (c.stage < 0 || c.stage > 3)
    return Bad("zero_optimization.stage", "must be 0, 1, 2 or 3, got " + Str(c.stage));
  if (c.reduce_bucket_size <= 0)
    return Bad("zero_optimization.reduce_bucket_size",
               "must be > 0 elements, got " + Str(c.reduce_bucket_size));
  if (c.allgather_bucket_size <= 0)
    return Bad("zero_optimization.allgather_bucket_size",
               "must be > 0 elements, got " + Str(c.allgather_bucket_size));
  if (c.stage == 3) {
    if (c.prefetch_bucket_size < 0)
      return Bad("zero_optimization.stage3_prefetch_bucket_size",
                 "must be >= 0 elements, got " + Str(c.prefetch_bucket_size));
    if (c.max_reuse_distance < 0)
      return Bad("zero_optimization.stage3_max_reuse_distance",
                 "must be >= 0 elements, got " + Str(c.max_reuse_distance));
    if (c.param_persistence_threshold < 0)
      return Bad("zero_optimization.stage3_param_persistence_threshold",
                 "must be >= 0 elements, got " + Str(c.param_persistence_threshold));
  }
  if (c.seq_len < 1) return Bad("seq_len", "must be >= 1, got " + Str(c.seq_len));
  if (c.optimizer_states < 0)
    return Bad("optimizer states", "must be >= 0, got " + Str(c.optimizer_states));
  proto::DataType unused;
  if (!ToProtoDType(c.model_dtype, &unused) || !ToProtoDType(c.comm_dtype, &unused))
    return Bad("precision", "must be fp32, bf16 or fp16 for the model and its communication");
  return OkStatus();
}

// DeepSpeed's batch triad for this dp size, with ResolveBatchSizes' rules and messages.
Status ResolveBatch(const Topology& topo, PlanConfig* c) {
  JobConfig job;
  job.source = "plan for world size " + Str(topo.world);
  job.train_batch_size = c->train_batch_size;
  job.train_micro_batch_size_per_gpu = c->micro_batch_size;
  job.gradient_accumulation_steps = c->gradient_accumulation_steps;
  DS_RETURN_IF_ERROR(ResolveBatchSizes(&job, topo.dp));
  c->train_batch_size = job.train_batch_size;
  c->micro_batch_size = job.train_micro_batch_size_per_gpu;
  c->gradient_accumulation_steps = job.gradient_accumulation_steps;
  return OkStatus();
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
  proto::DataType pt = proto::DT_INVALID;
  ToProtoDType(dtype, &pt);
  b->set_dtype(pt);
  b->set_whole_step(whole_step);
  return b->id();
}

// A transient buffer of `bytes` (activations: their dtypes vary).
int AddBytesBuffer(proto::Plan* plan, const std::string& name, int64_t bytes) {
  int id = AddBuffer(plan, name, proto::PlanBuffer::ACTIVATIONS, 0, DType::kF32, false);
  plan->mutable_buffers(id)->set_bytes(bytes);
  plan->mutable_buffers(id)->set_dtype(proto::DT_INVALID);
  return id;
}

void AddBuffers(Context* ctx, proto::Plan* plan) {
  using K = proto::PlanBuffer;
  const PlanConfig& c = ctx->config;
  const DType m = c.model_dtype;
  const bool mixed = m != DType::kF32;
  const int64_t flat = ctx->facts.flat_elements;
  const int64_t shard = c.stage == 0 ? flat : plan->partition().shard_elements();
  internal::BufferIds& ids = ctx->buf;
  if (c.stage < 3) {
    const int64_t padded = c.stage == 0 ? flat : shard * ctx->dp;
    ids.params = AddBuffer(plan, "params", K::PARAM_FULL, padded, m, true);
  } else {
    ids.param_shard = AddBuffer(plan, "params.shard", K::PARAM_SHARD, shard, m, true);
    int64_t persistent = 0;
    for (const Unit& u : ctx->units) persistent += u.persistent ? u.chunk * ctx->dp : 0;
    if (persistent > 0)
      ids.params = AddBuffer(plan, "params.persistent", K::PARAM_FULL, persistent, m, true);
  }
  if (mixed) ids.master = AddBuffer(plan, "master", K::MASTER_WEIGHTS, shard, DType::kF32, true);
  ids.grads = c.stage < 2 ? AddBuffer(plan, "grads", K::GRAD_FULL, flat, m, true)
                          : AddBuffer(plan, "grads.shard", K::GRAD_SHARD, shard, m, true);
  for (int i = 0; i < c.optimizer_states; ++i)
    ids.states.push_back(
        AddBuffer(plan, "optimizer_state." + Str(i), K::OPTIMIZER_STATE, shard, DType::kF32, true));
  ids.batch = AddBytesBuffer(plan, "micro_batch", ctx->facts.input_bytes);
  for (const BlockFacts& b : ctx->facts.blocks)
    ids.activations.push_back(
        AddBytesBuffer(plan, "activations.block" + Str(b.block), b.activation_bytes));
  if (c.stage >= 2)
    for (size_t b = 0; b < ctx->buckets.size(); ++b)
      ids.buckets.push_back(AddBuffer(plan, "grad_bucket." + Str(b), K::GRAD_BUCKET,
                                      ctx->buckets[b].count, m, false));
  if (c.stage == 3)
    for (size_t u = 0; u < ctx->units.size(); ++u)
      ids.gathers.push_back(ctx->units[u].persistent
                                ? -1
                                : AddBuffer(plan, "gathered.unit" + Str(u), K::GATHER_BUFFER,
                                            ctx->units[u].chunk * ctx->dp, m, false));
}

void EchoSettings(const Context& ctx, const Topology& topo, proto::Plan* plan) {
  const PlanConfig& c = ctx.config;
  plan->set_version(kPlanVersion);
  proto::PlanTopology* t = plan->mutable_topology();
  t->set_world(topo.world);
  t->set_dp(topo.dp);
  t->set_tp(1);
  t->set_pp(1);
  proto::PlanSettings* s = plan->mutable_settings();
  s->set_zero_stage(c.stage);
  s->set_model_dtype(ctx.model_dtype);
  s->set_comm_dtype(ctx.comm_dtype);
  s->set_micro_batch_size(c.micro_batch_size);
  s->set_gradient_accumulation_steps(c.gradient_accumulation_steps);
  s->set_train_batch_size(c.train_batch_size);
  s->set_seq_len(c.seq_len);
  s->set_reduce_bucket_size(c.reduce_bucket_size);
  s->set_allgather_bucket_size(c.allgather_bucket_size);
  s->set_overlap_comm(c.overlap_comm);
  s->set_reduce_scatter(c.reduce_scatter);
  s->set_prefetch_bucket_size(c.prefetch_bucket_size);
  s->set_max_live_parameters(c.max_live_parameters);
  s->set_max_reuse_distance(c.max_reuse_distance);
  s->set_param_persistence_threshold(c.param_persistence_threshold);
  s->set_gradient_clipping(c.gradient_clipping);
  s->set_optimizer_states(c.optimizer_states);
  s->set_states_on_device(c.states_on_device);
  s->set_device_collectives(c.states_on_device && c.device_collectives);
  proto::ProcessGroup* g = plan->add_groups();
  g->set_name(internal::kDpGroup);
  for (int r = 0; r < topo.dp; ++r) g->add_ranks(r);
}

void EchoLayout(const Context& ctx, proto::Plan* plan) {
  proto::PlanModel* m = plan->mutable_model();
  m->set_name(ctx.facts.name);
  m->set_num_parameters(ctx.facts.num_parameters);
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
  }
  int64_t shard = 0;
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
    shard += u.chunk;
  }
  plan->mutable_partition()->set_shard_elements(shard);
  for (size_t i = 0; i < ctx.buckets.size(); ++i) {
    const internal::Bucket& b = ctx.buckets[i];
    proto::GradBucket* q = plan->add_buckets();
    q->set_id(static_cast<int>(i));
    for (const proto::ParamRange& r : b.ranges) *q->add_ranges() = r;
    q->set_count(b.count);
    for (int u : b.units) q->add_units(u);
    q->set_ready_block(ctx.facts.blocks[internal::BackwardPosToBlockPos(ctx, b.ready_pos)].block);
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
  auto add = [ins](int64_t begin, int64_t end) {
    if (end <= begin) return;
    proto::ParamRange* q = ins->add_ranges();
    q->set_offset(begin);
    q->set_count(end - begin);
  };
  const int64_t flat = ctx.facts.flat_elements;
  if (ins->kind() == proto::Instruction::GRAD_NORM_REDUCE && ctx.config.stage >= 2)
    return add(0, ShardElements(ctx));
  if (ctx.units.empty()) {
    if (ins->kind() == proto::Instruction::OPTIMIZER_STEP) return add(0, flat);
    const int64_t chunk = (flat + ctx.dp - 1) / ctx.dp;
    return add(std::min(flat, rank * chunk), std::min(flat, (rank + 1) * chunk));
  }
  for (const Unit& u : ctx.units)
    add(u.offset + rank * u.chunk,
        std::min({u.offset + u.count, u.offset + (rank + 1) * u.chunk, flat}));
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

}  // namespace

StatusOr<proto::Plan> MakePlan(const Graph& graph, const Topology& topology,
                               const PlanConfig& config) {
  DS_RETURN_IF_ERROR(CheckSettings(topology, config));
  Context ctx;
  ctx.config = config;
  ctx.dp = topology.dp;
  DS_RETURN_IF_ERROR(ResolveBatch(topology, &ctx.config));
  ToProtoDType(config.model_dtype, &ctx.model_dtype);
  ToProtoDType(config.comm_dtype, &ctx.comm_dtype);
  DS_ASSIGN_OR_RETURN(ctx.facts, AnalyzeModel(graph, ctx.config.micro_batch_size, config.seq_len));
  ctx.units =
      internal::MakeUnits(ctx.facts, config.stage, ctx.dp, config.param_persistence_threshold);
  DS_RETURN_IF_ERROR(CheckLiveParameters(ctx));
  DS_RETURN_IF_ERROR(CheckPlacement(ctx));
  ctx.buckets =
      internal::MakeBuckets(ctx.facts, ctx.units, config.stage, ctx.dp, config.reduce_bucket_size);
  proto::Plan plan;
  EchoSettings(ctx, topology, &plan);
  EchoLayout(ctx, &plan);
  AddBuffers(&ctx, &plan);
  internal::Stream stream;
  if (config.stage == 3)
    internal::BuildStage3Stream(ctx, &stream);
  else
    internal::BuildDenseStream(ctx, &stream);
  internal::PlaceInstructions(ctx, &plan, &stream);
  for (int rank = 0; rank < topology.world; ++rank) {
    proto::RankPlan* rp = plan.add_ranks();
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
  for (int rank = 0; rank < topology.world; ++rank) {
    DS_ASSIGN_OR_RETURN(*plan.mutable_ranks(rank)->mutable_memory(), WalkMemory(plan, rank));
  }
  plan.set_hash(PlanHash(plan));
  return plan;
}

}  // namespace ds::plan
