// attention's bf16 path (kernels/cpu/attention.cc takes it in a bf16 step where oneDNN multiplies
// bf16 natively, for plain causal attention): the per-head products in bf16 with fp32
// accumulation and the softmax in fp32, as PyTorch's bf16 attention computes them (P rounded to
// bf16 before P V). On AVX512_BF16 without AMX the fused path (attention_fused_bf16.h) runs them
// head by head in registers; elsewhere (below) they are batched over every head of a query block
// in one oneDNN matmul each.
// Inputs and outputs are the fp32 kernel's: qkv [B, T, (H + 2 Hkv) D], out [B, T, H D] (either
// may be a bf16 activation), the log-sum-exp [B, H, T]; the gradients are added into dqkv.
//
//   forward, per block of query rows [i0, i0 + m), against the keys [0, i0 + m) it sees (blocks of
//   64), or on AMX against all T keys in blocks of 128 (past the diagonal P is 0; the .cc says
//   why):
//     S = scale Q K^T (fp32), P = softmax(S) (causal; rounded to bf16), O = P V;  lse.
//   backward: S again, P = exp(S - lse), dP = dO V^T, dS = P (dP - rowsum(dO O)),
//     dQ += scale dS K, dK += scale dS^T Q, dV += P^T dO (on AMX as dK^T = scale Q^T dS and
//     dV^T = dO^T P; summed over the blocks, added into dqkv once).
// Layouts are oneDNN 2.6's for its AMX kernels, which it picks only for a dense A and C (and a
// whole B): K and V packed head-major in bf16 once per call, Q and dO block by block (on AMX also
// transposed, for dK^T and dV^T), every product's output in dense scratch, then written or added
// into out and dqkv. Each block is 2 products forward and 5 backward (for grouped-query attention
// dK and dV one per query head of the group). attention_bf16_blocks.h holds the layouts the
// forward (attention_bf16.cc) and the backward (attention_bf16_backward.cc) share.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/core/tensor.h"

namespace ds::kernels::cpu {

struct Bf16AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.f;
};

// How the path runs:
//   kFused (AVX512_BF16 without AMX, heads 16-256 wide in 16s): each thread takes whole heads and
//     runs their products in registers (attention_fused_bf16.h), no oneDNN call;
//   kCausal: oneDNN products batched over heads, a query block against the keys it sees (where
//     the fused path does not fit);
//   kWhole (AMX): the same against all keys (oneDNN's AMX kernels take a B operand only whole).
// Chosen from the CPU and oneDNN's instruction set; tests force each (process-wide; set it before
// any attention runs, as the primitives are made per blocking). A forced kFused where it does not
// fit runs kCausal.
enum class Bf16AttentionPath { kFused, kCausal, kWhole };
void SetBf16AttentionPath(Bf16AttentionPath path);
// The path a shape takes here.
Bf16AttentionPath Bf16AttentionPathFor(const Bf16AttentionShape& s);

// The oneDNN primitives of every block's products, made at plan time (OpDef prepare).
Status PrepareBf16Attention(const Bf16AttentionShape& s, bool backward);
// qkv and out fp32 or bf16 (bf16 activations); dout, lse and dqkv fp32.
void Bf16AttentionForward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          float* lse);
void Bf16AttentionBackward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                           const float* dout, const float* lse, float* dqkv);

}  // namespace ds::kernels::cpu
