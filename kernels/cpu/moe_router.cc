// moe_router's CPU kernel: DeepSpeed-MoE's top-1 / top-2 gating (sharded_moe.py's top1gating and
// top2gating; parallelism.md D) over gate logits [N, E], N tokens in order.
//   gates = softmax(logits) per token.
//   First choice: argmax of the gates (top-1 with noisy_gate_policy "rsample" while training:
//   argmax of logits + Gumbel noise). Second (top-2): argmax of the logits without the first,
//   Gumbel-perturbed while training unless second_expert is "argmax" (DeepSpeed's
//   top2_2nd_expert_sampling). Ties go to the lowest expert, as torch.argmax.
//   aux = E x sum_e mean_n(gates[n, e]) x (first choices of e / N), before any drop.
//   Capacity: kernels/moe_capacity.h; without drops, the most tokens an expert receives.
//   Top-1 drops: an expert keeps `capacity` of its tokens, chosen by a uniform random score while
//   training with use_rts (random token selection), else the first by token order; positions
//   follow token order among the kept. Top-2: first choices take positions in token order, the
//   second choices after all first choices; a position at or past the capacity is dropped.
//   Weights: top-1 the gate of the kept expert (0 when dropped); top-2 the gates of the kept
//   choices over their sum (clamped at fp32 epsilon).
// Random draws are a pure function of (seed, stream, token, expert), so a seeded step routes
// alike on every rank and at every expert-parallel degree.
// Backward: dL/dgates from the weights (through the renormalisation) and from aux (the ce term
// is constant), then through the softmax.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "kernels/moe_capacity.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();
enum Stream : uint64_t { kFirstNoise = 1, kSecondNoise = 2, kTokenScore = 3 };

// Uniform in (0, 1) from the counter-based stream.
double Uniform(uint64_t seed, Stream s, uint64_t index) {
  const uint64_t bits = SplitMix64(seed ^ (s * 0xD1B54A32D192ED03ull), index) >> 11;
  return (static_cast<double>(bits) + 0.5) / 9007199254740992.0;
}

float Gumbel(uint64_t seed, Stream s, uint64_t index) {
  return static_cast<float>(-std::log(-std::log(Uniform(seed, s, index))));
}

int64_t Argmax(const float* v, int64_t n, int64_t skip) {
  int64_t best = -1;
  for (int64_t e = 0; e < n; ++e)
    if (e != skip && (best < 0 || v[e] > v[best])) best = e;
  return best;
}

struct Routing {
  std::vector<int64_t> choice;  // [N, k] expert
  std::vector<int64_t> pos;     // [N, k] position in the expert's rows, -1 dropped
  int64_t capacity = 0;
};

void Choose(const OpArgs& args, const MoeGating& g, const float* logits, const float* gates,
            int64_t n, Routing* r) {
  const int64_t e_count = g.num_experts, k = g.top_k;
  const bool rsample =
      args.training && k == 1 && args.attrs->String("noisy_gate_policy", "none") == "rsample";
  const bool sample2 = args.training && args.attrs->String("second_expert", "sample") == "sample";
  r->choice.assign(n * k, 0);
  ParallelFor(n, 1024, [&](int64_t lo, int64_t hi) {
    std::vector<float> noisy(e_count);
    for (int64_t t = lo; t < hi; ++t) {
      const float* row = gates + t * e_count;
      if (rsample) {
        for (int64_t e = 0; e < e_count; ++e)
          noisy[e] = logits[t * e_count + e] + Gumbel(args.seed, kFirstNoise, t * e_count + e);
        row = noisy.data();
      }
      r->choice[t * k] = Argmax(row, e_count, -1);
      if (k == 2) {
        for (int64_t e = 0; e < e_count; ++e)
          noisy[e] = logits[t * e_count + e] +
                     (sample2 ? Gumbel(args.seed, kSecondNoise, t * e_count + e) : 0.f);
        r->choice[t * k + 1] = Argmax(noisy.data(), e_count, r->choice[t * k]);
      }
    }
  });
}

// Top-1 with drops: each expert keeps `cap` of its tokens (random scores with use_rts).
void KeepTop1(const OpArgs& args, const MoeGating& g, int64_t n, Routing* r) {
  const bool rts = args.training && args.attrs->Int("use_rts", 1) != 0;
  std::vector<std::vector<int64_t>> tokens(g.num_experts);
  for (int64_t t = 0; t < n; ++t) tokens[r->choice[t]].push_back(t);
  std::vector<char> kept(n, 1);
  for (std::vector<int64_t>& list : tokens) {
    if (static_cast<int64_t>(list.size()) <= r->capacity) continue;
    std::vector<int64_t> order = list;
    if (rts)
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return Uniform(args.seed, kTokenScore, a) > Uniform(args.seed, kTokenScore, b);
      });
    for (size_t i = r->capacity; i < order.size(); ++i) kept[order[i]] = 0;
  }
  std::vector<int64_t> next(g.num_experts, 0);
  for (int64_t t = 0; t < n; ++t) r->pos[t] = kept[t] ? next[r->choice[t]]++ : -1;
}

