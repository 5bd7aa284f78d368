#include "runtime/plan/recompute_plan.h"

#include <string>

#include "runtime/plan/node_range.h"

namespace ds::plan {
namespace {

using Ins = proto::Instruction;

// BACKWARD `in` with the recompute of every segment whose point lies in (begin, end], highest
// first: backward [point, end), RECOMPUTE, backward [.., point). The waits and allocations go
// with the first instruction, the frees with the last.
void Cut(const Graph& g, const Ins& in, const std::vector<const RecomputeSegment*>& at,
         std::vector<Ins>* out) {
  const size_t first = out->size();
  int end = in.node_end();
  for (const RecomputeSegment* s : at) {
    if (s->point < end) {
      Ins part = in;
      SetNodeRange(g, s->point, end, &part);
      part.set_computes_loss(in.computes_loss() && end == in.node_end());
      out->push_back(std::move(part));
      end = s->point;
    }
    Ins re;
    re.set_kind(Ins::RECOMPUTE);
    re.set_micro_batch(in.micro_batch());
    SetNodeRange(g, s->node_begin, s->node_end, &re);
    *re.mutable_reads() = in.reads();
    out->push_back(std::move(re));
  }
  if (end > in.node_begin()) {
    Ins part = in;
    SetNodeRange(g, in.node_begin(), end, &part);
    part.set_computes_loss(in.computes_loss() && end == in.node_end());
    out->push_back(std::move(part));
  }
  for (size_t i = first; i < out->size(); ++i) {
    Ins& x = (*out)[i];
    x.clear_allocs();
    x.clear_frees();
    if (i != first) {
      x.clear_wait_for();
      x.clear_frees_before();
    }
  }
  *(*out)[first].mutable_allocs() = in.allocs();
  *(*out)[first].mutable_wait_for() = in.wait_for();
  *(*out)[first].mutable_frees_before() = in.frees_before();
  *out->back().mutable_frees() = in.frees();
}

}  // namespace

Status InsertRecompute(const Graph& graph, const std::vector<RecomputeSegment>& segments,
                       proto::Plan* plan) {
  if (segments.empty()) return OkStatus();
  const int gas = static_cast<int>(plan->settings().gradient_accumulation_steps());
  for (proto::RankPlan& rp : *plan->mutable_ranks()) {
    std::vector<Ins> out;
    std::vector<int> moved(rp.instructions_size(), -1);
    std::vector<int> placed(segments.size(), 0);
    for (int i = 0; i < rp.instructions_size(); ++i) {
      const Ins& in = rp.instructions(i);
      std::vector<const RecomputeSegment*> at;  // highest point first
      if (in.kind() == Ins::BACKWARD)
        for (int s = static_cast<int>(segments.size()) - 1; s >= 0; --s)
          if (segments[s].point > in.node_begin() && segments[s].point <= in.node_end()) {
            at.push_back(&segments[s]);
            ++placed[s];
          }
      if (at.empty()) {
        moved[i] = static_cast<int>(out.size());
        out.push_back(in);
        continue;
      }
      Cut(graph, in, at, &out);
      moved[i] = static_cast<int>(out.size()) - 1;
    }
    for (size_t s = 0; s < segments.size(); ++s)
      if (placed[s] != gas)
        return InternalError(
            "plan: the recompute of nodes [" + std::to_string(segments[s].node_begin) + ", " +
            std::to_string(segments[s].node_end) + ") fell in " + std::to_string(placed[s]) +
            " backward ranges for " + std::to_string(gas) + " micro-batches");
    for (Ins& in : out)
      for (int& w : *in.mutable_wait_for()) w = moved.at(w);
    rp.clear_instructions();
    for (Ins& in : out) *rp.add_instructions() = std::move(in);
  }
  return OkStatus();
}

}  // namespace ds::plan
