#include "runtime/plan/pipe_merge.h"

#include <string>

#include "runtime/base/status_macros.h"

namespace ds::plan {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

bool IsActCollective(const Ins& in) {
  return in.kind() == Ins::ACT_ALL_REDUCE || in.kind() == Ins::ACT_ALL_GATHER ||
         in.kind() == Ins::ACT_REDUCE_SCATTER;
}

// BACKWARD, or either half of a split one (zb-h1).
bool IsBackward(const Ins& in) {
  return in.kind() == Ins::BACKWARD || in.kind() == Ins::BACKWARD_INPUT ||
         in.kind() == Ins::BACKWARD_WEIGHT;
}

// D cut at its micro-batches: per micro-batch its LOAD, forward group (FORWARD ranges and the
// tp collectives between them), backward group (BACKWARD ranges and collectives) and what
// follows up to the next LOAD.
struct ZeroStream {
  std::vector<int> prefix, load;
  std::vector<std::vector<int>> forward, backward, post;
};

Status Bad(int mb, const std::string& what) {
  return InternalError("plan: a pipeline stage's ZeRO stream " + what + " (micro-batch " + Str(mb) +
                       ")");
}

StatusOr<ZeroStream> Cut(const proto::RankPlan& d, int m) {
  ZeroStream z;
  z.forward.resize(m);
  z.backward.resize(m);
  z.post.resize(m);
  const auto& list = d.instructions();
  const int n = list.size();
  int i = 0;
  for (; i < n && list[i].kind() != Ins::LOAD_MICROBATCH; ++i) z.prefix.push_back(i);
  auto of = [&](int k, int mb) { return k < n && list[k].micro_batch() == mb; };
  for (int mb = 0; mb < m; ++mb) {
    if (!of(i, mb) || list[i].kind() != Ins::LOAD_MICROBATCH) return Bad(mb, "has no LOAD");
    z.load.push_back(i++);
    for (; of(i, mb) && (list[i].kind() == Ins::FORWARD || IsActCollective(list[i])); ++i)
      z.forward[mb].push_back(i);
    for (; of(i, mb) && (list[i].kind() == Ins::BACKWARD || IsActCollective(list[i])); ++i)
      z.backward[mb].push_back(i);
    if (z.forward[mb].empty() || list[z.forward[mb][0]].kind() != Ins::FORWARD ||
        z.backward[mb].empty() || list[z.backward[mb][0]].kind() != Ins::BACKWARD ||
        list[z.backward[mb].back()].kind() != Ins::BACKWARD)
      return Bad(mb, "is not a LOAD, forward ranges and backward ranges");
    for (; i < n && list[i].kind() != Ins::LOAD_MICROBATCH; ++i) {
      const Ins::Kind k = list[i].kind();
      if (k == Ins::FORWARD || k == Ins::BACKWARD || k == Ins::RECOMPUTE ||
          k == Ins::GATHER_PARAMS || IsActCollective(list[i]))
        return Bad(mb, "has " + Ins::Kind_Name(k) + " after its backward");
      z.post[mb].push_back(i);
    }
  }
  return z;
}

class Merger {
 public:
  explicit Merger(const StageStreams& in) : in_(in), d_(in.zero->instructions()) {}

  StatusOr<std::vector<Ins>> Run(int m) {
    DS_ASSIGN_OR_RETURN(z_, Cut(*in_.zero, m));
    from_d_.assign(d_.size(), -1);
    for (int i : z_.prefix) EmitD(d_[i], i);
    const std::vector<Ins>& s = *in_.pipe;
    // Per micro-batch, the schedule's first forward and first and last backward (one per
    // chunk): D's buffers and waits go on the first, its reductions after the last.
    std::vector<int> first_fwd(m, -1), first_bwd(m, -1), last_bwd(m, -1);
    for (int k = 0; k < static_cast<int>(s.size()); ++k) {
      const int mb = s[k].micro_batch();
      if (s[k].kind() == Ins::FORWARD && first_fwd.at(mb) < 0) first_fwd[mb] = k;
      if (!IsBackward(s[k])) continue;
      if (first_bwd.at(mb) < 0) first_bwd[mb] = k;  // zb-h1: the input half
      last_bwd[mb] = last_backward_ = k;            // zb-h1: the weight half
    }
    from_s_.assign(s.size(), -1);
    for (int k = 0; k < static_cast<int>(s.size()); ++k) {
      Ins x = s[k];
      for (int& w : *x.mutable_wait_for()) w = from_s_.at(w);
      const int mb = x.micro_batch();
      if (IsBackward(x))  // dL/dloss over the global batch: gas x dp
        x.set_mean_over(d_[z_.backward.at(mb)[0]].mean_over());
      if (x.kind() == Ins::LOAD_MICROBATCH)
        Place(x, {z_.load.at(mb)}, k, /*first_acts=*/!loaded_);
      else if (x.kind() == Ins::FORWARD && k == first_fwd[mb])
        Place(x, z_.forward.at(mb), k, !forwarded_);
      else if (IsBackward(x) && k == first_bwd[mb])
        Place(x, z_.backward.at(mb), k, false);
      else
        Emit(std::move(x), k);
      loaded_ = loaded_ || s[k].kind() == Ins::LOAD_MICROBATCH;
      forwarded_ = forwarded_ || s[k].kind() == Ins::FORWARD;
      if (k == last_bwd[mb] && mb < m - 1)
        for (int i : z_.post[mb]) EmitD(d_[i], i);
    }
    if (in_.tied) out_.push_back(*in_.tied);
    for (int i : z_.post[m - 1]) EmitD(d_[i], i);
    return std::move(out_);
  }

