#include "runtime/worker/checkpoint_slices.h"

#include <algorithm>
#include <map>
#include <set>

#include "parallel/tensor/tp_graph.h"
#include "zero/shard_layout.h"

namespace ds::worker {
namespace {

// Pipeline parallelism: what rank 0 needs to list another stage's slices, from the plan (that
// stage's partition and flat layout) and the whole graph (the parameters' shapes).
struct StageParams {
  proto::Plan layout;  // topology, settings and the stage's partition and model only
  std::vector<zero::ParamSlot> slots;
};

StageParams StageParamsOf(const proto::Plan& plan, int stage, const Graph& whole) {
  StageParams out;
  *out.layout.mutable_topology() = plan.topology();
  *out.layout.mutable_settings() = plan.settings();
  *out.layout.mutable_swap() = plan.swap();
  *out.layout.mutable_partition() = plan.stages(stage).partition();
  *out.layout.mutable_model() = plan.stages(stage).model();
  for (const proto::PlanParam& p : plan.stages(stage).model().params()) {
    zero::ParamSlot s;
    s.name = p.name();
    s.tensor = whole.FindTensor(p.name());
    for (const Dim& d : whole.tensors[s.tensor].shape) s.shape.push_back(d.size);
    s.offset = p.offset();
    s.numel = p.numel();
    out.slots.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::vector<OwnedSlice> SlicesOf(const std::vector<zero::ShardSegment>& segments,
                                 const std::vector<zero::ParamSlot>& slots,
                                 const std::vector<std::string>& states) {
  std::vector<OwnedSlice> out;
  for (const std::string& state : states) {
    for (const zero::ShardSegment& g : segments) {
      auto it = std::upper_bound(
          slots.begin(), slots.end(), g.flat_begin,
          [](int64_t f, const zero::ParamSlot& s) { return f < s.offset + s.numel; });
      for (; it != slots.end() && it->offset < g.flat_begin + g.count; ++it) {
        const int64_t lo = std::max(g.flat_begin, it->offset);
        const int64_t hi = std::min(g.flat_begin + g.count, it->offset + it->numel);
        if (lo >= hi) continue;
        out.push_back({{state, it->name, it->shape, lo - it->offset, hi - lo}, lo, it->offset});
      }
    }
  }
  return out;
}

std::vector<OwnedSlice> ToFullSlices(const std::vector<OwnedSlice>& local,
                                     const std::vector<parallel::TpParamShard>& shards,
                                     const std::vector<zero::ParamSlot>& slots, int tp_rank) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < slots.size(); ++i) index[slots[i].name] = i;
  std::vector<OwnedSlice> out;
  for (const OwnedSlice& o : local) {
    const parallel::TpParamShard& sh = shards[index.at(o.desc.param)];
    if (sh.replicated && tp_rank != 0) continue;
    const int64_t begin = o.desc.begin;
    OwnedSlice* run = nullptr;  // the strided slice the last piece went into
    for (const parallel::FlatPiece& p : parallel::LocalToFull(sh, begin, begin + o.desc.count)) {
      if (p.box->replica) {  // a shared kv head: stored by its first holder
        run = nullptr;
        continue;
      }
      // Next in this rank's memory and in the whole parameter: the same run, longer (a
      // replicated parameter's rows).
      const int64_t next_local =
          run ? run->flat - o.flat + begin + run->desc.rows * run->desc.count : -1;
      if (run != nullptr && run->desc.rows == 1 && p.local == next_local &&
          p.full == run->desc.begin + run->desc.count) {
        run->desc.count += p.count;
        continue;
      }
      // A row of the same width, next in this rank's memory, at a fixed stride in the whole
      // parameter: one more row of the run (a row-parallel weight's rows, one record).
      if (run != nullptr && p.count == run->desc.count && p.local == next_local) {
        const int64_t stride =
            p.full - run->desc.begin - (run->desc.rows - 1) * run->desc.row_stride;
        if (run->desc.rows == 1 ? stride > p.count : stride == run->desc.row_stride) {
          run->desc.row_stride = stride;
          ++run->desc.rows;
          continue;
        }
      }
      OwnedSlice f = o;
      f.desc.param_shape = Shape(sh.full_shape.begin(), sh.full_shape.end());
      f.desc.begin = p.full;
      f.desc.count = p.count;
      f.flat = o.flat + (p.local - begin);
      out.push_back(std::move(f));
      run = &out.back();
    }
  }
  return out;
}

std::vector<std::vector<OwnedSlice>> PipelineSlices(const proto::Plan& plan, const Graph& whole,
                                                    const std::vector<std::string>& states) {
  std::set<std::string> first;
  for (const proto::PlanParam& p : plan.stages(0).model().params()) first.insert(p.name());
  std::vector<StageParams> stages;
  for (int s = 0; s < plan.stages_size(); ++s) stages.push_back(StageParamsOf(plan, s, whole));
  std::vector<std::vector<OwnedSlice>> all;
  for (const proto::RankPlan& rp : plan.ranks()) {
    const StageParams& sp = stages[rp.stage()];
    std::vector<OwnedSlice> mine;
    for (OwnedSlice& o :
         SlicesOf(zero::LayoutFor(sp.layout, rp.rank(), sp.layout.model().flat_elements()).segments,
                  sp.slots, states)) {
      if (rp.stage() > 0 && first.count(o.desc.param)) continue;
      o.param_flat = whole.FindTensor(o.desc.param);
      mine.push_back(std::move(o));
    }
    all.push_back(std::move(mine));
  }
  return all;
}

}  // namespace ds::worker
