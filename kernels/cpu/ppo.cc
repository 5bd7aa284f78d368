// The PPO losses' CPU kernels (definitions and formulas: kernels/ops/ppo.cc). Both are means
// over the masked positions (0 when none is); a position's term takes the larger of its
// unclipped and clipped forms, and its gradient is that form's (0 where the clip holds).
//   actor:  d/dlogp = -A r m^2 on the unclipped branch; d/dlogits = that x (onehot - softmax);
//           the pretraining term (input ptx, weights w) adds d/dlogp = -w / #{w != 0}
//   value:  d/dV = (V - R) m, or (clip(V) - R) m where V lies inside the clip range
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::cpu {
namespace {

template <typename T>
double MaskSum(const T* m, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += m[i];
  return s;
}

// log softmax(x)[token] over v logits, stable.
double LogProb(const float* x, int64_t v, int32_t token) {
  double mx = x[0];
  for (int64_t j = 1; j < v; ++j) mx = std::max<double>(mx, x[j]);
  double total = 0;
  for (int64_t j = 0; j < v; ++j) total += std::exp(x[j] - mx);
  return x[token] - mx - std::log(total);
}

struct ActorTerm {
  double loss = 0, dlogp = 0;
};

ActorTerm Actor(double logp, double old, double adv, double m, double clip) {
  const double ratio = std::exp((logp - old) * m);
  const double l1 = -adv * ratio, l2 = -adv * std::clamp(ratio, 1.0 - clip, 1.0 + clip);
  return {std::max(l1, l2) * m, l1 >= l2 ? -adv * ratio * m * m : 0.0};
}

Status CheckToken(int32_t token, int64_t v, int64_t row) {
  if (token >= 0 && token < v) return OkStatus();
  return InvalidArgumentError(StrCat("ppo_actor_loss: position ", row,
                                     " is masked in but its "
                                     "token ",
                                     token, " is outside the vocabulary of ", v));
}

// The pretraining weights (input 5), or null, and how many are non-zero.
const float* Ptx(const OpArgs& args, int64_t n, double* count) {
  *count = 0;
  if (args.in.size() < 6) return nullptr;
  const float* w = args.in[5].f32();
  for (int64_t r = 0; r < n; ++r) *count += w[r] != 0;
  return w;
}

Status ActorForward(const OpArgs& args) {
  const int64_t v = args.in[0].dim(-1), n = args.in[1].numel();
  const float *x = args.in[0].f32(), *old = args.in[2].f32(), *adv = args.in[3].f32(),
              *m = args.in[4].f32();
  const int32_t* tok = args.in[1].i32();
  const double clip = args.attrs ? args.attrs->Float("cliprange", 0.2) : 0.2, count = MaskSum(m, n);
  double sum = 0, ptx_count = 0, ptx_sum = 0;
  const float* w = Ptx(args, n, &ptx_count);
  for (int64_t r = 0; r < n; ++r) {
    if (m[r] == 0 && (!w || w[r] == 0)) continue;
    DS_RETURN_IF_ERROR(CheckToken(tok[r], v, r));
    const double logp = LogProb(x + r * v, v, tok[r]);
    if (m[r] != 0) sum += Actor(logp, old[r], adv[r], m[r], clip).loss;
    if (w && w[r] != 0) ptx_sum -= w[r] * logp;
  }
  const double loss = (count > 0 ? sum / count : 0.0) + (ptx_count > 0 ? ptx_sum / ptx_count : 0.0);
  args.out[0].f32()[0] = static_cast<float>(loss);
  return OkStatus();
}

Status ActorBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const int64_t v = args.in[0].dim(-1), n = args.in[1].numel();
  const float *x = args.in[0].f32(), *old = args.in[2].f32(), *adv = args.in[3].f32(),
              *m = args.in[4].f32();
  const int32_t* tok = args.in[1].i32();
  const double clip = args.attrs ? args.attrs->Float("cliprange", 0.2) : 0.2, count = MaskSum(m, n);
  double ptx_count = 0;
  const float* w = Ptx(args, n, &ptx_count);
  const double g = count > 0 ? args.grad_out[0].f32()[0] / count : 0.0;
  const double gp = ptx_count > 0 ? args.grad_out[0].f32()[0] / ptx_count : 0.0;
  float* dx = args.grad_in[0].f32();
  ParallelFor(n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const bool ptx = w && w[r] != 0;
      if ((m[r] == 0 && !ptx) || tok[r] < 0 || tok[r] >= v) continue;
      const double logp = LogProb(x + r * v, v, tok[r]);
      double d = m[r] != 0 ? g * Actor(logp, old[r], adv[r], m[r], clip).dlogp : 0.0;
      if (ptx) d -= gp * w[r];
      if (d == 0) continue;
      const double lse = x[r * v + tok[r]] - logp;
      for (int64_t j = 0; j < v; ++j)
        dx[r * v + j] += static_cast<float>(-d * std::exp(x[r * v + j] - lse));
      dx[r * v + tok[r]] += static_cast<float>(d);
    }
  });
  return OkStatus();
}

Status ValueForward(const OpArgs& args) {
  const int64_t n = args.in[1].numel();
  const float *vals = args.in[0].f32(), *old = args.in[1].f32(), *ret = args.in[2].f32();
  const int32_t* m = args.in[3].i32();
  const double c = args.attrs ? args.attrs->Float("cliprange_value", 0.2) : 0.2;
  const double count = MaskSum(m, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double vc = std::clamp<double>(vals[i], old[i] - c, old[i] + c);
    const double a = vals[i] - double(ret[i]), b = vc - ret[i];
    sum += std::max(a * a, b * b) * m[i];
  }
  args.out[0].f32()[0] = count > 0 ? static_cast<float>(0.5 * sum / count) : 0.f;
  return OkStatus();
}

Status ValueBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const int64_t n = args.in[1].numel();
  const float *vals = args.in[0].f32(), *old = args.in[1].f32(), *ret = args.in[2].f32();
  const int32_t* m = args.in[3].i32();
  const double c = args.attrs ? args.attrs->Float("cliprange_value", 0.2) : 0.2;
  const double count = MaskSum(m, n);
  if (count <= 0) return OkStatus();
  const double g = args.grad_out[0].f32()[0] / count;
  float* dv = args.grad_in[0].f32();
  for (int64_t i = 0; i < n; ++i) {
    const double lo = old[i] - c, hi = old[i] + c, vc = std::clamp<double>(vals[i], lo, hi);
    const double a = vals[i] - double(ret[i]), b = vc - ret[i];
    const bool inside = vals[i] > lo && vals[i] < hi;
    const double d = a * a >= b * b ? a : (inside ? b : 0.0);
    dv[i] += static_cast<float>(g * d * m[i]);
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("ppo_actor_loss", Device::kCpu, DType::kF32, {ActorForward, ActorBackward}) &&
    RegisterKernel("ppo_value_loss", Device::kCpu, DType::kF32, {ValueForward, ValueBackward});

}  // namespace
}  // namespace ds::kernels::cpu
