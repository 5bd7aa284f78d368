// Activations a bf16 host step stores in bf16 (Kernel::bf16_act_inputs / bf16_act_outputs): the
// kernels that declare them read and write through these, which hand fp32 tensors through as
// they are and widen or round bf16 ones a chunk at a time, so one loop serves both dtypes.
//
//   float xb[kChunk], yb[kChunk];
//   const float* x = ActRead(args.in[0], at, m, xb);  // fp32 values of elements [at, at + m)
//   float* y = ActOut(args.out[0], at, yb);           // where to write them
//   for (int64_t i = 0; i < m; ++i) y[i] = f(x[i]);
//   ActStore(args.out[0], at, m, y);                  // rounds into a bf16 tensor (once)
//
// The conversions run on the calling thread (dtype.h's *Run: no OpenMP region per chunk).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/op.h"
#include "runtime/base/status.h"
#include "runtime/core/dtype.h"
#include "runtime/core/tensor.h"

namespace ds::kernels::cpu {

inline bool IsBf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

inline const uint16_t* Bf16Data(const Tensor& t) { return static_cast<const uint16_t*>(t.data()); }

// The fp32 values of elements [at, at + n): the tensor's own, or widened into buf.
inline const float* ActRead(const Tensor& t, int64_t at, int64_t n, float* buf) {
  if (!IsBf16(t)) return t.f32() + at;
  WidenBf16Run(Bf16Data(t) + at, buf, n);
  return buf;
}

// One element's value.
inline float ActAt(const Tensor& t, int64_t i) {
  return IsBf16(t) ? Bf16ToFloat(Bf16Data(t)[i]) : t.f32()[i];
}

// Where elements [at, ...) are written: the tensor itself, or buf for ActStore to round.
inline float* ActOut(const Tensor& t, int64_t at, float* buf) {
  return IsBf16(t) ? buf : t.f32() + at;
}

// Rounds the n values ActOut handed out into a bf16 tensor; nothing for an fp32 one.
inline void ActStore(const Tensor& t, int64_t at, int64_t n, const float* values) {
  if (IsBf16(t)) RoundToBf16Run(values, static_cast<uint16_t*>(t.data()) + at, n);
}

// A bf16 gradient can only be written whole: grad_in[k] in bf16 must be marked fresh
// (OpArgs::fresh_grads), which the executor guarantees (Note [bf16 activations]).
inline Status CheckBf16GradFresh(const OpArgs& args, int k, const char* op) {
  if (!IsBf16(args.grad_in[k]) || (args.fresh_grads >> k & 1u)) return OkStatus();
  return InvalidArgumentError(std::string(op) + ": bf16 gradient of input " + std::to_string(k) +
                              " is not fresh; it can only be written whole");
}

}  // namespace ds::kernels::cpu
