// Note [Parameter swapping]: offload_param device nvme at stage 3, ZeRO-Infinity's parameter
// swapper.
//
// The rank's 16-bit parameter shard (its chunks of every unit, in shard order) lives in a swap
// file; in memory it is a sparse buffer whose pages exist only while a unit is on its way to a
// gather or a sub-group's step has just written it. Every chunk starts and ends on kSwapAlign
// elements, so each read and write is whole O_DIRECT pages.
//
// For every GATHER_PARAMS of the stage-3 stream (already prefetched by max_live_parameters and
// prefetch_bucket_size), a SWAP_IN of its units is issued one gather ahead: right after the
// previous gather, so the read overlaps that gather and the compute between them; the gather
// waits for it, copies the chunks out (into the flat parameters, or the all-gather's staging)
// and drops their pages. The parameters one gather moves must fit DeepSpeed's pool of
// buffer_count buffers of buffer_size elements, each unit's chunk within one buffer; a plan that
// needs more is refused, naming the key and the numbers (DeepSpeed users meet "More elements
// than buffer size" only at run time).
//
// After the step, each sub-group's SWAP_OUT writes its 16-bit values back with its states
// (swap_stream.cc). The persistent units' chunks stay in memory: the step tail all-gathers them.
//
// In fp32 the parameter shard is the fp32 master itself, so there is no second file: the master
// is swapped with the optimizer states (one array of each sub-group in optimizer.swp), a unit's
// SWAP_IN reads its chunk from there (split at sub-groups' ends), and a sub-group's step writes
// the persistent units' fresh values back into memory for the step tail's all-gather.
#include <map>
#include <string>
#include <vector>

#include "runtime/core/proto_dtype.h"
#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

int64_t GatherElements(const Context& ctx, const proto::Instruction& in) {
  int64_t n = 0;
  for (int u : in.units()) n += ctx.units[u].chunk;
  return n;
}

}  // namespace

Status CheckParamSwap(const Context& ctx) {
  if (!ctx.config.param_nvme) return OkStatus();
  const std::string key = "zero_optimization.offload_param.";
  if (!ctx.config.optimizer_nvme)
    return InvalidArgumentError(
        key +
        "device nvme needs offload_optimizer device nvme too: the updated 16-bit "
        "parameters are written back with each optimizer sub-group");
  if (ctx.config.param_buffer_count < 1 || ctx.config.param_buffer_size < 1)
    return InvalidArgumentError(key + "buffer_count and buffer_size must be >= 1");
  for (size_t u = 0; u < ctx.units.size(); ++u) {
    const Unit& unit = ctx.units[u];
    if (unit.persistent || unit.chunk <= ctx.config.param_buffer_size) continue;
    std::string names;
    for (const plan::ParamFacts& p : ctx.facts.params)
      if (p.offset >= unit.offset && p.offset < unit.offset + unit.count)
        names += (names.empty() ? "" : ", ") + p.name;
    return InvalidArgumentError(key + "buffer_size " + Str(ctx.config.param_buffer_size) +
                                " elements is smaller than this rank's " + Str(unit.chunk) +
                                "-element chunk of " + names + "; raise it to at least " +
                                Str(unit.chunk));
  }
  return OkStatus();
}

Status InsertParamSwapIns(const Context& ctx, proto::Plan* plan, Stream* stream) {
  if (!ctx.config.param_nvme) return OkStatus();
  const int64_t pool = ctx.config.param_buffer_count * ctx.config.param_buffer_size;
  for (const proto::Instruction& in : stream->list)
    if (in.kind() == proto::Instruction::GATHER_PARAMS && GatherElements(ctx, in) > pool)
      return InvalidArgumentError(
          "zero_optimization.offload_param: a gather of " + Str(GatherElements(ctx, in)) +
          " parameter elements per rank exceeds buffer_count x buffer_size = " + Str(pool) +
          "; raise buffer_count or buffer_size, or lower stage3_prefetch_bucket_size");
  const int64_t esize = static_cast<int64_t>(DTypeSize(ctx.config.model_dtype));
  std::vector<proto::Instruction> old = std::move(stream->list);
  stream->list.clear();
  std::vector<int> gathers;
  for (int i = 0; i < static_cast<int>(old.size()); ++i)
    if (old[i].kind() == proto::Instruction::GATHER_PARAMS) gathers.push_back(i);
  // Swap-in j goes right after gather j - 1 (the first one right before its gather).
  std::multimap<int, int> before;  // old index -> gathers whose swap-in goes before it
  for (size_t j = 0; j < gathers.size(); ++j)
    before.emplace(j == 0 ? gathers[0] : gathers[j - 1] + 1, static_cast<int>(j));
  std::vector<int> moved(old.size(), -1), swap_in(gathers.size(), -1);
  for (int i = 0; i < static_cast<int>(old.size()); ++i) {
    auto [lo, hi] = before.equal_range(i);
    for (auto it = lo; it != hi; ++it) {
      const proto::Instruction& g = old[gathers[it->second]];
      proto::Instruction in;
      in.set_kind(proto::Instruction::SWAP_IN);
      in.set_micro_batch(-1);
      in.mutable_swap()->set_sub_group(-1);
      in.mutable_swap()->set_slot(-1);
      *in.mutable_units() = g.units();
      in.set_async(true);
      in.add_writes(ctx.buf.param_shard);
      // Its pages, from the read to the gather that copies them out.
      proto::PlanBuffer* b = plan->add_buffers();
      b->set_id(plan->buffers_size() - 1);
      b->set_name("param_swap.gather" + Str(it->second));
      b->set_kind(proto::PlanBuffer::SWAP_BUFFER);
      b->set_bytes(GatherElements(ctx, g) * esize);
      b->set_dtype(ToProtoDType(ctx.config.model_dtype));
      in.add_allocs(b->id());
      in.add_writes(b->id());
      old[gathers[it->second]].add_reads(b->id());
      old[gathers[it->second]].add_frees(b->id());
      swap_in[it->second] = stream->Add(std::move(in));
    }
    moved[i] = stream->size();
    stream->Add(std::move(old[i]));
  }
  for (proto::Instruction& in : stream->list) {
    if (in.kind() == proto::Instruction::SWAP_IN && in.swap().sub_group() < 0) continue;
    for (int& w : *in.mutable_wait_for()) w = moved[w];
  }
  for (size_t j = 0; j < gathers.size(); ++j)
    stream->list[moved[gathers[j]]].add_wait_for(swap_in[j]);
  for (Pending& p : stream->pending) p.instruction = moved[p.instruction];
  return OkStatus();
}

}  // namespace ds::zero::internal
