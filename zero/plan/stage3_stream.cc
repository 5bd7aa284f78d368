// Stage 3: parameters are partitioned too. Each block step (forward, then backward in reverse, per
// micro-batch) gathers the units it reads, prefetches ahead, and releases what is not reused soon,
// as DeepSpeed's PartitionedParameterCoordinator does with a complete trace.
// See Note [Plan layout] in plan_builder.cc.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "runtime/base/check.h"
#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

struct Step {
  int mb = 0;
  bool forward = true;
  int pos = 0;             // block position
  std::vector<int> units;  // non-persistent units it reads
};

class Stage3Builder {
 public:
  Stage3Builder(const Context& ctx, Stream* stream) : ctx_(ctx), stream_(stream) {}

  void Build() {
    MakeTrace();
    proto::Instruction zero;
    zero.set_kind(proto::Instruction::ZERO_GRADS);
    zero.set_micro_batch(-1);
    zero.add_writes(ctx_.buf.grads);
    stream_->Add(std::move(zero));
    for (int s = 0; s < static_cast<int>(steps_.size()); ++s) {
      const Step& step = steps_[s];
      if (step.forward && step.pos == 0) {
        proto::Instruction load;
        load.set_kind(proto::Instruction::LOAD_MICROBATCH);
        load.set_micro_batch(step.mb);
        load.add_allocs(ctx_.buf.batch);
        load.add_writes(ctx_.buf.batch);
        stream_->Add(std::move(load));
      }
      Fetch(s);
      Prefetch(s);
      Run(s);
      ReleaseAfter(s);
    }
    DS_CHECK(gathered_.empty(), "stage 3 plan leaves {} units gathered", gathered_.size());
    EmitStepTail(ctx_, stream_);
  }

 private:
  int NumBlocks() const { return static_cast<int>(ctx_.facts.blocks.size()); }
  int64_t Numel(int u) const { return ctx_.units[u].numel; }

  void MakeTrace() {
    const int gas = static_cast<int>(ctx_.config.gradient_accumulation_steps);
    std::vector<std::vector<int>> by_pos(NumBlocks());
    for (int u = 0; u < static_cast<int>(ctx_.units.size()); ++u) {
      if (ctx_.units[u].persistent) continue;
      for (int block : ctx_.units[u].blocks) by_pos[ctx_.facts.BlockPosition(block)].push_back(u);
    }
    for (int mb = 0; mb < gas; ++mb) {
      for (int p = 0; p < NumBlocks(); ++p) steps_.push_back({mb, true, p, by_pos[p]});
      for (int p = NumBlocks() - 1; p >= 0; --p) steps_.push_back({mb, false, p, by_pos[p]});
    }
    uses_.resize(ctx_.units.size());
    prefix_.assign(1, 0);
    for (int s = 0; s < static_cast<int>(steps_.size()); ++s) {
      int64_t n = 0;
      for (int u : steps_[s].units) {
        uses_[u].push_back(s);
        n += Numel(u);
      }
      prefix_.push_back(prefix_.back() + n);
    }
  }

  // The next step after `s` that reads unit `u`; -1 when none.
  int NextUse(int u, int s) const {
    auto it = std::upper_bound(uses_[u].begin(), uses_[u].end(), s);
    return it == uses_[u].end() ? -1 : *it;
  }

  bool Reads(int s, int u) const {
    return std::find(steps_[s].units.begin(), steps_[s].units.end(), u) != steps_[s].units.end();
  }

