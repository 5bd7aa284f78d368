// The op definitions of DeepSpeed-Ulysses sequence parallelism (parallel/sequence/ulysses_graph.h),
// apart from their kernels (kernels/cpu/ulysses.cc). An sp rank holds its time chunk of every
// sequence, [B, T / sp, ...] (chunk r: positions r T / sp ..); around attention two all-to-alls
// turn it into all T positions of 1 / sp of the heads and back:
//   seq_chunk        x [B, T, ...] (token ids, targets or floats) -> its chunk [B, T / sp, ...]
//                    (attrs sp_rank, sp_degree); backward adds the chunk's gradient back
//   ulysses_heads    [B, Tl, W] <-> [sp, B, Tl, P]: part j holds rank j's heads of each segment
//                    of `heads` (qkv: "H,KV,KV"; the output: "H"), head_dim each, as
//                    kernels/head_split.h deals them (attrs n_head, n_kv_head); P is the widest
//                    rank's width, narrower parts end in zeros (attr inverse 1: the other way)
//   ulysses_time     [sp, B, Tl, P] <-> [B, sp Tl, Wl]: part j's tokens at positions j Tl ..,
//                    their first Wl = width features (inverse 1: the other way, parts of
//                    part_width)
//   seq_all_to_all   [sp, ...] -> the same shape: the plan's ACT_ALL_TO_ALL writes it (and its
//                    input's gradient); forward and backward do nothing
//   seq_ce_stats     logits [B, Tl, V], targets -> [2]: the sum over the chunk's scored tokens of
//                    their cross-entropy and their count (the plan sums both over sp)
//   seq_ce_loss      logits, targets, stats [2] -> loss [1] = stats0 / stats1, the whole
//                    sequence's mean; backward adds (softmax - onehot) / stats1 to the chunk's
//                    logits' gradient, so the chunks' gradients sum to the whole one exactly once
// None can be partitioned by the tensor-parallel planner (TpRule::kNone).
#include <algorithm>
#include <sstream>

#include "kernels/head_split.h"
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Degree(const char* op, const Attrs& a, int64_t* sp) {
  *sp = a.Int("sp_degree", 0);
  if (*sp < 1) return InvalidArgumentError(StrCat(op, ": sp_degree must be >= 1"));
  return OkStatus();
}

OpDef SeqChunk() {
  OpDef def;
  def.name = "seq_chunk";
  def.attr_names = {"sp_rank", "sp_degree"};
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("seq_chunk", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckMinRank("seq_chunk", "x", in[0], 2));
    int64_t sp = 0;
    DS_RETURN_IF_ERROR(Degree("seq_chunk", a, &sp));
    if (in[0].shape[1] % sp != 0)
      return InvalidArgumentError(StrCat("seq_chunk: sequence length ", in[0].shape[1],
                                         " is not divisible by the sequence-parallel size ", sp));
    TensorSpec o = in[0];
    o.shape[1] /= sp;
    *out = {o};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 0.0);
  return def;
}

// The head segments "H,KV,KV", the model's head counts (attrs n_head, n_kv_head; by default the
// first and the second segment) and the parts' width: the widest rank's heads (head_split.h).
Status Segments(const Attrs& a, int64_t sp, std::vector<int64_t>* heads, int64_t* part_width) {
  std::stringstream ss(a.String("heads", ""));
  std::string item;
  while (std::getline(ss, item, ',')) heads->push_back(std::atoll(item.c_str()));
  if (heads->empty() || heads->size() > 8)
    return InvalidArgumentError("ulysses_heads: attribute heads needs 1 to 8 segments");
  const int64_t h = a.Int("n_head", (*heads)[0]);
  const int64_t kv = a.Int("n_kv_head", heads->size() > 1 ? (*heads)[1] : h);
  DS_RETURN_IF_ERROR(CheckHeadSplit(h, kv, sp));
  for (int64_t s : *heads)
    if (s != h && s != kv)
      return InvalidArgumentError(StrCat("ulysses_heads: a segment of ", s, " heads is neither ",
                                         "the ", h, " query heads nor the ", kv, " kv heads"));
  *part_width = 0;
  for (int64_t j = 0; j < sp; ++j) {
    int64_t w = 0;
    for (int64_t s : *heads) w += SegmentHeads(s, h, kv, sp, j).size();
    *part_width = std::max(*part_width, w * a.Int("head_dim", 0));
  }
  return OkStatus();
}

