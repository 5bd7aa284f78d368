#include "zero/optimizer.h"

#include "runtime/core/cpu_adam.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

namespace ds::zero {

StatusOr<OptimizerOptions::Type> ParseOptimizerType(const std::string& name, bool adam_w_mode) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "adamw") return OptimizerOptions::Type::kAdamW;
  if (n == "adam")
    return adam_w_mode ? OptimizerOptions::Type::kAdamW : OptimizerOptions::Type::kAdam;
  if (n == "sgd") return OptimizerOptions::Type::kSgd;
  return InvalidArgumentError("unsupported optimizer type \"" + name + "\" (Adam, AdamW, SGD)");
}

Optimizer::Optimizer(const OptimizerOptions& options, ParamStore* params)
    : opt_(options), params_(params) {
  const size_t bytes =
      static_cast<size_t>(std::max<int64_t>(1, params->shard_elements())) * sizeof(float);
  sparse_ = params->sparse_host() || params->states_swapped();
  auto alloc = [&] { return sparse_ ? Buffer::AllocateSparse(bytes) : Buffer::Allocate(bytes); };
  if (opt_.type == OptimizerOptions::Type::kSgd) {
    if (opt_.momentum != 0) m_ = alloc();
  } else {
    m_ = alloc();
    v_ = alloc();
  }
}

void Optimizer::ReleaseState() {
  if (!params_->sparse_host()) return;
  m_.Release(0, m_.size(), false);
  v_.Release(0, v_.size(), false);
}

void Optimizer::ReleaseStateRange(int64_t pos, int64_t n) {
  for (Buffer* b : {&m_, &v_})
    if (b->data()) b->Release(pos * sizeof(float), n * sizeof(float), false);
}

std::vector<Optimizer::StateBuffer> Optimizer::state() {
  if (opt_.type == OptimizerOptions::Type::kSgd) {
    if (!m_.data()) return {};
    return {{"momentum_buffer", m_.f32()}};
  }
  return {{"exp_avg", m_.f32()}, {"exp_avg_sq", v_.f32()}};
}

void Optimizer::BeginStep() {
  ++step_;
  params_->MarkModelChanged();
  bc1_ = bc2_ = 1.0f;  // bias_correction false: the raw moments
  if (opt_.bias_correction) {
    bc1_ = 1.0f - static_cast<float>(std::pow(opt_.beta1, static_cast<double>(step_)));
    bc2_ = 1.0f - static_cast<float>(std::pow(opt_.beta2, static_cast<double>(step_)));
  }
}

void Optimizer::Step(float lr, float grad_scale) {
  BeginStep();
  StepShard(0, INT64_MAX, ShardStates(), lr, grad_scale);
}

void Optimizer::StepShard(int64_t lo_pos, int64_t hi_pos, const ShardStates& at, float lr,
                          float grad_scale) {
  const std::vector<ParamSlot>& slots = params_->slots();  // ascending offsets
  for (const ShardSegment& g : params_->segments()) {
    const int64_t from = std::max(g.shard_offset, lo_pos);
    const int64_t to = std::min(g.shard_offset + g.count, hi_pos);
    if (from >= to) continue;
    const int64_t begin = g.flat_begin + (from - g.shard_offset);
    const int64_t end = g.flat_begin + (to - g.shard_offset);
    auto it =
        std::upper_bound(slots.begin(), slots.end(), begin,
                         [](int64_t v, const ParamSlot& s) { return v < s.offset + s.numel; });
    for (; it != slots.end() && it->offset < end; ++it) {
      const int64_t lo = std::max(it->offset, begin), hi = std::min(it->offset + it->numel, end);
      if (lo >= hi) continue;
      const int64_t pos = g.shard_offset + (lo - g.flat_begin);
      if (opt_.type == OptimizerOptions::Type::kSgd)
        StepSgd(*it, lo, hi, pos, at, lr, grad_scale);
      else
        StepAdam(*it, lo, hi, pos, at, lr, grad_scale);
    }
  }
}

// torch.optim.AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). Adam adds wd*p to g instead. The fused
// loop and its rounding: runtime/core/cpu_adam.h.
void Optimizer::StepAdam(const ParamSlot& s, int64_t lo, int64_t hi, int64_t pos,
                         const ShardStates& at, float lr, float grad_scale) {
  const int64_t n = hi - lo;
  const float bc1 = bc1_, bc2 = bc2_;
  float* p = Master(at, lo, pos);
  float* m = State(at, 0, m_, pos);
  float* v = State(at, 1, v_, pos);
  const DType gt = params_->model_dtype();
  const void* g = params_->GradAt(lo);
  void* model = params_->ModelOutAt(lo);
  const float wd = s.decay ? opt_.weight_decay : 0.0f;
  const bool decoupled = opt_.type == OptimizerOptions::Type::kAdamW;
  AdamRun r{p, m, v, g, model, gt, n};
  r.grad_scale = grad_scale;
  r.l2 = decoupled ? 0.0f : wd;
  r.b1 = opt_.beta1;
  r.b2 = opt_.beta2;
  r.eps = opt_.eps;
  r.step_size = lr / bc1;
  r.inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  r.decay = decoupled ? 1.0f - lr * wd : 1.0f;
  AdamUpdateThreaded(r);  // runtime/core/cpu_adam.h: AVX-512, AVX2 or scalar
}

// torch.optim.SGD (dampening 0, not Nesterov): g += wd p; buf = mu buf + g; p -= lr buf.
void Optimizer::StepSgd(const ParamSlot& s, int64_t lo, int64_t hi, int64_t pos,
                        const ShardStates& at, float lr, float grad_scale) {
  const int64_t n = hi - lo;
  float* p = Master(at, lo, pos);
  float* buf = m_.data() ? State(at, 0, m_, pos) : nullptr;
  const DType gt = params_->model_dtype();
  const void* g = params_->GradAt(lo);
  void* model = params_->ModelOutAt(lo);
  SgdRun r{p, buf, g, model, gt, n};
  r.grad_scale = grad_scale;
  r.wd = s.decay ? opt_.weight_decay : 0.0f;
  r.mu = opt_.momentum;
  r.lr = lr;
  r.first = step_ == 1;
  SgdUpdateThreaded(r);
}

}  // namespace ds::zero
