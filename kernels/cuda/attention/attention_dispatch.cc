// Chooses between the flash (tensor-core) and simple attention kernels and checks shapes;
// see attention_launch.h. Host code only (g++).
#include <cstdint>

#include "kernels/cuda/attention/attention_launch.h"

namespace ds::kernels::attention {
namespace {

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool ValidShape(const AttentionShape& s) {
  if (s.batch < 0 || s.seq < 0) return false;
  if (s.n_head < 1 || s.n_kv_head < 1 || s.n_head % s.n_kv_head != 0) return false;
  if (s.head_dim < 1 || s.head_dim > kMaxHeadDim) return false;
  if (s.seq > (int64_t{1} << 30) || s.batch * s.n_head > (int64_t{1} << 31) - 1) return false;
  return true;
}

// D_i [B, H, T] first, then (flash) dq_acc [B, H, T, D]; 256-byte aligned pieces.
size_t RowBytes(const AttentionShape& s) {
  const size_t bytes = static_cast<size_t>(s.batch * s.n_head * s.seq) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

}  // namespace

AttentionPath ChooseAttentionPath(const AttentionShape& s, AttentionType t, const void* p0,
                                  const void* p1, const void* p2, const void* p3) {
  if (t != AttentionType::kBF16 || (s.head_dim != 64 && s.head_dim != 128))
    return AttentionPath::kSimple;
  for (const void* p : {p0, p1, p2, p3})
    if (p != nullptr && !Aligned16(p)) return AttentionPath::kSimple;
  return AttentionPath::kFlash;
}

size_t AttentionScratchBytes(const AttentionShape& s, AttentionPath path) {
  if (!ValidShape(s)) return 0;
  size_t bytes = RowBytes(s);
  if (path == AttentionPath::kFlash)
    bytes += static_cast<size_t>(s.batch * s.n_head * s.seq * s.head_dim) * sizeof(float);
  return bytes;
}

cudaError_t LaunchAttentionForward(const AttentionShape& s, AttentionType t, AttentionPath path,
                                   const void* qkv, void* out, float* lse, cudaStream_t stream) {
  if (!ValidShape(s)) return cudaErrorInvalidValue;
  if (path == AttentionPath::kFlash) {
    if (ChooseAttentionPath(s, t, qkv, out, nullptr, nullptr) != AttentionPath::kFlash)
      return cudaErrorInvalidValue;
    return internal::LaunchFlashForward(s, qkv, out, lse, stream);
  }
  return internal::LaunchSimpleForward(s, t, qkv, out, lse, stream);
}

cudaError_t LaunchAttentionBackward(const AttentionShape& s, AttentionType t, AttentionPath path,
                                    const void* qkv, const void* out, const void* dout,
                                    const float* lse, void* dqkv, void* scratch,
                                    cudaStream_t stream) {
  if (!ValidShape(s)) return cudaErrorInvalidValue;
  if (s.batch * s.seq == 0) return cudaSuccess;
  float* d_rows = static_cast<float*>(scratch);
  cudaError_t err = internal::LaunchRowDot(s, t, out, dout, d_rows, stream);
  if (err != cudaSuccess) return err;
  if (path == AttentionPath::kFlash) {
    if (ChooseAttentionPath(s, t, qkv, dout, dqkv, nullptr) != AttentionPath::kFlash)
      return cudaErrorInvalidValue;
    float* dq_acc = reinterpret_cast<float*>(static_cast<char*>(scratch) + RowBytes(s));
    return internal::LaunchFlashBackward(s, qkv, dout, lse, d_rows, dq_acc, dqkv, stream);
  }
  return internal::LaunchSimpleBackward(s, t, qkv, dout, lse, d_rows, dqkv, stream);
}

}  // namespace ds::kernels::attention
