// Global gradient norm over a ParamStore, for clipping and overflow detection, in one
// pass (fp64 accumulation). The norm is of the unscaled gradient: each element is
// multiplied by `inv_loss_scale` first.
#pragma once

#include "zero/param_store.h"

namespace ds::zero {

struct GradNorm {
  double norm = 0;  // L2 norm; inf or nan when some gradient is not finite
  bool finite = true;
};

GradNorm ComputeGradNorm(const ParamStore& params, float inv_loss_scale);

// Sum of squares of the (still scaled) gradients of flat elements [begin, end): each data-
// parallel rank sums its share and the shares are all-reduced.
double GradSquaredSum(const ParamStore& params, int64_t begin, int64_t end);
// The same over elements [begin, end) of any fp32 / bf16 / fp16 buffer (a gradient shard).
double SquaredSum(const void* data, DType dtype, int64_t begin, int64_t end);

// DeepSpeed's clip coefficient: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
float ClipCoefficient(double norm, float max_norm);

}  // namespace ds::zero
