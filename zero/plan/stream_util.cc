// Instruction helpers shared by the stage 0-2 and stage 3 stream builders.
#include <algorithm>

#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

using Kind = proto::Instruction::Kind;

void AddRange(proto::Instruction* ins, int64_t offset, int64_t count) {
  proto::ParamRange* r = ins->add_ranges();
  r->set_offset(offset);
  r->set_count(count);
}

// A one-float all-reduce (gradient norm or overflow flag) over the gradients this rank holds.
proto::Instruction ScalarReduce(const Context& ctx, Kind kind) {
  proto::Instruction ins;
  ins.set_kind(kind);
  ins.set_micro_batch(-1);
  SetCollective(&ins, 1, proto::DT_F32, -1, {});
  ins.add_reads(ctx.buf.grads);
  return ins;
}

// Stages 1-2: every rank contributes the same slice of its chunk of each unit per collective, as
// DeepSpeed's all_gather_dp_groups does (allgather_bucket_size elements per collective). Range r
// is group rank r's slice, clipped to the unit (the last chunk's tail is padding).
void EmitShardAllGathers(const Context& ctx, Stream* stream) {
  int chunk_id = 0;
  for (const Unit& u : ctx.units) {
    const int n = ctx.Ranks(u);
    const int64_t per_rank = std::max<int64_t>(
        kFlatAlign, ctx.config.allgather_bucket_size / n / kFlatAlign * kFlatAlign);
    for (int64_t start = 0; start < u.chunk; start += per_rank, ++chunk_id) {
      const int64_t len = std::min(per_rank, u.chunk - start);
      proto::Instruction ins;
      ins.set_kind(proto::Instruction::ALL_GATHER);
      ins.set_micro_batch(-1);
      for (int r = 0; r < n; ++r) {
        const int64_t at = u.offset + r * u.chunk + start;
        AddRange(&ins, at, std::clamp<int64_t>(u.offset + u.count - at, 0, len));
      }
      SetCollective(&ins, len * n, ctx.model_dtype, chunk_id, std::vector<int64_t>(n, len),
                    u.expert);
      ins.add_reads(ctx.buf.params);
      ins.add_writes(ctx.buf.params);
      stream->Add(std::move(ins));
    }
  }
}

// Stage 3: the persistent units' full copies, refreshed after the step (DeepSpeed's _post_step),
// one group's units per collective.
void EmitPersistentAllGathers(const Context& ctx, Stream* stream) {
  proto::Instruction ins;
  int64_t numel = 0, per_rank = 0;
  int chunk_id = 0;
  bool expert = false;
  auto flush = [&]() {
    if (ins.units_size() == 0) return;
    const int n = GroupSize(expert, ctx.dp, ctx.ep);
    SetCollective(&ins, per_rank * n, ctx.model_dtype, chunk_id++,
                  std::vector<int64_t>(n, per_rank), expert);
    ins.add_reads(ctx.buf.param_shard);
    ins.add_writes(ctx.buf.params);
    stream->Add(std::move(ins));
    ins = proto::Instruction();
    numel = per_rank = 0;
  };
  for (int i = 0; i < static_cast<int>(ctx.units.size()); ++i) {
    const Unit& u = ctx.units[i];
    if (!u.persistent) continue;
    if (numel > 0 && (numel + u.numel > ctx.config.allgather_bucket_size || u.expert != expert))
      flush();
    expert = u.expert;
    ins.set_kind(proto::Instruction::ALL_GATHER);
    ins.set_micro_batch(-1);
    ins.add_units(i);
    AddRange(&ins, u.offset, u.count);
    numel += u.numel;
    per_rank += u.chunk;
  }
  flush();
}

}  // namespace

int BackwardPosToBlockPos(const Context& ctx, int bwd_pos) {
  return static_cast<int>(ctx.facts.blocks.size()) - 1 - bwd_pos;
}

proto::Instruction Compute(const Context& ctx, Kind kind, int mb, int lo, int hi) {
  proto::Instruction ins;
  ins.set_kind(kind);
  ins.set_micro_batch(mb);
  ins.set_first_block(ctx.facts.blocks[lo].block);
  ins.set_last_block(ctx.facts.blocks[hi].block);
  ins.set_node_begin(ctx.facts.blocks[lo].node_begin);
  ins.set_node_end(ctx.facts.blocks[hi].node_end);
  ins.set_computes_loss(hi == static_cast<int>(ctx.facts.blocks.size()) - 1);
  if (kind == proto::Instruction::BACKWARD)
    ins.set_mean_over(ctx.config.gradient_accumulation_steps * ctx.dp);
  return ins;
}

void SetCollective(proto::Instruction* ins, int64_t count, proto::DataType dtype, int bucket,
                   const std::vector<int64_t>& rank_counts, bool expert) {
  proto::Collective* c = ins->mutable_collective();
  c->set_group(expert ? kEdpGroup : kDpGroup);
  c->set_count(count);
  c->set_dtype(dtype);
  c->set_bucket(bucket);
  for (int64_t n : rank_counts) c->add_rank_counts(n);
}

