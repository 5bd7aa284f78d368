// ZeRO++'s qgZ (Note [ZeRO++] in zero/README.md): a stage-3 reduce-scatter of units whose
// parts travel as quantized blocks through all-to-alls, not around a ring, where every hop
// would quantize a partial sum again. With n = L x M dp ranks, the first stage's groups of L
// (the hpz groups: one node) and the second's of M (the same place in every hpz group), dp
// rank d = a L + i:
//   1. the rank's gradients in fp32, part k for dp rank k; the parts (b, j) = b L + j for every
//      b, each quantized, go to the first stage's member j;
//   2. from each member j the parts (b, i) arrive; dequantized and summed over j (in order),
//      they are node a's partial sums of part (b, i);
//   3. the partial of part (b, i), quantized again, goes to the second stage's member b; what
//      arrives, dequantized and summed over the nodes, is part (a, i) = d: the rank's own.
// Without hpZ (or with one hpz group) one all-to-all over the dp group does it all. Each part
// is summed in one fixed order by the rank that owns it, so every run gives the same bits.
#include <cstring>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/core/quantize.h"
#include "zero/collective_op.h"
#include "zero/shard_layout.h"

namespace ds::zero::internal {
namespace {

// Adds the dequantized part `in` (n values) into `sum`, through `tmp`.
void AddDequantized(const char* in, int64_t n, const QuantSpec& q, float* tmp, float* sum) {
  Dequantize(reinterpret_cast<const int8_t*>(in),
             reinterpret_cast<const float*>(in + QuantizedValueBytes(n, q)), n, q, tmp);
  for (int64_t i = 0; i < n; ++i) sum[i] += tmp[i];
}

void QuantizeTo(const float* x, int64_t n, const QuantSpec& q, char* out) {
  Quantize(x, n, q, reinterpret_cast<int8_t*>(out),
           reinterpret_cast<float*>(out + QuantizedValueBytes(n, q)));
}

parallel::BufferView Words(char* p, int64_t bytes) {
  return parallel::BufferView(p, bytes / 4, DType::kI32);
}

// Every dp rank's part of the units, in fp32 (zero padding): part k at k x per_rank.
Status PackParts(const Op& op, const std::vector<int>& list, const std::vector<int64_t>& at,
                 int64_t per_rank, float* parts) {
  std::memset(parts, 0, per_rank * op.dp * sizeof(float));
  for (int k = 0; k < op.dp; ++k)
    for (size_t i = 0; i < list.size(); ++i) {
      auto [begin, end] = OwnedOfUnit(op.unit(list[i]), k);
      if (end > begin)
        DS_RETURN_IF_ERROR(op.v->Convert(op.v->Grads(begin), op.t(), parts + k * per_rank + at[i],
                                         DType::kF32, end - begin));
    }
  return OkStatus();
}

}  // namespace

Status QuantizedReduceUnits(const Op& op, CollectiveJob* job) {
  StateView* v = op.v;
  if (v->stream()) return UnimplementedError("quantized reductions of device memory");
  if (op.stages.empty() || op.stages.size() > 2)
    return InternalError("a quantized reduction needs one or two all-to-all groups");
  const int n = op.dp, L = op.stages[0]->size();
  const int M = op.stages.size() > 1 ? op.stages[1]->size() : 1;
  if (L * M != n) return InternalError("the quantized reduction's groups do not cover dp");
  const QuantSpec q{op.in.quantize().bits(), op.in.quantize().block()};
  DS_RETURN_IF_ERROR(CheckQuantSpec(q));
  std::vector<int> list(op.in.units().begin(), op.in.units().end());
  std::vector<int64_t> at;
  int64_t per_rank = 0;
  for (int u : list) {
    at.push_back(per_rank);
    per_rank += op.unit(u).chunk();
  }
  const int64_t Q = QuantizedBytes(per_rank, q), full = per_rank * 4;
  if (Q % 4 != 0) return InternalError("a quantized part that is not whole 4-byte words");
  auto* parts = reinterpret_cast<float*>(op.stage_in);
  DS_RETURN_IF_ERROR(PackParts(op, list, at, per_rank, parts));
  char* send = op.stage_in + n * full;
  for (int j = 0; j < L; ++j)
    for (int b = 0; b < M; ++b)
      QuantizeTo(parts + (b * L + j) * per_rank, per_rank, q, send + (j * M + b) * Q);
  char* recv = op.stage_out;
  job->handle = op.stages[0]->AllToAllAsync(Words(send, n * Q), Words(recv, n * Q));
  job->finish = [=]() -> Status {
    auto* partial = reinterpret_cast<float*>(recv + n * Q);  // M parts
    char* send2 = recv + n * Q + M * full;
    char* recv2 = send2 + M * Q;
    auto* tmp = reinterpret_cast<float*>(recv2 + M * Q);
    std::memset(partial, 0, M * full);
    for (int j = 0; j < L; ++j)
      for (int b = 0; b < M; ++b)
        AddDequantized(recv + (j * M + b) * Q, per_rank, q, tmp, partial + b * per_rank);
    float* mine = partial;  // one stage: the only partial is the rank's part
    if (M > 1) {
      for (int b = 0; b < M; ++b) QuantizeTo(partial + b * per_rank, per_rank, q, send2 + b * Q);
      DS_RETURN_IF_ERROR(op.stages[1]->AllToAll(Words(send2, M * Q), Words(recv2, M * Q)));
      std::memset(partial, 0, full);
      for (int b = 0; b < M; ++b) AddDequantized(recv2 + b * Q, per_rank, q, tmp, partial);
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const proto::PartitionUnit& u = op.unit(list[i]);
      DS_RETURN_IF_ERROR(v->AddToGradShard(u.shard_offset(), mine + at[i], DType::kF32, u.chunk()));
      DS_RETURN_IF_ERROR(v->ReleaseGrads(u.offset(), u.count()));
    }
    return OkStatus();
  };
  return OkStatus();
}

}  // namespace ds::zero::internal