  // Gathers the units step `s` lacks; first releases held ones, furthest next use first, while the
  // step would not fit under max_live_parameters.
  void Fetch(int s) {
    std::vector<int> need;
    int64_t need_elems = 0;
    for (int u : steps_[s].units)
      if (!gathered_.count(u)) {
        need.push_back(u);
        need_elems += Numel(u);
      }
    if (live_ + need_elems > ctx_.config.max_live_parameters) {
      std::vector<std::pair<int, int>> held;  // (next use, unit)
      for (const auto& [u, idx] : gathered_) {
        if (Reads(s, u)) continue;
        int next = NextUse(u, s);
        held.push_back({next < 0 ? std::numeric_limits<int>::max() : next, u});
      }
      std::sort(held.rbegin(), held.rend());
      std::vector<int> evict;
      int64_t live = live_;
      for (const auto& [next, u] : held) {
        if (live + need_elems <= ctx_.config.max_live_parameters) break;
        evict.push_back(u);
        live -= Numel(u);
      }
      Release(evict);
    }
    Gather(need);
  }

  // Gathers the units of the next steps, in trace order, while the elements gathered ahead stay
  // within prefetch_bucket_size and everything gathered within max_live_parameters.
  void Prefetch(int s) {
    int64_t ahead = 0;
    for (int u : unwaited_)
      if (!Reads(s, u)) ahead += Numel(u);
    std::vector<int> chosen;
    int64_t live = live_;
    for (int t = s + 1; t < static_cast<int>(steps_.size()); ++t)
      for (int u : steps_[t].units) {
        if (gathered_.count(u) || std::count(chosen.begin(), chosen.end(), u)) continue;
        if (ahead + Numel(u) > ctx_.config.prefetch_bucket_size ||
            live + Numel(u) > ctx_.config.max_live_parameters) {
          Gather(chosen);
          return;
        }
        chosen.push_back(u);
        ahead += Numel(u);
        live += Numel(u);
      }
    Gather(chosen);
  }

  // One GATHER_PARAMS per group the units are split over (expert parallelism: the experts'
  // over the ranks holding them).
  void Gather(const std::vector<int>& units) {
    for (bool expert : {false, true}) {
      std::vector<int> group;
      for (int u : units)
        if (ctx_.units[u].expert == expert) group.push_back(u);
      GatherGroup(group, expert);
    }
  }

  // hpZ: a unit's first gather of the step fills its secondary chunk; the later ones read it
  // over the hpz group (failures-zeropp-bf16.md B4: refreshed after every optimizer step).
  void GatherGroup(const std::vector<int>& units, bool expert) {
    if (expert || ctx_.config.hpz_partition_size <= 1) return EmitGather(units, expert, false);
    std::vector<int> first, again;
    for (int u : units) (filled_.insert(u).second ? first : again).push_back(u);
    EmitGather(first, expert, false);
    EmitGather(again, expert, true);
  }

  void EmitGather(const std::vector<int>& units, bool expert, bool secondary) {
    if (units.empty()) return;
    proto::Instruction ins;
    ins.set_kind(secondary ? proto::Instruction::GATHER_SECONDARY
                           : proto::Instruction::GATHER_PARAMS);
    ins.set_micro_batch(-1);
    int64_t per_rank = 0;
    for (int u : units) {
      ins.add_units(u);
      proto::ParamRange* r = ins.add_ranges();
      r->set_offset(ctx_.units[u].offset);
      r->set_count(ctx_.units[u].count);
      per_rank += secondary ? ctx_.units[u].secondary_chunk : ctx_.units[u].chunk;
      ins.add_allocs(ctx_.buf.gathers[u]);
      ins.add_writes(ctx_.buf.gathers[u]);
    }
    const int n = secondary ? ctx_.config.hpz_partition_size : GroupSize(expert, ctx_.dp, ctx_.ep);
    SetCollective(&ins, per_rank * n, ctx_.model_dtype, -1, std::vector<int64_t>(n, per_rank),
                  expert);
    if (secondary) ins.mutable_collective()->set_group(kHpzGroup);
    ins.add_reads(secondary ? ctx_.buf.secondary : ctx_.buf.param_shard);
    if (ctx_.buf.secondary >= 0 && !secondary && !expert) {
      ins.set_fill_secondary(true);
      ins.add_writes(ctx_.buf.secondary);
    }
    if (ctx_.config.quantized_weight_bits > 0)
      *ins.mutable_quantize() = WeightQuantization(ctx_.config);
    ins.set_async(true);
    const int idx = stream_->size();
    for (int u : units) {
      gathered_[u] = idx;
      unwaited_.insert(u);
      live_ += Numel(u);
    }
    stream_->Add(std::move(ins));
  }

