// position_embedding (learned, GPT-2): out[b, t, :] = x[b, t, :] + wpe[t, :];
// x [B, T, C], wpe [maxT, C] with T <= maxT.
// Backward: dx += dout; dwpe[t] += sum_b dout[b, t]. Threads split t, so each wpe row has
// one writer. Backward reads no tensors.
#include <algorithm>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t b = x.dim(0), t = x.dim(1), c = x.dim(2);
  const float* xp = x.f32();
  const float* wpe = args.in[1].f32();
  float* out = args.out[0].f32();
  ParallelFor(b * t, kElementwiseGrain / std::max<int64_t>(c, 1) + 1,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const float* w = wpe + (r % t) * c;
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
  if (args.grad_in[1].defined()) {
    float* dw = args.grad_in[1].f32();
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

Status Infer(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "position_embedding";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 2, 2));
  DS_RETURN_IF_ERROR(CheckRank(op, "x", in[0], 3));
  DS_RETURN_IF_ERROR(CheckRank(op, "wpe", in[1], 2));
  DS_RETURN_IF_ERROR(CheckFloat(op, "x", in[0]));
  DS_RETURN_IF_ERROR(CheckFloat(op, "wpe", in[1]));
  if (in[0].shape[2] != in[1].shape[1])
    return InvalidArgumentError(
        StrCat(op, ": x has ", in[0].shape[2], " channels but wpe has ", in[1].shape[1]));
  if (in[0].shape[1] > in[1].shape[0])
    return InvalidArgumentError(StrCat(op, ": sequence length T=", in[0].shape[1], " exceeds the ",
                                       in[1].shape[0], " positions of wpe (maxT)"));
  *out = {in[0]};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "position_embedding";
  def.min_inputs = def.max_inputs = 2;
  def.infer = Infer;
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 1.0 * in[0].numel();
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 2.0 * in[0].numel();
  };
  return def;
}

const bool kRegistered = RegisterOp(Def()) && RegisterKernel("position_embedding", Device::kCpu,
                                                             DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
