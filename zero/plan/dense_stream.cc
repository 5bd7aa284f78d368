// Stages 0-2: every rank holds all parameters; one FORWARD over all blocks per micro-batch and a
// BACKWARD cut where gradient buckets become ready, with the reductions in between.
// See Note [Plan layout] in plan_builder.cc.
#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

int NumBlocks(const Context& ctx) { return static_cast<int>(ctx.facts.blocks.size()); }

proto::Instruction LoadMicrobatch(const Context& ctx, int mb) {
  proto::Instruction ins;
  ins.set_kind(proto::Instruction::LOAD_MICROBATCH);
  ins.set_micro_batch(mb);
  ins.add_allocs(ctx.buf.batch);
  ins.add_writes(ctx.buf.batch);
  return ins;
}

proto::Instruction ForwardAll(const Context& ctx, int mb) {
  proto::Instruction ins = Compute(ctx, proto::Instruction::FORWARD, mb, 0, NumBlocks(ctx) - 1);
  ins.add_reads(ctx.buf.params);
  ins.add_reads(ctx.buf.batch);
  for (int id : ctx.buf.activations) {
    ins.add_allocs(id);
    ins.add_writes(id);
  }
  return ins;
}

// BACKWARD over backward positions [from, to]; frees their activations (and the micro-batch when it
// reaches the first block) and opens the buckets first written there.
proto::Instruction BackwardSegment(const Context& ctx, int mb, int from, int to, Stream* stream) {
  const int lo = BackwardPosToBlockPos(ctx, to), hi = BackwardPosToBlockPos(ctx, from);
  proto::Instruction ins = Compute(ctx, proto::Instruction::BACKWARD, mb, lo, hi);
  ins.add_reads(ctx.buf.params);
  ins.add_reads(ctx.buf.batch);
  for (int p = lo; p <= hi; ++p) {
    ins.add_reads(ctx.buf.activations[p]);
    ins.add_frees(ctx.buf.activations[p]);
  }
  if (lo == 0) ins.add_frees(ctx.buf.batch);
  if (ctx.config.stage < 2) {
    ins.add_writes(ctx.buf.grads);
    return ins;
  }
  for (int b = 0; b < static_cast<int>(ctx.buckets.size()); ++b) {
    const Bucket& bucket = ctx.buckets[b];
    if (bucket.open_pos > to || bucket.ready_pos < from) continue;
    if (bucket.open_pos >= from) {
      WaitForBucketSlot(ctx.buf.buckets[b], &ins, stream);
      ins.add_allocs(ctx.buf.buckets[b]);
    }
    ins.add_writes(ctx.buf.buckets[b]);
  }
  return ins;
}

// The backward of one micro-batch, cut after each position where a bucket becomes ready, each ready
// bucket reduced right after its cut.
void SplitBackward(const Context& ctx, int mb, Stream* stream) {
  const int n = NumBlocks(ctx);
  size_t next = 0;  // next bucket to reduce (buckets are ready in order)
  int from = 0;
  for (int pos = 0; pos < n; ++pos) {
    bool cut = pos == n - 1;
    if (next < ctx.buckets.size() && ctx.buckets[next].ready_pos == pos) cut = true;
    if (!cut) continue;
    stream->Add(BackwardSegment(ctx, mb, from, pos, stream));
    while (next < ctx.buckets.size() && ctx.buckets[next].ready_pos == pos)
      EmitReduce(ctx, static_cast<int>(next++), stream);
    from = pos + 1;
  }
}

}  // namespace

void BuildDenseStream(const Context& ctx, Stream* stream) {
  const int gas = static_cast<int>(ctx.config.gradient_accumulation_steps);
  const int stage = ctx.config.stage;
  proto::Instruction zero;
  zero.set_kind(proto::Instruction::ZERO_GRADS);
  zero.set_micro_batch(-1);
  zero.add_writes(ctx.buf.grads);
  stream->Add(std::move(zero));
  for (int mb = 0; mb < gas; ++mb) {
    const bool last = mb == gas - 1;
    stream->Add(LoadMicrobatch(ctx, mb));
    stream->Add(ForwardAll(ctx, mb));
    if (ctx.config.whole_backward) {  // a pipeline stage's: reductions after the backward
      stream->Add(BackwardSegment(ctx, mb, 0, NumBlocks(ctx) - 1, stream));
      if (stage == 2 || last)
        for (int b = 0; b < static_cast<int>(ctx.buckets.size()); ++b) EmitReduce(ctx, b, stream);
      continue;
    }
    // Stage 2 keeps no full gradients, so it reduces every micro-batch as the buckets fill; stages
    // 0-1 accumulate full gradients and reduce once, overlapped with the last backward when
    // overlap_comm is on.
    if (stage == 2 || (last && ctx.config.overlap_comm)) {
      SplitBackward(ctx, mb, stream);
      continue;
    }
    stream->Add(BackwardSegment(ctx, mb, 0, NumBlocks(ctx) - 1, stream));
    if (last)
      for (int b = 0; b < static_cast<int>(ctx.buckets.size()); ++b) EmitReduce(ctx, b, stream);
  }
  EmitStepTail(ctx, stream);
}

}  // namespace ds::zero::internal
