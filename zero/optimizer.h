// Optimizers over the flat fp32 master weights of a ParamStore: AdamW (decoupled weight
// decay), Adam (L2 penalty added to the gradient, DeepSpeed's adam_w_mode=false), and SGD
// with momentum, each as one fused pass per parameter that also reads 16-bit gradients,
// applies the gradient scale (loss-scale unscaling x clipping), and writes the 16-bit
// model copy. Update rules match torch.optim (AdamW, Adam, SGD without dampening).
// Weight decay applies to parameters of rank >= 2 only (Megatron's default: no decay on
// biases and norm gains). Not thread-safe; the step parallelizes internally.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zero/param_store.h"

namespace ds::zero {

struct OptimizerOptions {
  enum class Type { kAdamW, kAdam, kSgd };
  Type type = Type::kAdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;  // SGD
};

// Parses DeepSpeed's optimizer type names ("Adam", "AdamW", "SGD", case-insensitive).
// "Adam" with adam_w_mode (DeepSpeed's default true) is AdamW.
StatusOr<OptimizerOptions::Type> ParseOptimizerType(const std::string& name, bool adam_w_mode);

class Optimizer {
 public:
  // Updates the flat elements `params` owns (ParamStore::segments(): everything unless
  // ParamStore::Shard was called, which must come first); the optimizer state is allocated
  // in the store's shard space, for the owned elements alone.
  Optimizer(const OptimizerOptions& options, ParamStore* params);

  // One update of every parameter with learning rate `lr`; each gradient is multiplied by
  // `grad_scale` first. Increments step().
  void Step(float lr, float grad_scale);

  int64_t step() const { return step_; }
  void set_step(int64_t s) { step_ = s; }
  const OptimizerOptions& options() const { return opt_; }
  // State buffers with their names ("exp_avg", "exp_avg_sq", "momentum_buffer") in the
  // store's shard space (ParamStore::segments() maps it to flat elements), for checkpoints.
  struct StateBuffer {
    std::string name;
    float* data;  // ParamStore::shard_elements() floats
  };
  std::vector<StateBuffer> state();
  // With a sparse_host ParamStore (the states live on a device): hands the state buffers'
  // pages back; they read zero until written again.
  void ReleaseState();
  // Resident bytes of the state buffers, for memory profiles.
  size_t ResidentBytes() const { return m_.ResidentBytes() + v_.ResidentBytes(); }

 private:
  // Flat elements [lo, hi) of slot `s`, owned, at shard position `pos`.
  void StepAdam(const ParamSlot& s, int64_t lo, int64_t hi, int64_t pos, float lr, float grad_scale,
                float bc1, float bc2);
  void StepSgd(const ParamSlot& s, int64_t lo, int64_t hi, int64_t pos, float lr, float grad_scale);

  OptimizerOptions opt_;
  ParamStore* params_;
  int64_t step_ = 0;
  Buffer m_, v_;
};

}  // namespace ds::zero