 private:
  int Size() const { return static_cast<int>(out_.size()); }
  bool PerMicro(int id) const { return in_.activation_buffers.count(id) > 0; }

  void EmitD(Ins x, int i) {
    for (int& w : *x.mutable_wait_for()) w = from_d_.at(w);
    from_d_[i] = Size();
    out_.push_back(std::move(x));
  }
  void Emit(Ins x, int k) {
    if (k == last_backward_)
      for (int id : in_.activation_buffers) x.add_frees(id);
    from_s_[k] = Size();
    out_.push_back(std::move(x));
  }
  // Per-micro-batch buffers: allocated once (by the step's first LOAD / FORWARD), freed by the
  // last BACKWARD.
  void KeepStepBuffers(bool first_acts, Ins* y) const {
    auto allocs = y->allocs();
    y->clear_allocs();
    for (int id : allocs)
      if (!PerMicro(id) || first_acts) y->add_allocs(id);
    auto frees = y->frees();
    y->clear_frees();
    for (int id : frees)
      if (!PerMicro(id)) y->add_frees(id);
  }

  // S's compute instruction `x` (index k) for D's `group`: one D instruction takes S's place
  // with D's buffers and waits on it; several (tensor-parallel ranges) run in its place, on its
  // chunk and slot.
  void Place(Ins x, const std::vector<int>& group, int k, bool first_acts) {
    if (group.size() == 1) {
      const Ins& d = d_[group[0]];
      for (int id : d.reads()) x.add_reads(id);
      for (int id : d.writes()) x.add_writes(id);
      for (int id : d.allocs()) x.add_allocs(id);
      for (int id : d.frees()) x.add_frees(id);
      for (int id : d.frees_before()) x.add_frees_before(id);
      for (int w : d.wait_for()) x.add_wait_for(from_d_.at(w));
      KeepStepBuffers(first_acts, &x);
      from_d_[group[0]] = Size();
      Emit(std::move(x), k);
      return;
    }
    for (size_t j = 0; j < group.size(); ++j) {
      Ins y = d_[group[j]];
      for (int& w : *y.mutable_wait_for()) w = from_d_.at(w);
      if (j == 0)
        for (int w : x.wait_for()) y.add_wait_for(w);
      y.set_chunk(x.chunk());
      y.set_slot(x.slot());
      if (y.kind() == Ins::BACKWARD) y.set_kind(x.kind());  // zb-h1: its input half
      if (y.kind() == Ins::FORWARD) y.set_computes_loss(y.computes_loss() && x.computes_loss());
      KeepStepBuffers(first_acts, &y);
      from_d_[group[j]] = Size();
      if (j + 1 == group.size()) {
        Emit(std::move(y), k);
      } else {
        out_.push_back(std::move(y));
      }
    }
  }

  const StageStreams& in_;
  const google::protobuf::RepeatedPtrField<Ins>& d_;
  ZeroStream z_;
  std::vector<int> from_d_, from_s_;
  std::vector<Ins> out_;
  int last_backward_ = -1;
  bool loaded_ = false, forwarded_ = false;
};

}  // namespace

StatusOr<std::vector<proto::Instruction>> MergeStageStream(const StageStreams& in,
                                                           int micro_batches) {
  return Merger(in).Run(micro_batches);
}

}  // namespace ds::plan
