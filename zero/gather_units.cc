// Stage 3's gathers of partition units: each group rank's part of the units, packed in unit
// order, all-gathered and copied into the flat parameters. The parts come from the parameter
// shard over the dp group (GATHER_PARAMS) or, with ZeRO++'s hpZ, from the secondary partition
// over the hpz group (GATHER_SECONDARY); with qwZ they travel as int8 blocks and their scales
// (runtime/core/quantize.h) and are dequantized on arrival (Note [ZeRO++] in zero/README.md).
#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/core/quantize.h"
#include "zero/collective_op.h"
#include "zero/shard_layout.h"

namespace ds::zero::internal {
namespace {

// Where a gather's parts come from and go.
struct Parts {
  const Op& op;
  bool secondary;

  int64_t Chunk(const proto::PartitionUnit& u) const {
    return secondary ? u.secondary_chunk() : u.chunk();
  }
  char* Source(const proto::PartitionUnit& u) const {
    return secondary ? op.secondary + u.secondary_offset() * op.ts()
                     : op.v->ParamShard(u.shard_offset());
  }
  // The flat range of unit `u` that group rank k's part holds (empty past the unit's end).
  std::pair<int64_t, int64_t> Range(const proto::PartitionUnit& u, int k) const {
    if (!secondary) return OwnedOfUnit(u, k);
    return SecondaryRange(u, k);
  }
  static std::pair<int64_t, int64_t> SecondaryRange(const proto::PartitionUnit& u, int k) {
    const int64_t end = u.offset() + u.count();
    const int64_t b = std::min(end, u.offset() + k * u.secondary_chunk());
    return {b, std::min(end, b + u.secondary_chunk())};
  }
};

// hpZ: the rank's secondary chunk of every gathered unit, copied out of the parameters it has
// just gathered (its place in the hpz group: dp rank mod the group's size).
Status FillSecondary(const Op& op, const std::vector<int>& list) {
  const int s = op.plan.settings().hpz_partition_size();
  if (!op.secondary || s <= 1) return InternalError("fill_secondary without an hpZ partition");
  for (int u : list) {
    const proto::PartitionUnit& unit = op.unit(u);
    auto [begin, end] = Parts::SecondaryRange(unit, op.dp_rank % s);
    if (end > begin)
      DS_RETURN_IF_ERROR(op.v->Copy(op.secondary + unit.secondary_offset() * op.ts(),
                                    op.v->Params(begin), (end - begin) * op.ts()));
  }
  return OkStatus();
}

Status QuantizePart(const Op& op, const char* x, int64_t n, const QuantSpec& q, char* out) {
  auto* values = reinterpret_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<float*>(out + QuantizedValueBytes(n, q));
  if (op.t() == DType::kF32)
    Quantize(reinterpret_cast<const float*>(x), n, q, values, scales);
  else if (op.t() == DType::kBF16)
    QuantizeBf16(reinterpret_cast<const uint16_t*>(x), n, q, values, scales);
  else
    return UnimplementedError(std::string("quantized gathers of ") + DTypeName(op.t()) +
                              " parameters (qwZ takes fp32 or bf16)");
  return OkStatus();
}

void DequantizePart(const Op& op, const char* in, int64_t n, const QuantSpec& q, char* y) {
  const auto* values = reinterpret_cast<const int8_t*>(in);
  const auto* scales = reinterpret_cast<const float*>(in + QuantizedValueBytes(n, q));
  if (op.t() == DType::kF32)
    Dequantize(values, scales, n, q, reinterpret_cast<float*>(y));
  else
    DequantizeBf16(values, scales, n, q, reinterpret_cast<uint16_t*>(y));
}

// All-gathers the packed part (per_rank elements at stage_in) over op.comm, as blocks when `q`
// quantizes; returns where the n parts will lie in full precision once it completed.
StatusOr<char*> StartAllGather(const Op& op, int64_t per_rank, const QuantSpec& q,
                               CollectiveJob* job) {
  const int n = op.dp;
  if (q.bits == 0) {
    job->handle = op.comm->AllGatherAsync(parallel::BufferView(op.stage_in, per_rank, op.t()),
                                          parallel::BufferView(op.stage_out, per_rank * n, op.t()));
    return op.stage_out;
  }
  DS_RETURN_IF_ERROR(CheckQuantSpec(q));
  if (op.v->stream()) return UnimplementedError("quantized gathers of device memory");
  const int64_t packed = QuantizedBytes(per_rank, q);
  if (packed % 4 != 0) return InternalError("a quantized part that is not whole 4-byte words");
  char* mine = op.stage_in + per_rank * op.ts();
  DS_RETURN_IF_ERROR(QuantizePart(op, op.stage_in, per_rank, q, mine));
  job->handle =
      op.comm->AllGatherAsync(parallel::BufferView(mine, packed / 4, DType::kI32),
                              parallel::BufferView(op.stage_out, n * packed / 4, DType::kI32));
  return op.stage_out + n * packed;  // after the n parts' blocks
}

}  // namespace

Status GatherUnits(const Op& op, CollectiveJob* job) {
  StateView* v = op.v;
  const size_t ts = op.ts();
  const Parts parts{op, op.in.kind() == proto::Instruction::GATHER_SECONDARY};
  std::vector<int> list(op.in.units().begin(), op.in.units().end());
  const bool fill = op.in.fill_secondary();
  v->ParamsChanged();
  // offload_param nvme: the chunks were swapped in for this gather; copied out, they go.
  auto drop = [&]() {
    if (!op.plan.swap().params() || parts.secondary) return;
    for (int u : list) v->DropParamShard(op.unit(u).shard_offset(), op.unit(u).chunk());
  };
  if (op.local()) {
    for (int u : list)
      DS_RETURN_IF_ERROR(v->Copy(v->Params(op.unit(u).offset()),
                                 v->ParamShard(op.unit(u).shard_offset()),
                                 op.unit(u).count() * ts));
    drop();
    return fill ? FillSecondary(op, list) : OkStatus();
  }
  std::vector<int64_t> at;
  int64_t per_rank = 0;
  for (int u : list) {
    at.push_back(per_rank);
    per_rank += parts.Chunk(op.unit(u));
  }
  for (size_t i = 0; i < list.size(); ++i)
    DS_RETURN_IF_ERROR(v->Copy(op.stage_in + at[i] * ts, parts.Source(op.unit(list[i])),
                               parts.Chunk(op.unit(list[i])) * ts));
  drop();
  const int n = op.dp;
  const QuantSpec q{op.in.quantize().bits(), op.in.quantize().block()};
  DS_ASSIGN_OR_RETURN(char* out, StartAllGather(op, per_rank, q, job));
  const bool secondary = parts.secondary;
  job->finish = [=]() -> Status {  // `op` copied: the caller's goes before completion
    const Parts mine{op, secondary};
    v->ParamsChanged();
    if (q.bits > 0)
      for (int k = 0; k < n; ++k)
        DequantizePart(op, op.stage_out + k * QuantizedBytes(per_rank, q), per_rank, q,
                       out + k * per_rank * ts);
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < list.size(); ++i) {
        auto [begin, end] = mine.Range(op.unit(list[i]), k);
        if (end > begin)
          DS_RETURN_IF_ERROR(
              v->Copy(v->Params(begin), out + (k * per_rank + at[i]) * ts, (end - begin) * ts));
      }
    return fill ? FillSecondary(op, list) : OkStatus();
  };
  return OkStatus();
}

}  // namespace ds::zero::internal