proto::Instruction ReduceBucket(const Context& ctx, int b) {
  const Bucket& bucket = ctx.buckets[b];
  const int stage = ctx.config.stage;
  const bool scatter = stage == 3 || (stage > 0 && ctx.config.reduce_scatter);
  proto::Instruction ins;
  ins.set_kind(scatter ? proto::Instruction::REDUCE_SCATTER : proto::Instruction::ALL_REDUCE);
  ins.set_micro_batch(-1);
  for (const proto::ParamRange& r : bucket.ranges) *ins.add_ranges() = r;
  for (int u : bucket.units) ins.add_units(u);
  SetCollective(&ins, bucket.count, ctx.comm_dtype, b,
                scatter ? bucket.rank_counts : std::vector<int64_t>(), bucket.expert);
  if (stage >= 2) {
    ins.add_reads(ctx.buf.buckets[b]);
    if (!scatter) ins.add_writes(ctx.buf.buckets[b]);
  } else {
    ins.add_reads(ctx.buf.grads);
  }
  ins.add_writes(ctx.buf.grads);
  ins.set_async(ctx.config.overlap_comm);
  QuantizeGradients(ctx, &ins);
  return ins;
}

void EmitReduce(const Context& ctx, int b, Stream* stream) {
  proto::Instruction ins = ReduceBucket(ctx, b);
  const int buffer = ctx.config.stage >= 2 ? ctx.buf.buckets[b] : -1;
  const bool async = ins.async();
  if (!async && buffer >= 0) ins.add_frees(buffer);
  int idx = stream->Add(std::move(ins));
  if (async) stream->pending.push_back({idx, buffer});
}

void WaitAll(proto::Instruction* ins, Stream* stream) {
  for (const Pending& p : stream->pending) {
    ins->add_wait_for(p.instruction);
    if (p.buffer >= 0) ins->add_frees_before(p.buffer);
    if (p.buffer2 >= 0) ins->add_frees_before(p.buffer2);
  }
  stream->pending.clear();
}

void WaitForBucketSlot(int buffer, proto::Instruction* ins, Stream* stream) {
  auto reuses = [&]() {
    for (const Pending& p : stream->pending)
      if (p.buffer == buffer) return true;
    return false;
  };
  // DeepSpeed double-buffers its reduction buckets: at most two in flight.
  while (!stream->pending.empty() && (stream->pending.size() >= 2 || reuses())) {
    const Pending p = stream->pending.front();
    stream->pending.pop_front();
    ins->add_wait_for(p.instruction);
    if (p.buffer >= 0) ins->add_frees_before(p.buffer);
  }
}

proto::Instruction StepInstruction(const Context& ctx) {
  proto::Instruction step;
  step.set_kind(proto::Instruction::OPTIMIZER_STEP);
  step.set_micro_batch(-1);
  const int weights = ctx.config.stage == 3 ? ctx.buf.param_shard : ctx.buf.params;
  step.add_reads(ctx.buf.grads);
  for (int id : {weights, ctx.buf.master}) {
    if (id < 0) continue;
    step.add_reads(id);
    step.add_writes(id);
  }
  for (int id : ctx.buf.states) {
    step.add_reads(id);
    step.add_writes(id);
  }
  return step;
}

void EmitStepTail(const Context& ctx, Stream* stream) {
  // The norm is always reduced (clipping, the metrics and fp16's overflow need it); with fp16 the
  // overflow flag follows from it, as DeepSpeed's has_overflow all-reduce.
  std::vector<proto::Instruction> scalars;
  scalars.push_back(ScalarReduce(ctx, proto::Instruction::GRAD_NORM_REDUCE));
  if (ctx.config.model_dtype == DType::kF16)
    scalars.push_back(ScalarReduce(ctx, proto::Instruction::OVERFLOW_REDUCE));
  WaitAll(&scalars.front(), stream);
  EmitOptimizerSteps(ctx, std::move(scalars), stream);
  if (ctx.config.stage == 1 || ctx.config.stage == 2) EmitShardAllGathers(ctx, stream);
  if (ctx.config.stage == 3) EmitPersistentAllGathers(ctx, stream);
  proto::Instruction loss;
  loss.set_kind(proto::Instruction::LOSS_REDUCE);
  loss.set_mean_over(ctx.config.gradient_accumulation_steps);
  loss.set_micro_batch(-1);
  // The loss, whether the rank has one, and the MoE layers' aux losses' sum and count (0 for a
  // dense model).
  SetCollective(&loss, 4, proto::DT_F32, -1, {});
  WaitAll(&loss, stream);
  stream->Add(std::move(loss));
}

}  // namespace ds::zero::internal