void Place(const OpArgs& args, const MoeGating& g, int64_t n, Routing* r) {
  const int64_t k = g.top_k;
  std::vector<int64_t> first(g.num_experts, 0), all(g.num_experts, 0);
  for (int64_t t = 0; t < n; ++t) {
    ++first[r->choice[t * k]];
    for (int64_t i = 0; i < k; ++i) ++all[r->choice[t * k + i]];
  }
  r->capacity =
      g.drop_tokens ? MoeCapacity(g, n, args.training) : *std::max_element(all.begin(), all.end());
  r->pos.assign(n * k, -1);
  if (k == 1 && g.drop_tokens) return KeepTop1(args, g, n, r);
  std::vector<int64_t> next(g.num_experts, 0);
  for (int64_t i = 0; i < k; ++i) {
    if (i == 1) next = first;  // second choices after every first choice
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = next[r->choice[t * k + i]]++;
      r->pos[t * k + i] = p < r->capacity ? p : -1;
    }
  }
}

Status Forward(const OpArgs& args) {
  const MoeGating g = MoeGatingFrom(*args.attrs);
  const int64_t e_count = g.num_experts, k = g.top_k, n = LeadingRows(args.in[0].shape());
  const float* logits = args.in[0].f32();
  float* gates = args.saved[0].f32();
  ParallelFor(n, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float* x = logits + t * e_count;
      float* p = gates + t * e_count;
      const float m = MaxArray(x, e_count);
      const float s = ExpShiftSum(x, p, e_count, m);
      for (int64_t e = 0; e < e_count; ++e) p[e] /= s;
    }
  });
  Routing r;
  Choose(args, g, logits, gates, n, &r);
  Place(args, g, n, &r);
  // aux = E sum_e me_e ce_e, summed in double in a fixed order.
  float* ce = args.saved[1].f32();
  std::vector<double> me(e_count, 0.0), first(e_count, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    first[r.choice[t * k]] += 1;
    for (int64_t e = 0; e < e_count; ++e) me[e] += gates[t * e_count + e];
  }
  double aux = 0;
  for (int64_t e = 0; e < e_count; ++e) {
    ce[e] = static_cast<float>(first[e] / n);
    aux += (me[e] / n) * (first[e] / n);
  }
  args.out[2].f32()[0] = static_cast<float>(aux * e_count);
  args.out[3].f32()[0] = static_cast<float>(r.capacity);
  const int64_t buffer = MoeBufferCapacity(g, n);
  int32_t* routes = args.out[0].i32();
  float* weights = args.out[1].f32();
  for (int64_t t = 0; t < n; ++t) {
    double kept_sum = 0;
    for (int64_t i = 0; i < k; ++i)
      if (r.pos[t * k + i] >= 0) kept_sum += gates[t * e_count + r.choice[t * k + i]];
    const double denom = k == 1 ? 1.0 : std::max<double>(kept_sum, kEps);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t e = r.choice[t * k + i], p = r.pos[t * k + i];
      routes[t * k + i] = p >= 0 ? static_cast<int32_t>(e * buffer + p) : -1;
      weights[t * k + i] = p >= 0 ? static_cast<float>(gates[t * e_count + e] / denom) : 0.f;
    }
  }
  return OkStatus();
}

// dL/dgates of one token from its weights' gradients (top-2: through the renormalisation).
void WeightGrad(const float* gate, const int32_t* routes, const float* dw, int64_t k,
                int64_t buffer, float* dg) {
  double kept = 0, dot = 0;
  for (int64_t i = 0; i < k; ++i)
    if (routes[i] >= 0) {
      kept += gate[routes[i] / buffer];
      dot += static_cast<double>(dw[i]) * gate[routes[i] / buffer];
    }
  if (k == 1) {
    if (routes[0] >= 0) dg[routes[0] / buffer] += dw[0];
    return;
  }
  const double denom = std::max<double>(kept, kEps);
  for (int64_t i = 0; i < k; ++i) {
    if (routes[i] < 0) continue;
    double d = dw[i] / denom;
    if (kept > kEps) d -= dot / (denom * denom);
    dg[routes[i] / buffer] += static_cast<float>(d);
  }
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const MoeGating g = MoeGatingFrom(*args.attrs);
  const int64_t e_count = g.num_experts, k = g.top_k, n = LeadingRows(args.in[0].shape());
  const int64_t buffer = MoeBufferCapacity(g, n);
  const float* gates = args.saved[0].f32();
  const float* ce = args.saved[1].f32();
  const int32_t* routes = args.out[0].i32();
  const float* dw = args.grad_out[1].defined() ? args.grad_out[1].f32() : nullptr;
  const float daux = args.grad_out[2].defined() ? args.grad_out[2].f32()[0] : 0.f;
  float* dlogits = args.grad_in[0].f32();
  ParallelFor(n, 256, [&](int64_t lo, int64_t hi) {
    std::vector<float> dg(e_count);
    for (int64_t t = lo; t < hi; ++t) {
      const float* p = gates + t * e_count;
      for (int64_t e = 0; e < e_count; ++e)
        dg[e] = static_cast<float>(static_cast<double>(daux) * e_count * ce[e] / n);
      if (dw) WeightGrad(p, routes + t * k, dw + t * k, k, buffer, dg.data());
      double dot = 0;
      for (int64_t e = 0; e < e_count; ++e) dot += static_cast<double>(p[e]) * dg[e];
      for (int64_t e = 0; e < e_count; ++e)
        dlogits[t * e_count + e] += p[e] * static_cast<float>(dg[e] - dot);
    }
  });
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("moe_router", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
