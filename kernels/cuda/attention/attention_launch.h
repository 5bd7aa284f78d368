// Host launchers for causal attention on CUDA (flash_forward.cu, flash_backward.cu,
// attention_simple.cu). Plain CUDA, no ds headers, so both nvcc and the registry glue
// (attention.cc) include it. Launchers are asynchronous on `stream` and return the launch
// error without synchronizing; pointers are device memory.
//
// Layouts are the CPU op's (kernels/cpu/attention.cc):
//   qkv  [B, T, (H + 2 Hkv) D]  q heads, then k heads, then v heads; dqkv the same
//   out  [B, T, H D]            dout the same
//   lse  [B, H, T] fp32         logsumexp of each row of scale Q K^T (causal), natural log
// q head h reads kv head h / (H / Hkv); scale = 1 / sqrt(D).
//
// Two implementations:
//   flash (bf16, D in {64, 128}, 16-byte aligned pointers): tensor cores (mma.sync
//     m16n8k16, fp32 accumulation), Q/K/V tiles in shared memory, online softmax.
//   simple (fp32 or bf16, any D <= 256): one warp per row, fp32 math, no shared tiles.
// Backward needs scratch (AttentionScratchBytes): D_i = rowsum(dO * O) [B, H, T] fp32
// and, for the flash path, an fp32 dQ accumulator [B, H, T, D].
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ds::kernels::attention {

struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t row() const { return (n_head + 2 * n_kv_head) * head_dim; }  // elements per token
};

// kF16 always takes the simple path (the flash kernels use bf16 tensor-core instructions).
enum class AttentionType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// Which kernels a call takes.
enum class AttentionPath : int { kSimple = 0, kFlash = 1 };

constexpr int64_t kMaxHeadDim = 256;

// Flash when the type is bf16, D is 64 or 128 and every pointer given is 16-byte aligned;
// otherwise simple. Pass nullptr for pointers a call does not use.
AttentionPath ChooseAttentionPath(const AttentionShape& s, AttentionType t, const void* p0,
                                  const void* p1, const void* p2, const void* p3);

// Bytes of scratch LaunchAttentionBackward needs for `path`.
size_t AttentionScratchBytes(const AttentionShape& s, AttentionPath path);

// out and lse from qkv. Errors: cudaErrorInvalidValue for a shape the kernels cannot take
// (sizes < 1 except an empty batch or sequence, H not a multiple of Hkv, D > 256, B H > 2^31,
// the flash path asked for where it does not apply).
cudaError_t LaunchAttentionForward(const AttentionShape& s, AttentionType t, AttentionPath path,
                                   const void* qkv, void* out, float* lse, cudaStream_t stream);

// dqkv += d(attention)/d(qkv) . dout: ACCUMULATES (kernels/op.h). Recomputes P from qkv and
// lse; reads out only for D_i. `scratch` has AttentionScratchBytes(s, path) bytes.
cudaError_t LaunchAttentionBackward(const AttentionShape& s, AttentionType t, AttentionPath path,
                                    const void* qkv, const void* out, const void* dout,
                                    const float* lse, void* dqkv, void* scratch,
                                    cudaStream_t stream);

// Pieces, declared for the dispatcher (attention_dispatch.cu); callers use the two above.
namespace internal {
cudaError_t LaunchFlashForward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                               cudaStream_t stream);
// dqkv += ... through dq_acc [B, H, T, D] fp32 (zeroed here) and d_rows = D_i [B, H, T].
cudaError_t LaunchFlashBackward(const AttentionShape& s, const void* qkv, const void* dout,
                                const float* lse, const float* d_rows, float* dq_acc, void* dqkv,
                                cudaStream_t stream);
cudaError_t LaunchSimpleForward(const AttentionShape& s, AttentionType t, const void* qkv,
                                void* out, float* lse, cudaStream_t stream);
cudaError_t LaunchSimpleBackward(const AttentionShape& s, AttentionType t, const void* qkv,
                                 const void* dout, const float* lse, const float* d_rows,
                                 void* dqkv, cudaStream_t stream);
// d_rows[b, h, i] = sum_d dout[b, i, h D + d] * out[b, i, h D + d], in fp32.
cudaError_t LaunchRowDot(const AttentionShape& s, AttentionType t, const void* out,
                         const void* dout, float* d_rows, cudaStream_t stream);
}  // namespace internal

}  // namespace ds::kernels::attention
