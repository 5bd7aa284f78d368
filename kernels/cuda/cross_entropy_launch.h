// Host launchers for softmax cross-entropy over a vocabulary (cross_entropy.cu); semantics
// of kernels/cpu/cross_entropy.cc. logits are `rows` rows of `vocab` (float or
// __nv_bfloat16 storage), targets int32 [rows], lse the op's fp32 saved buffer [rows].
// Asynchronous on `stream`; each returns the launch error.
//
// Forward: one pass over each row computes lse (online max and sum), then one block
// reduces the fp32 loss = mean over non-ignored rows of lse - logit[target] (0 when every row
// is ignored) into loss[0]. A target outside [0, vocab) that is not ignore_index makes the
// loss NaN (the CPU kernel returns InvalidArgument; a device kernel cannot without a sync).
// Backward: dlogits[r, :] += dloss[0] (fp32, like the loss) / count * (softmax_r -
// onehot(target_r)), reading each row once; the probabilities are never stored.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels {

#define DS_CROSS_ENTROPY_DECLARE(T)                                                              \
  cudaError_t LaunchCrossEntropyForward(const T* logits, const int32_t* targets, float* lse,     \
                                        float* loss, int64_t rows, int64_t vocab,                \
                                        int64_t ignore_index, cudaStream_t stream);              \
  cudaError_t LaunchCrossEntropyBackward(                                                        \
      const T* logits, const int32_t* targets, const float* lse, const float* dloss, T* dlogits, \
      int64_t rows, int64_t vocab, int64_t ignore_index, cudaStream_t stream);

DS_CROSS_ENTROPY_DECLARE(float)
DS_CROSS_ENTROPY_DECLARE(__nv_bfloat16)
DS_CROSS_ENTROPY_DECLARE(__half)

#undef DS_CROSS_ENTROPY_DECLARE

}  // namespace ds::kernels
