// attention's fused bf16 path (attention_fused_bf16.cc): every product of a head in AVX512_BF16
// registers, for attention_bf16.cc to dispatch to (Bf16AttentionPath::kFused). Internal to the
// bf16 attention path; the arguments are Bf16AttentionForward's and Bf16AttentionBackward's.
#pragma once

#include "kernels/cpu/attention_bf16.h"
#include "runtime/core/tensor.h"

namespace ds::kernels::cpu {

// The CPU has AVX512_BF16 (as DS_CPU_ISA leaves it) and the heads are 16 to 256 wide, in 16s.
bool FusedBf16AttentionFits(const Bf16AttentionShape& s);
void FusedBf16AttentionForward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                               float* lse);
void FusedBf16AttentionBackward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                const float* dout, const float* lse, float* dqkv);

}  // namespace ds::kernels::cpu
