// The op definitions the tensor-parallel planner writes into each tp rank's graph
// (parallel/tensor/tp_graph.h), apart from their kernels (kernels/cpu/tensor_parallel.cc):
//   bias_add        y = x + b over the last dimension: a row-parallel linear's bias, added
//                   after its partial sums are all-reduced
//   vocab_max       m[r] = max_j logits[r, j] over the rank's vocabulary shard (all-reduced
//                   with max by the plan)
//   vocab_ce_stats  s[r] = (sum_j exp(logits[r, j] - m[r]), logits[r, target_r - vocab_start]
//                   when the target is in the shard, else 0) (all-reduced with sum)
//   vocab_ce_loss   mean over the rows not ignored of m + log s0 - s1; backward writes dlogits
//                   from the reduced m and s alone, so the two collectives need no backward
// Sequence parallelism (Megatron-SP) cuts the tokens (batch x seq, flattened, in order) into
// sp_degree chunks; a rank holds chunk sp_rank as [tokens / sp_degree, C]:
//   sp_split        its chunk of a whole tensor; backward adds the chunk's gradient into its
//                   rows of the whole gradient (the plan all-reduces it)
//   sp_gather       the whole [B, T, C] (B, T from its second input, the token ids) from the
//                   chunks: the plan's all-gather writes it; forward does nothing, and so does
//                   backward (the plan's reduce-scatter writes the chunk's gradient) unless
//                   grad_chunk is 1: the whole gradient is then the same on every rank (MoE's
//                   tokens split over tp, parallel/expert/ep_graph.h) and backward adds the chunk's
//                   rows of it
//   sp_scatter      the rank's chunk of the sum of partial [B, T, C]: the plan's reduce-scatter
//                   writes it; forward and backward do nothing
// None of them can be partitioned again (TpRule::kNone).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Shape Lead(const TensorSpec& t) { return Shape(t.shape.begin(), t.shape.end() - 1); }

Status CheckRows(const char* op, const char* name, const TensorSpec& t, const Shape& want) {
  if (t.shape != want)
    return InvalidArgumentError(StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape),
                                       " but the logits need ", ShapeToString(want)));
  return OkStatus();
}

OpDef BiasAdd() {
  OpDef def;
  def.name = "bias_add";
  def.min_inputs = def.max_inputs = 2;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("bias_add", in, 2, 2));
    DS_RETURN_IF_ERROR(CheckMinRank("bias_add", "x", in[0], 1));
    DS_RETURN_IF_ERROR(CheckFloat("bias_add", "x", in[0]));
    DS_RETURN_IF_ERROR(CheckFloat("bias_add", "b", in[1]));
    if (in[1].shape != Shape{in[0].shape.back()})
      return InvalidArgumentError(StrCat("bias_add: b has shape ", ShapeToString(in[1].shape),
                                         " but x has ", in[0].shape.back(), " features"));
    *out = {in[0]};
    return OkStatus();
  };
  SetPerElementFlops(&def, 1.0, 1.0);
  return def;
}

OpDef VocabMax() {
  OpDef def;
  def.name = "vocab_max";
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("vocab_max", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckMinRank("vocab_max", "logits", in[0], 1));
    DS_RETURN_IF_ERROR(CheckFloat("vocab_max", "logits", in[0]));
    *out = {TensorSpec{Lead(in[0]), DType::kF32}};
    return OkStatus();
  };
  SetPerElementFlops(&def, 1.0, 0.0);
  def.non_differentiable_inputs = 1u << 0;
  return def;
}

OpDef VocabCeStats() {
  OpDef def;
  def.name = "vocab_ce_stats";
  def.min_inputs = def.max_inputs = 3;
  def.attr_names = {"vocab_start", "vocab_size", "ignore_index"};
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("vocab_ce_stats", in, 3, 3));
    DS_RETURN_IF_ERROR(CheckFloat("vocab_ce_stats", "logits", in[0]));
    DS_RETURN_IF_ERROR(CheckRows("vocab_ce_stats", "max", in[1], Lead(in[0])));
    DS_RETURN_IF_ERROR(CheckInt32("vocab_ce_stats", "targets", in[2]));
    DS_RETURN_IF_ERROR(CheckRows("vocab_ce_stats", "targets", in[2], Lead(in[0])));
    Shape shape = Lead(in[0]);
    shape.push_back(2);
    *out = {TensorSpec{shape, DType::kF32}};
    return OkStatus();
  };
  SetPerElementFlops(&def, 3.0, 0.0);
  def.non_differentiable_inputs = 0b111;
  return def;
}

