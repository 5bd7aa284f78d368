// Placement: where every instruction's data lives and what its collectives stage, decided once
// here so that the step runner decides nothing (Note [Placement] in zero/README.md).
#include <algorithm>
#include <map>
#include <string>

#include "runtime/core/proto_dtype.h"
#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

using proto::Instruction;

proto::Placement StatesPlacement(const Context& ctx) {
  return ctx.config.states_on_device ? proto::DEVICE : proto::HOST;
}

bool IsCollective(Instruction::Kind k) {
  return k == Instruction::ALL_REDUCE || k == Instruction::REDUCE_SCATTER ||
         k == Instruction::GATHER_PARAMS || k == Instruction::ALL_GATHER ||
         k == Instruction::GATHER_SECONDARY;
}

// Bytes of the packed input and output of collective `ins` (0: none, it works in place). The
// same on host and device memory: reductions pack in the comm dtype, gathers in the model's.
// The ranks collective `ins` runs over: the dp group, the edp group of the experts' units, or
// hpZ's group.
int GroupRanks(const Context& ctx, const Instruction& ins) {
  if (ins.kind() == Instruction::GATHER_SECONDARY) return ctx.config.hpz_partition_size;
  return GroupSize(ins.collective().group() == kEdpGroup, ctx.dp, ctx.ep);
}

std::pair<int64_t, int64_t> StagingBytes(const Context& ctx, const Instruction& ins) {
  const int64_t dp = GroupRanks(ctx, ins), c = ProtoDTypeSize(ctx.comm_dtype),
                t = ProtoDTypeSize(ctx.model_dtype);
  const bool secondary = ins.kind() == Instruction::GATHER_SECONDARY;
  int64_t per_rank = 0;
  for (int u : ins.units())
    per_rank += secondary ? ctx.units[u].secondary_chunk : ctx.units[u].chunk;
  const bool reduce =
      ins.kind() == Instruction::ALL_REDUCE || ins.kind() == Instruction::REDUCE_SCATTER;
  if (reduce && ins.units_size() > 0 && ins.quantize().bits() > 0)
    return ReduceStagingBytes(
        per_rank, dp, ins.collective().hierarchy_size() > 1 ? ctx.config.hpz_partition_size : dp,
        ins.quantize());
  if (reduce && ins.units_size() > 0) return {per_rank * dp * c, per_rank * c};
  if (ins.units_size() > 0) return GatherStagingBytes(per_rank, dp, t, ins.quantize());
  const int64_t n = ins.ranges(0).count();
  if (reduce) {
    const int64_t in = ctx.comm_dtype != ctx.model_dtype ? n * c : 0;
    int64_t most = 1;
    for (int64_t k : ins.collective().rank_counts()) most = std::max(most, k);
    return {in, ins.kind() == Instruction::REDUCE_SCATTER ? most * c : 0};
  }
  return {n * t, n * dp * t};  // the shard all-gather: each rank's slice, then all of them
}

int AddStaging(proto::Plan* plan, const std::string& name, int64_t bytes, bool device) {
  proto::PlanBuffer* b = plan->add_buffers();
  b->set_id(plan->buffers_size() - 1);
  b->set_name(name);
  b->set_kind(proto::PlanBuffer::COMM_STAGING);
  b->set_bytes(bytes);
  b->set_dtype(proto::DT_INVALID);
  b->set_device(device);
  return b->id();
}

// Each async instruction's staging is released at the first instruction that waits for it;
// one that nothing waits for is waited for by the last instruction.
void ReleaseStaging(std::vector<Instruction>* list) {
  std::map<int, int> waiter;
  for (int j = 0; j < static_cast<int>(list->size()); ++j)
    for (int w : (*list)[j].wait_for()) waiter.emplace(w, j);
  for (int i = 0; i < static_cast<int>(list->size()); ++i) {
    Instruction& ins = (*list)[i];
    if (!ins.has_collective()) continue;
    std::vector<int> ids;
    for (int id : {ins.collective().staging_in(), ins.collective().staging_out()})
      if (id >= 0) ids.push_back(id);
    if (!ins.async()) {
      for (int id : ids) ins.add_frees(id);
      continue;
    }
    auto it = waiter.find(i);
    Instruction& at = it != waiter.end() ? (*list)[it->second] : list->back();
    if (it == waiter.end()) at.add_wait_for(i);
    for (int id : ids) at.add_frees_before(id);
  }
}

}  // namespace

proto::Placement CollectivePlacement(const Context& ctx) {
  if (ctx.dp == 1) return proto::LOCAL;
  if (!ctx.config.states_on_device) return proto::HOST;
  if (ctx.config.stage == 3) return proto::DEVICE;  // MakePlan checks it can
  return ctx.config.device_collectives && ctx.comm_dtype == ctx.model_dtype ? proto::DEVICE
                                                                            : proto::STAGED;
}

