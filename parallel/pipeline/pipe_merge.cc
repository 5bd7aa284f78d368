#include "parallel/pipeline/pipe_merge.h"

#include <set>
#include <string>
#include <utility>

#include "parallel/pipeline/chunk_split.h"
#include "runtime/base/status_macros.h"

namespace ds::parallel {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

bool IsActCollective(const Ins& in) {
  return in.kind() == Ins::ACT_ALL_REDUCE || in.kind() == Ins::ACT_ALL_GATHER ||
         in.kind() == Ins::ACT_REDUCE_SCATTER || in.kind() == Ins::ACT_ALL_TO_ALL;
}

// What a micro-batch's forward group holds: FORWARD ranges, the tp (and ep) collectives between
// them and the stashes of partitioned checkpoints (partition_activations).
bool InForwardGroup(const Ins& in) {
  return in.kind() == Ins::FORWARD || IsActCollective(in) || in.kind() == Ins::CHECKPOINT_STASH;
}

// And its backward group: BACKWARD ranges, the recomputes between them (training.recompute)
// with their checkpoints' restores, and the tp collectives.
bool InBackwardGroup(const Ins& in) {
  return in.kind() == Ins::BACKWARD || in.kind() == Ins::RECOMPUTE || IsActCollective(in) ||
         in.kind() == Ins::CHECKPOINT_RESTORE || in.kind() == Ins::CHECKPOINT_RELOAD;
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
    for (; of(i, mb) && InForwardGroup(list[i]); ++i) z.forward[mb].push_back(i);
    for (; of(i, mb) && InBackwardGroup(list[i]); ++i) z.backward[mb].push_back(i);
    if (z.forward[mb].empty() || list[z.forward[mb][0]].kind() != Ins::FORWARD ||
        z.backward[mb].empty() || list[z.backward[mb].back()].kind() != Ins::BACKWARD)
      return Bad(mb, "is not a LOAD, forward ranges and backward ranges");
    for (; i < n && list[i].kind() != Ins::LOAD_MICROBATCH; ++i) {
      const Ins::Kind k = list[i].kind();
      if (InForwardGroup(list[i]) || InBackwardGroup(list[i]) || k == Ins::GATHER_PARAMS)
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
    DS_RETURN_IF_ERROR(SplitGroups(m));
    from_d_.assign(d_.size(), -1);
    for (int i : z_.prefix) DS_RETURN_IF_ERROR(EmitD(d_[i], i));
    const std::vector<Ins>& s = *in_.pipe;
    // Per micro-batch and chunk, the schedule's first forward and first backward: D's groups'
    // pieces of that chunk go there. Per micro-batch, its last backward: D's reductions follow.
    std::set<std::pair<int, int>> forwarded, backwarded;
    std::vector<int> last_bwd(m, -1);
    for (int k = 0; k < static_cast<int>(s.size()); ++k)
      if (IsBackward(s[k])) last_bwd.at(s[k].micro_batch()) = last_backward_ = k;
    from_s_.assign(s.size(), -1);
    for (int k = 0; k < static_cast<int>(s.size()); ++k) {
      Ins x = s[k];
      for (int& w : *x.mutable_wait_for()) w = from_s_.at(w);
      const int mb = x.micro_batch();
      const std::pair<int, int> at{mb, x.chunk()};
      if (IsBackward(x)) x.set_mean_over(mean_over_.at(mb));  // dL/dloss: gas x dp
      if (x.kind() == Ins::LOAD_MICROBATCH) {
        DS_RETURN_IF_ERROR(Place(x, {{d_[z_.load.at(mb)], z_.load[mb]}}, k, !loaded_));
      } else if (x.kind() == Ins::FORWARD && forwarded.insert(at).second) {
        DS_RETURN_IF_ERROR(Place(x, Pieces(fwd_, mb, x.chunk()), k, !forwarded_));
      } else if (IsBackward(x) && backwarded.insert(at).second) {  // zb-h1: the input half
        DS_RETURN_IF_ERROR(Place(x, Pieces(bwd_, mb, x.chunk()), k, false));
      } else {
        Emit(std::move(x), k);
      }
      loaded_ = loaded_ || s[k].kind() == Ins::LOAD_MICROBATCH;
      forwarded_ = forwarded_ || s[k].kind() == Ins::FORWARD;
      if (k == last_bwd[mb] && mb < m - 1)
        for (int i : z_.post[mb]) DS_RETURN_IF_ERROR(EmitD(d_[i], i));
    }
    if (in_.tied && !in_.tied_after_reductions) out_.push_back(*in_.tied);
    bool tied = in_.tied && in_.tied_after_reductions;
    for (int i : z_.post[m - 1]) {
      Ins x = d_[i];
      if (tied && x.kind() == Ins::GRAD_NORM_REDUCE) {  // the shards are whole: sum them
        Ins t = *in_.tied;
        *t.mutable_wait_for() = x.wait_for();
        *t.mutable_frees_before() = x.frees_before();
        x.clear_wait_for();
        x.clear_frees_before();
        DS_RETURN_IF_ERROR(Renumber(&t));
        out_.push_back(std::move(t));
        tied = false;
      }
      DS_RETURN_IF_ERROR(EmitD(std::move(x), i));
    }
    if (tied) return InternalError("plan: a ZeRO-2 pipeline stage's stream has no norm");
    return std::move(out_);
  }

 private:
  using Groups = std::vector<std::vector<std::vector<ChunkPiece>>>;  // [mb][chunk] pieces

  // D's groups cut into the rank's chunks (one chunk: as they are); each micro-batch's mean.
  Status SplitGroups(int m) {
    static const RankChunks kOneChunk;
    const RankChunks& rc = in_.chunks ? *in_.chunks : kOneChunk;
    for (int mb = 0; mb < m; ++mb) {
      DS_ASSIGN_OR_RETURN(fwd_.emplace_back(), SplitByChunk(rc, d_, z_.forward[mb]));
      DS_ASSIGN_OR_RETURN(bwd_.emplace_back(), SplitByChunk(rc, d_, z_.backward[mb]));
      for (int i : z_.backward[mb])
        if (d_[i].kind() == Ins::BACKWARD) {
          mean_over_.push_back(d_[i].mean_over());
          break;
        }
    }
    return OkStatus();
  }

  static const std::vector<ChunkPiece>& Pieces(const Groups& g, int mb, int chunk) {
    static const std::vector<ChunkPiece> kNone;
    return chunk < static_cast<int>(g.at(mb).size()) ? g[mb][chunk] : kNone;
  }

  int Size() const { return static_cast<int>(out_.size()); }
  bool PerMicro(int id) const { return in_.activation_buffers.count(id) > 0; }

  Status Renumber(Ins* x) const {
    for (int& w : *x->mutable_wait_for()) {
      w = from_d_.at(w);
      if (w < 0)
        return InternalError("plan: a pipeline stage's " + Ins::Kind_Name(x->kind()) +
                             " waits for an instruction the merge has not placed yet");
    }
    return OkStatus();
  }
  Status EmitD(Ins x, int i) {
    DS_RETURN_IF_ERROR(Renumber(&x));
    from_d_[i] = Size();
    out_.push_back(std::move(x));
    return OkStatus();
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

  // S's instruction `x` (index k) for D's `pieces` on its chunk: one piece of x's kind takes
  // S's place with D's buffers and waits; several (tensor-parallel ranges, recomputes) run in its
  // place, on its chunk and slot, S's waits on the first.
  Status Place(Ins x, const std::vector<ChunkPiece>& pieces, int k, bool first_acts) {
    if (pieces.empty())
      return InternalError("plan: the stage plan has no " + Ins::Kind_Name(x.kind()) +
                           " for chunk " + Str(x.chunk()) + " of micro-batch " +
                           Str(x.micro_batch()));
    const Ins& d = pieces[0].ins;
    if (pieces.size() == 1 && (d.kind() == x.kind() || IsBackward(x))) {
      Ins y = d;
      DS_RETURN_IF_ERROR(Renumber(&y));
      for (int id : y.reads()) x.add_reads(id);
      for (int id : y.writes()) x.add_writes(id);
      for (int id : y.allocs()) x.add_allocs(id);
      for (int id : y.frees()) x.add_frees(id);
      for (int id : y.frees_before()) x.add_frees_before(id);
      for (int w : y.wait_for()) x.add_wait_for(w);
      KeepStepBuffers(first_acts, &x);
      from_d_[pieces[0].from] = Size();
      Emit(std::move(x), k);
      return OkStatus();
    }
    // The chunk's loss (or its part) is computed by its last forward piece.
    size_t last_forward = pieces.size();
    for (size_t j = 0; j < pieces.size(); ++j)
      if (pieces[j].ins.kind() == Ins::FORWARD) last_forward = j;
    for (size_t j = 0; j < pieces.size(); ++j) {
      Ins y = pieces[j].ins;
      DS_RETURN_IF_ERROR(Renumber(&y));
      if (j == 0)
        for (int w : x.wait_for()) y.add_wait_for(w);
      y.set_chunk(x.chunk());
      y.set_slot(x.slot());
      if (y.kind() == Ins::BACKWARD) y.set_kind(x.kind());  // zb-h1: its input half
      if (y.kind() == Ins::FORWARD) y.set_computes_loss(x.computes_loss() && j == last_forward);
      KeepStepBuffers(first_acts, &y);
      from_d_[pieces[j].from] = Size();
      if (j + 1 == pieces.size()) {
        Emit(std::move(y), k);
      } else {
        out_.push_back(std::move(y));
      }
    }
    return OkStatus();
  }

  const StageStreams& in_;
  const google::protobuf::RepeatedPtrField<Ins>& d_;
  ZeroStream z_;
  Groups fwd_, bwd_;
  std::vector<int64_t> mean_over_;  // per micro-batch
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

}  // namespace ds::parallel