OpDef VocabCeLoss() {
  OpDef def;
  def.name = "vocab_ce_loss";
  def.min_inputs = def.max_inputs = 4;
  def.attr_names = {"vocab_start", "vocab_size", "ignore_index"};
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("vocab_ce_loss", in, 4, 4));
    DS_RETURN_IF_ERROR(CheckFloat("vocab_ce_loss", "logits", in[0]));
    DS_RETURN_IF_ERROR(CheckRows("vocab_ce_loss", "max", in[1], Lead(in[0])));
    Shape stats = Lead(in[0]);
    stats.push_back(2);
    DS_RETURN_IF_ERROR(CheckRows("vocab_ce_loss", "stats", in[2], stats));
    DS_RETURN_IF_ERROR(CheckInt32("vocab_ce_loss", "targets", in[3]));
    DS_RETURN_IF_ERROR(CheckRows("vocab_ce_loss", "targets", in[3], Lead(in[0])));
    *out = {TensorSpec{{1}, DType::kF32}};
    return OkStatus();
  };
  // Forward: a log per row. Backward: exp, scale, subtract per logit.
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 2.0 * LeadingRows(in[0].shape);
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_reads_inputs = 0b1111;
  def.non_differentiable_inputs = 0b1110;
  return def;
}

Status ChunkRows(const char* op, const Attrs& a, const TensorSpec& x, int64_t* rows) {
  const int64_t d = a.Int("sp_degree", 1), r = a.Int("sp_rank", 0);
  if (d < 1 || r < 0 || r >= d)
    return InvalidArgumentError(StrCat(op, ": sp_rank ", r, " of sp_degree ", d));
  if (LeadingRows(x.shape) % d != 0)
    return InvalidArgumentError(
        StrCat(op, ": ", LeadingRows(x.shape), " tokens do not split into ", d, " chunks"));
  *rows = LeadingRows(x.shape) / d;
  return OkStatus();
}

OpDef SpSplit(const char* name) {
  OpDef def;
  def.name = name;
  def.attr_names = {"sp_rank", "sp_degree"};
  const std::string op = name;
  def.infer = [op](const Attrs& a, const std::vector<TensorSpec>& in,
                   std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity(op.c_str(), in, 1, 1));
    DS_RETURN_IF_ERROR(CheckMinRank(op.c_str(), "x", in[0], 2));
    int64_t rows = 0;
    DS_RETURN_IF_ERROR(ChunkRows(op.c_str(), a, in[0], &rows));
    *out = {TensorSpec{{rows, in[0].shape.back()}, in[0].dtype}};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 0.0);
  return def;
}

OpDef SpGather() {
  OpDef def;
  def.name = "sp_gather";
  def.min_inputs = def.max_inputs = 2;
  def.attr_names = {"sp_rank", "sp_degree", "grad_chunk"};
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("sp_gather", in, 2, 2));
    DS_RETURN_IF_ERROR(CheckRank("sp_gather", "x", in[0], 2));
    DS_RETURN_IF_ERROR(CheckInt32("sp_gather", "ids", in[1]));
    Shape shape = in[1].shape;
    shape.push_back(in[0].shape[1]);
    const TensorSpec whole{shape, in[0].dtype};
    int64_t rows = 0;
    DS_RETURN_IF_ERROR(ChunkRows("sp_gather", a, whole, &rows));
    if (rows != in[0].shape[0])
      return InvalidArgumentError(StrCat("sp_gather: a chunk of ", in[0].shape[0],
                                         " tokens, but ids make chunks of ", rows));
    *out = {whole};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 0.0);
  def.non_differentiable_inputs = 1u << 1;
  return def;
}

const bool kRegistered = RegisterOp(BiasAdd()) && RegisterOp(VocabMax()) &&
                         RegisterOp(VocabCeStats()) && RegisterOp(VocabCeLoss()) &&
                         RegisterOp(SpSplit("sp_split")) && RegisterOp(SpSplit("sp_scatter")) &&
                         RegisterOp(SpGather());

}  // namespace
}  // namespace ds::kernels::ops