void PlaceInstructions(const Context& ctx, proto::Plan* plan, Stream* stream) {
  const proto::Placement states = StatesPlacement(ctx), comm = CollectivePlacement(ctx);
  int staged = 0;
  for (Instruction& ins : stream->list) {
    const Instruction::Kind k = ins.kind();
    ins.set_placement(states);
    if (k == Instruction::ZERO_GRADS && comm == proto::STAGED && ctx.config.stage == 2)
      ins.set_placement(proto::STAGED);  // the host's gradient shard accumulates too
    if (k == Instruction::LOSS_REDUCE) ins.set_placement(proto::HOST);
    if (k == Instruction::GRAD_NORM_REDUCE || k == Instruction::OVERFLOW_REDUCE ||
        k == Instruction::LOSS_REDUCE)  // scalars on the host communicator
      ins.mutable_collective()->set_placement(ctx.dp == 1 ? proto::LOCAL : proto::HOST);
    if (k == Instruction::GRAD_NORM_REDUCE) ins.set_in_shard(ctx.config.stage >= 2);
    if (ins.has_collective()) {  // ids: 0 is a buffer
      ins.mutable_collective()->set_staging_in(-1);
      ins.mutable_collective()->set_staging_out(-1);
    }
    if (!IsCollective(k)) continue;
    if (k == Instruction::ALL_REDUCE || k == Instruction::REDUCE_SCATTER)
      ins.set_in_shard(ctx.config.stage >= 2);
    proto::Collective* c = ins.mutable_collective();
    c->set_placement(GroupRanks(ctx, ins) == 1 ? proto::LOCAL : comm);
    if (c->placement() == proto::LOCAL) continue;
    const auto [in, out] = StagingBytes(ctx, ins);
    const std::string name = "staging." + std::to_string(staged++);
    if (in > 0) c->set_staging_in(AddStaging(plan, name + ".in", in, comm == proto::DEVICE));
    if (out > 0) c->set_staging_out(AddStaging(plan, name + ".out", out, comm == proto::DEVICE));
    for (int id : {c->staging_in(), c->staging_out()})
      if (id >= 0) ins.add_allocs(id);
  }
  ReleaseStaging(&stream->list);
}

// Note [Staging copies]: a STAGED reduction copies its bucket's gradients to the host first;
// after it, stages 0-1 copy back what the reduction wrote (all of the bucket, or this rank's
// reduce-scatter part), stage 2 copies the bucket's owned part of the host gradient shard and
// zeroes the device's bucket. A STAGED shard all-gather copies this rank's updated slice to
// the host first and all the parameters back after.
void SetStagingCopies(const Context& ctx, int rank, Instruction* ins) {
  if (!ins->has_collective() || ins->collective().placement() != proto::STAGED) return;
  proto::Collective* c = ins->mutable_collective();
  c->clear_staging();
  auto copy = [c](proto::StagingCopy::What what, bool to_host, int64_t offset, int64_t count) {
    if (count <= 0) return;
    proto::StagingCopy* s = c->add_staging();
    s->set_what(what);
    s->set_to_host(to_host);
    s->set_offset(offset);
    s->set_count(count);
  };
  const int64_t flat = ctx.facts.flat_elements;
  if (ins->kind() == Instruction::ALL_GATHER) {
    const int64_t lo = ins->ranges(rank).offset();
    copy(proto::StagingCopy::PARAMS, true, lo, std::min(ins->ranges(rank).count(), flat - lo));
    copy(proto::StagingCopy::PARAMS, false, 0, flat);
    return;
  }
  const int64_t lo = ins->ranges(0).offset(), n = ins->ranges(0).count();
  copy(proto::StagingCopy::GRADS, true, lo, n);
  if (ctx.config.stage >= 2) {
    const Unit& u = ctx.units.front();
    const int64_t own_lo = u.offset + rank * u.chunk;
    const int64_t own_hi = std::min({u.offset + u.count, own_lo + u.chunk, flat});
    const int64_t a = std::max(lo, own_lo), b = std::min(lo + n, own_hi);
    copy(proto::StagingCopy::GRAD_SHARD, false, a, b - a);
    copy(proto::StagingCopy::ZERO_GRADS, false, lo, n);
    return;
  }
  int64_t back_lo = lo, back_n = n;
  if (ins->kind() == Instruction::REDUCE_SCATTER) {
    back_n = c->rank_counts(rank);
    for (int k = 0; k < rank; ++k) back_lo += c->rank_counts(k);
  }
  copy(proto::StagingCopy::GRADS, false, back_lo, back_n);
}

}  // namespace ds::zero::internal
