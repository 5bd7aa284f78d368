// position_embedding (learned, GPT-2): out[b, t, :] = x[b, t, :] + wpe[t, :];
// x [B, T, C], wpe [maxT, C] with T <= maxT; attr position_chunk k (Ulysses: the rank's chunk of
// the sequence) reads rows k T .. (k + 1) T - 1; a third input positions int32 [B, T]
// (generation) reads row positions[b, t] for token (b, t), or pad int32 [B] (a left-padded
// batch) row t - pad[b] (TokenPositions); attr offset adds to every row (OPT reads p + 2).
// Backward: dx += dout; dwpe[t] += sum_b dout[b, t]. Threads split t, so each wpe row has
// one writer. Backward reads no tensors.
#include <algorithm>
#include <string>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

int64_t Offset(const OpArgs& args) {
  return args.attrs ? args.attrs->Int("position_chunk", 0) * args.in[0].dim(1) : 0;
}
// Attr offset: position p reads row p + offset (OPT).
int64_t RowShift(const OpArgs& args) { return args.attrs ? args.attrs->Int("offset", 0) : 0; }

Status Forward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t b = x.dim(0), t = x.dim(1), c = x.dim(2);
  const float* xp = x.f32();
  const float* wpe = args.in[1].f32();
  float* out = args.out[0].f32();
  const int64_t rows = args.in[1].dim(0);
  const TokenPositions at(args.in.size() > 2 ? &args.in[2] : nullptr, t, Offset(args));
  const int64_t shift = RowShift(args);
  for (int64_t r = 0; args.in.size() > 2 && r < b * t; ++r)
    if (at(r) + shift < 0 || at(r) + shift >= rows)
      return InvalidArgumentError("position_embedding: position " + std::to_string(at(r)) +
                                  " is outside the " + std::to_string(rows) + " rows of wpe");
  ParallelFor(b * t, kElementwiseGrain / std::max<int64_t>(c, 1) + 1,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const float* w = wpe + (at(r) + shift) * c;
                  for (int64_t j = 0; j < c; ++j) out[r * c + j] = xp[r * c + j] + w[j];
                }
              });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  const Tensor& dout = args.grad_out[0];
  const int64_t b = dout.dim(0), t = dout.dim(1), c = dout.dim(2);
  const float* dy = dout.f32();
  const int64_t grain = kElementwiseGrain / std::max<int64_t>(b * c, 1) + 1;
  if (args.grad_in[0].defined()) {
    float* dx = args.grad_in[0].f32();
    ParallelFor(dout.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dx[i] += dy[i];
    });
  }
  if (args.grad_in[1].defined() && args.in.size() > 2) {  // positions: rows in any order
    const TokenPositions at(&args.in[2], t, Offset(args));
    float* dw = args.grad_in[1].f32() + RowShift(args) * c;
    for (int64_t r = 0; r < b * t; ++r)
      for (int64_t j = 0; j < c; ++j) dw[at(r) * c + j] += dy[r * c + j];
  } else if (args.grad_in[1].defined()) {
    float* dw = args.grad_in[1].f32() + (Offset(args) + RowShift(args)) * c;
    ParallelFor(t, grain, [&](int64_t begin, int64_t end) {
      for (int64_t ti = begin; ti < end; ++ti)
        for (int64_t bi = 0; bi < b; ++bi) {
          const float* src = dy + (bi * t + ti) * c;
          for (int64_t j = 0; j < c; ++j) dw[ti * c + j] += src[j];
        }
    });
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("position_embedding", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