OpDef Heads() {
  OpDef def;
  def.name = "ulysses_heads";
  def.attr_names = {"sp_degree", "heads", "n_head", "n_kv_head", "head_dim", "inverse"};
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("ulysses_heads", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckFloat("ulysses_heads", "x", in[0]));
    int64_t sp = 0, width = 0, part = 0;
    DS_RETURN_IF_ERROR(Degree("ulysses_heads", a, &sp));
    std::vector<int64_t> heads;
    DS_RETURN_IF_ERROR(Segments(a, sp, &heads, &part));
    for (int64_t h : heads) width += h * a.Int("head_dim", 0);
    const bool inverse = a.Int("inverse", 0) != 0;
    DS_RETURN_IF_ERROR(CheckRank("ulysses_heads", "x", in[0], inverse ? 4 : 3));
    const Shape& s = in[0].shape;
    if (inverse ? (s[0] != sp || s[3] != part) : s[2] != width)
      return InvalidArgumentError(StrCat("ulysses_heads: x ", ShapeToString(s), " does not hold ",
                                         width, " features in ", sp, " parts"));
    TensorSpec o = in[0];
    o.shape = inverse ? Shape{s[1], s[2], width} : Shape{sp, s[0], s[1], part};
    *out = {o};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 0.0);
  return def;
}

// ulysses_time's attrs width (this rank's features, default the parts' width) and part_width
// (the inverse's parts, default width).
OpDef Time() {
  OpDef def;
  def.name = "ulysses_time";
  def.attr_names = {"sp_degree", "inverse", "width", "part_width"};
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("ulysses_time", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckFloat("ulysses_time", "x", in[0]));
    int64_t sp = 0;
    DS_RETURN_IF_ERROR(Degree("ulysses_time", a, &sp));
    const bool inverse = a.Int("inverse", 0) != 0;
    DS_RETURN_IF_ERROR(CheckRank("ulysses_time", "x", in[0], inverse ? 3 : 4));
    const Shape& s = in[0].shape;
    const int64_t part = inverse ? a.Int("part_width", s[2]) : s[3];
    const int64_t width = inverse ? s[2] : a.Int("width", s[3]);
    if (inverse ? s[1] % sp != 0 : s[0] != sp)
      return InvalidArgumentError(
          StrCat("ulysses_time: x ", ShapeToString(s), " does not split in ", sp, " parts"));
    if (width < 1 || width > part)
      return InvalidArgumentError(
          StrCat("ulysses_time: ", width, " features do not fit parts of ", part));
    TensorSpec o = in[0];
    o.shape = inverse ? Shape{sp, s[0], s[1] / sp, part} : Shape{s[1], s[0] * s[2], width};
    *out = {o};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 0.0);
  return def;
}

OpDef AllToAll() {
  OpDef def;
  def.name = "seq_all_to_all";
  def.exchange = true;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("seq_all_to_all", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckFloat("seq_all_to_all", "x", in[0]));
    *out = {in[0]};
    return OkStatus();
  };
  return def;
}

Status CheckLogits(const char* op, const std::vector<TensorSpec>& in) {
  DS_RETURN_IF_ERROR(CheckMinRank(op, "logits", in[0], 2));
  DS_RETURN_IF_ERROR(CheckFloat(op, "logits", in[0]));
  DS_RETURN_IF_ERROR(CheckInt32(op, "targets", in[1]));
  const Shape rows(in[0].shape.begin(), in[0].shape.end() - 1);
  if (in[1].shape != rows)
    return InvalidArgumentError(StrCat(op, ": targets ", ShapeToString(in[1].shape),
                                       " do not match logits ", ShapeToString(in[0].shape)));
  return OkStatus();
}

OpDef CeStats() {
  OpDef def;
  def.name = "seq_ce_stats";
  def.min_inputs = def.max_inputs = 2;
  def.attr_names = {"ignore_index"};
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("seq_ce_stats", in, 2, 2));
    DS_RETURN_IF_ERROR(CheckLogits("seq_ce_stats", in));
    *out = {TensorSpec{{2}, DType::kF32}};
    return OkStatus();
  };
  SetPerElementFlops(&def, 3.0, 0.0);
  def.non_differentiable_inputs = 0b11;
  return def;
}

OpDef CeLoss() {
  OpDef def;
  def.name = "seq_ce_loss";
  def.min_inputs = def.max_inputs = 3;
  def.attr_names = {"ignore_index"};
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("seq_ce_loss", in, 3, 3));
    DS_RETURN_IF_ERROR(CheckLogits("seq_ce_loss", in));
    if (in[2].shape != Shape{2} || in[2].dtype != DType::kF32)
      return InvalidArgumentError("seq_ce_loss: stats must be fp32 [2]");
    *out = {TensorSpec{{1}, DType::kF32}};
    return OkStatus();
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>&) { return 1.0; };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_reads_inputs = 0b111;
  def.non_differentiable_inputs = 0b110;
  return def;
}

const bool kRegistered = RegisterOp(SeqChunk()) && RegisterOp(Heads()) && RegisterOp(Time()) &&
                         RegisterOp(AllToAll()) && RegisterOp(CeStats()) && RegisterOp(CeLoss());

}  // namespace
}  // namespace ds::kernels::ops
