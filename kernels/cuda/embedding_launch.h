// Host launchers for token and position embeddings and rotary embedding (embedding.cu,
// rope.cu). float and __nv_bfloat16 storage, fp32 compute; ids are int32 device arrays.
// Asynchronous on `stream`; each returns the launch error. Backward launchers ACCUMULATE
// (+=); a null gradient is skipped. Semantics: kernels/cpu/embedding.cc,
// position_embedding.cc, rope.cc.
//
// An id outside [0, vocab) cannot be reported as a Status without synchronizing, so the
// forward writes NaN to that token's row instead (the CPU kernel returns InvalidArgument)
// and the backward ignores the token.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels {

#define DS_EMBEDDING_DECLARE(T)                                                                 \
  /* out[i, :] = weight[ids[i], :], i < n; weight [vocab, cols] */                              \
  cudaError_t LaunchEmbeddingForward(const int32_t* ids, const T* weight, T* out, int64_t n,    \
                                     int64_t vocab, int64_t cols, cudaStream_t stream);         \
  /* dweight[ids[i], :] += dout[i, :]; deterministic (fixed order per row, no atomics) */       \
  cudaError_t LaunchEmbeddingBackward(const int32_t* ids, const T* dout, T* dweight, int64_t n, \
                                      int64_t vocab, int64_t cols, cudaStream_t stream);        \
  /* out[b, t, :] = x[b, t, :] + wpe[t, :]; x [batch, seq, cols] */                             \
  cudaError_t LaunchPositionEmbeddingForward(const T* x, const T* wpe, T* out, int64_t batch,   \
                                             int64_t seq, int64_t cols, cudaStream_t stream);   \
  /* dx += dout; dwpe[t, :] += sum_b dout[b, t, :] */                                           \
  cudaError_t LaunchPositionEmbeddingBackward(const T* dout, T* dx, T* dwpe, int64_t batch,     \
                                              int64_t seq, int64_t cols, cudaStream_t stream);  \
  /* Rotary embedding on packed qkv [batch * seq, (n_head + 2 n_kv_head) head_dim], HF          \
     rotate_half convention; v heads pass through. sign = +1 rotates (forward), -1 applies      \
     the transpose (backward). dst = or += (accumulate) the result. */                          \
  cudaError_t LaunchRope(const T* src, T* dst, int64_t batch, int64_t seq, int64_t n_head,      \
                         int64_t n_kv_head, int64_t head_dim, double theta, float sign,         \
                         bool accumulate, cudaStream_t stream);

DS_EMBEDDING_DECLARE(float)
DS_EMBEDDING_DECLARE(__nv_bfloat16)
DS_EMBEDDING_DECLARE(__half)

#undef DS_EMBEDDING_DECLARE

}  // namespace ds::kernels
