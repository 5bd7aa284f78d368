// ZeRO++'s parts of the stage-3 plan (Note [ZeRO++] in zero/README.md): which settings it can
// carry out, hpZ's secondary partition, and the bytes a quantized gather packs.
#include <algorithm>
#include <string>
#include <utility>

#include "runtime/core/quantize.h"
#include "zero/plan/builder_context.h"

namespace ds::zero::internal {

// qwZ's block: DeepSpeed picks blocks of at most 8000 elements (about 4k its optimum, B3).
constexpr int64_t kWeightQuantBlock = 2048;
// qgZ's: int4 keeps 15 levels, so a block's largest gradient sets a coarse step for the rest;
// DeepSpeed's groups are about a row of the weight (B5). A scale per 256 values adds 4 bytes to
// their 128.
constexpr int64_t kGradientQuantBlock = 256;

namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

Status CheckZeroPlusPlus(const Context& ctx) {
  const PlanConfig& c = ctx.config;
  const int s = c.hpz_partition_size;
  const bool any = s > 1 || c.quantized_weight_bits > 0 || c.quantized_gradient_bits > 0;
  if (!any) return OkStatus();
  if (c.stage != 3)
    return InvalidArgumentError(
        "plan: zero_optimization's ZeRO++ keys (zero_hpz_partition_size, "
        "zero_quantized_weights, zero_quantized_gradients) need stage 3, got stage " +
        Str(c.stage));
  if (s < 1 || ctx.dp % s != 0)
    return InvalidArgumentError("plan: zero_optimization.zero_hpz_partition_size " + Str(s) +
                                " must divide the data-parallel size " + Str(ctx.dp) +
                                " (it is the ranks of one node that share a secondary partition)");
  if (ctx.ep > 1)
    return UnimplementedError(
        "plan: ZeRO++ with expert parallelism (DeepSpeed refuses it beside AutoEP too)");
  if (c.states_on_device)
    return UnimplementedError(
        "plan: ZeRO++ with the model states on the device: its gathers and reductions run on "
        "host memory only so far");
  if (c.param_nvme) return UnimplementedError("plan: ZeRO++ with offload_param nvme");
  if (c.quantized_weight_bits > 0 && c.model_dtype == DType::kF16)
    return UnimplementedError(
        "plan: zero_quantized_weights with fp16 parameters (qwZ gathers fp32 or bf16 ones)");
  return OkStatus();
}

void AssignSecondary(Context* ctx) {
  const int s = ctx->config.hpz_partition_size;
  if (s <= 1) return;
  int64_t at = 0;
  for (Unit& u : ctx->units) {
    if (u.persistent || u.expert) continue;
    u.secondary_chunk = AlignUp((u.count + s - 1) / s, plan::kFlatAlign);
    u.secondary_offset = at;
    at += u.secondary_chunk;
  }
}

void QuantizeGradients(const Context& ctx, proto::Instruction* ins) {
  const int bits = ctx.config.quantized_gradient_bits;
  if (bits == 0 || ins->kind() != proto::Instruction::REDUCE_SCATTER || ins->units_size() == 0 ||
      ins->collective().group() == kEdpGroup)
    return;
  *ins->mutable_quantize() = GradientQuantization(ctx.config);
  proto::Collective* c = ins->mutable_collective();
  const int local = QgzLocalSize(ctx.config, ctx.dp);
  if (local > 1 && local < ctx.dp) {
    c->add_hierarchy(kHpzGroup);
    c->add_hierarchy(kHpzAcrossGroup);
  } else {
    c->add_hierarchy(kDpGroup);
  }
}

// The packed input: the n parts in fp32, then their blocks as sent to the first stage's peers;
// the output: what the first stage receives (n parts' blocks), the partial sums of the parts the
// rank forwards (m = n / first stage's size), their blocks out and in, and the rank's own part.
std::pair<int64_t, int64_t> ReduceStagingBytes(int64_t per_rank, int n, int first_stage,
                                               const proto::Quantization& q) {
  const int64_t packed = QuantizedBytes(per_rank, QuantSpec{q.bits(), q.block()});
  const int64_t m = n / first_stage, full = per_rank * static_cast<int64_t>(sizeof(float));
  return {n * (full + packed), n * packed + m * full + 2 * m * packed + full};
}

// Unquantized, a rank's part goes out as it is and the n parts come back. Quantized, the part is
// packed in full precision, then as its blocks (values and scales) after it; the n parts' blocks
// arrive, and are dequantized after them into the n parts in full precision.
std::pair<int64_t, int64_t> GatherStagingBytes(int64_t per_rank, int n, int64_t elem,
                                               const proto::Quantization& q) {
  const int64_t full = per_rank * elem;
  if (q.bits() == 0) return {full, full * n};
  const int64_t packed = QuantizedBytes(per_rank, QuantSpec{q.bits(), q.block()});
  return {full + packed, (packed + full) * n};
}

}  // namespace ds::zero::internal

namespace ds::zero {

proto::Quantization WeightQuantization(const plan::PlanConfig& config) {
  proto::Quantization q;
  if (config.quantized_weight_bits == 0) return q;
  q.set_bits(config.quantized_weight_bits);
  q.set_block(internal::kWeightQuantBlock);
  return q;
}

int QgzLocalSize(const plan::PlanConfig& config, int dp) {
  if (config.hpz_partition_size > 1) return config.hpz_partition_size;
  const int tp = std::max(1, config.tensor), slots = config.node_slots;
  if (config.quantized_gradient_bits == 0 || slots <= 0 || slots % tp != 0) return 1;
  const int node_dp = slots / tp;  // ranks fill a node tp group by tp group, dp fastest after
  return node_dp > 1 && node_dp < dp && dp % node_dp == 0 ? node_dp : 1;
}

proto::Quantization GradientQuantization(const plan::PlanConfig& config) {
  proto::Quantization q;
  if (config.quantized_gradient_bits == 0) return q;
  q.set_bits(config.quantized_gradient_bits);
  q.set_block(internal::kGradientQuantBlock);
  return q;
}

}  // namespace ds::zero