  void Release(const std::vector<int>& units) {
    if (units.empty()) return;
    proto::Instruction ins;
    ins.set_kind(proto::Instruction::RELEASE_PARAMS);
    ins.set_micro_batch(-1);
    for (int u : units) {
      ins.add_units(u);
      proto::ParamRange* r = ins.add_ranges();
      r->set_offset(ctx_.units[u].offset);
      r->set_count(ctx_.units[u].count);
      ins.add_frees(ctx_.buf.gathers[u]);
      if (unwaited_.erase(u)) ins.add_wait_for(gathered_[u]);
      gathered_.erase(u);
      live_ -= Numel(u);
    }
    stream_->Add(std::move(ins));
  }

  // The FORWARD or BACKWARD of one block, then (backward) the buckets it completes.
  void Run(int s) {
    const Step& step = steps_[s];
    const auto kind = step.forward ? proto::Instruction::FORWARD : proto::Instruction::BACKWARD;
    proto::Instruction ins = Compute(ctx_, kind, step.mb, step.pos, step.pos);
    std::set<int> waits;
    for (int u : step.units) {
      if (unwaited_.erase(u)) waits.insert(gathered_[u]);
      ins.add_reads(ctx_.buf.gathers[u]);
    }
    for (int w : waits) ins.add_wait_for(w);
    if (ctx_.buf.params >= 0) ins.add_reads(ctx_.buf.params);
    ins.add_reads(ctx_.buf.batch);
    const int act = ctx_.buf.activations[step.pos];
    if (step.forward) {
      ins.add_allocs(act);
      ins.add_writes(act);
      stream_->Add(std::move(ins));
      return;
    }
    ins.add_reads(act);
    ins.add_frees(act);
    if (step.pos == 0) ins.add_frees(ctx_.buf.batch);
    const int bwd = NumBlocks() - 1 - step.pos;
    for (int b = 0; b < static_cast<int>(ctx_.buckets.size()); ++b) {
      const Bucket& bucket = ctx_.buckets[b];
      if (bucket.open_pos > bwd || bucket.ready_pos < bwd) continue;
      if (bucket.open_pos == bwd) {
        WaitForBucketSlot(ctx_.buf.buckets[b], &ins, stream_);
        ins.add_allocs(ctx_.buf.buckets[b]);
      }
      ins.add_writes(ctx_.buf.buckets[b]);
    }
    stream_->Add(std::move(ins));
    for (int b = 0; b < static_cast<int>(ctx_.buckets.size()); ++b)
      if (ctx_.buckets[b].ready_pos == bwd) EmitReduce(ctx_, b, stream_);
  }

  // Releases the units of step `s` that no step reads again within max_reuse_distance elements.
  void ReleaseAfter(int s) {
    std::vector<int> release;
    for (int u : steps_[s].units) {
      const int next = NextUse(u, s);
      if (next < 0 || prefix_[next] - prefix_[s + 1] > ctx_.config.max_reuse_distance)
        release.push_back(u);
    }
    Release(release);
  }

  const Context& ctx_;
  Stream* stream_;
  std::vector<Step> steps_;
  std::vector<int64_t> prefix_;         // prefix_[s]: elements read by steps before s
  std::vector<std::vector<int>> uses_;  // per unit: the steps that read it, ascending
  std::map<int, int> gathered_;         // unit -> its GATHER_PARAMS instruction
  std::set<int> unwaited_;              // gathered units no instruction has waited for yet
  std::set<int> filled_;                // hpZ: units whose secondary chunk the step has kept
  int64_t live_ = 0;                    // gathered parameter elements
};

}  // namespace

void BuildStage3Stream(const Context& ctx, Stream* stream) { Stage3Builder(ctx, stream).Build(); }

}  // namespace ds::zero::internal
