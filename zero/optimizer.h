// Optimizers over the flat fp32 master weights of a ParamStore: AdamW (decoupled weight
// decay), Adam (L2 penalty added to the gradient, DeepSpeed's adam_w_mode=false), and SGD
// with momentum, each as one fused pass per parameter that also reads 16-bit gradients,
// applies the gradient scale (loss-scale unscaling x clipping), and writes the 16-bit
// model copy. Update rules match torch.optim (AdamW, Adam, SGD without dampening).
// Weight decay applies to parameters of rank >= 2 only (Megatron's default: no decay on
// biases and norm gains). Not thread-safe; the step parallelizes internally.
#pragma once

#include <cstddef>
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
  float momentum = 0.0f;        // SGD
  bool bias_correction = true;  // Adam: divide the moments by 1 - beta^t
};

// Parses DeepSpeed's optimizer type names ("Adam", "AdamW", "SGD", case-insensitive).
// "Adam" with adam_w_mode (DeepSpeed's default true) is AdamW.
StatusOr<OptimizerOptions::Type> ParseOptimizerType(const std::string& name, bool adam_w_mode);

// Where a step finds the fp32 state of shard position `pos`: `master[pos - base]`, and
// `state[i][pos - base]` for the i-th optimizer state; a null pointer: the ParamStore's master
// (MasterAt) or the optimizer's own buffer. The NVMe swapper steps a sub-group in its swap
// buffer this way (zero/optimizer_swapper.h).
struct ShardStates {
  float* master = nullptr;
  float* state[2] = {nullptr, nullptr};
  int64_t base = 0;
};

class Optimizer {
 public:
  // Updates the flat elements `params` owns (ParamStore::segments(): everything unless
  // ParamStore::Shard was called, which must come first); the optimizer state is allocated
  // in the store's shard space, for the owned elements alone.
  Optimizer(const OptimizerOptions& options, ParamStore* params);

  // One update of every parameter with learning rate `lr`; each gradient is multiplied by
  // `grad_scale` first. Increments step(). Equal to BeginStep() and one StepShard over all.
  void Step(float lr, float grad_scale);
  // A step in pieces: BeginStep once (increments step(), fixes the bias corrections), then
  // StepShard over shard positions [lo, hi) as often as needed, each position once, with the
  // states where `at` says. Element for element the same as Step.
  void BeginStep();
  void StepShard(int64_t lo, int64_t hi, const ShardStates& at, float lr, float grad_scale);

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
  // Hands back the pages of shard positions [pos, pos + n) of every state buffer (sparse
  // buffers; a dense one is zeroed): the swapper moved them to the swap file.
  void ReleaseStateRange(int64_t pos, int64_t n);
  // The state buffers are sparse (no memory until touched): sparse_host stores and stores whose
  // states are swapped to NVMe (ParamStore::states_swapped).
  bool sparse_state() const { return sparse_; }
  // Resident bytes of the state buffers, for memory profiles.
  size_t ResidentBytes() const { return m_.ResidentBytes() + v_.ResidentBytes(); }

 private:
  // Flat elements [lo, hi) of slot `s`, owned, at shard position `pos`.
  void StepAdam(const ParamSlot& s, int64_t lo, int64_t hi, int64_t pos, const ShardStates& at,
                float lr, float grad_scale);
  void StepSgd(const ParamSlot& s, int64_t lo, int64_t hi, int64_t pos, const ShardStates& at,
               float lr, float grad_scale);
  float* Master(const ShardStates& at, int64_t lo, int64_t pos) const {
    return at.master ? at.master + (pos - at.base) : params_->MasterAt(lo);
  }
  float* State(const ShardStates& at, int i, const Buffer& own, int64_t pos) const {
    return at.state[i] ? at.state[i] + (pos - at.base) : own.f32() + pos;
  }

  OptimizerOptions opt_;
  ParamStore* params_;
  int64_t step_ = 0;
  float bc1_ = 1, bc2_ = 1;  // bias corrections of the step BeginStep began
  bool sparse_ = false;
  Buffer m_, v_;
};

}  // namespace ds::zero
