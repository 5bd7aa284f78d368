// attention on CUDA (f32, bf16): the registry glue. Same inputs, outputs, attrs and saved
// buffer as the CPU op (kernels/cpu/attention.cc): in qkv [B, T, (H + 2 Hkv) D], out
// [B, T, H D], attrs n_head (required) and n_kv_head (default n_head), saved lse [B, H, T]
// fp32. Backward accumulates into dqkv and does nothing when dqkv is undefined.
//
// Launches go to the thread's cuda::CurrentStream(). bf16 with D 64 or 128 (16-byte aligned
// tensors) takes the tensor-core flash kernels, everything else the simple kernels
// (attention_launch.h). Backward scratch (D_i, and the flash path's fp32 dQ accumulator) is
// kept per (device, stream) and only grows: allocation happens on the first call of a new
// largest shape, never in a steady step loop.
#include <map>
#include <mutex>
#include <utility>

#include "kernels/attention_options.h"
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/registry.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/stream_context.h"

namespace ds::kernels::attention {
namespace {

// Device scratch per (device, stream), grown on demand. Thread-safe; the memory of a
// stream is only used by work queued on that stream, so reuse across calls is ordered.
class ScratchCache {
 public:
  StatusOr<void*> Get(cudaStream_t stream, size_t bytes) {
    if (bytes == 0) return static_cast<void*>(nullptr);
    int device = 0;
    DS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu_);
    Block& blk = blocks_[{device, stream}];
    if (blk.bytes < bytes) {
      // cudaFree waits for the device, so work still using the old block finishes first.
      if (blk.ptr != nullptr) DS_CUDA_RETURN_IF_ERROR(cudaFree(blk.ptr));
      blk = Block{};
      DS_CUDA_RETURN_IF_ERROR(cudaMalloc(&blk.ptr, bytes));
      blk.bytes = bytes;
    }
    return blk.ptr;
  }

 private:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::mutex mu_;
  std::map<std::pair<int, cudaStream_t>, Block> blocks_;  // guarded by mu_
};

ScratchCache& Scratch() {
  static ScratchCache* cache = new ScratchCache();  // lives as long as the process
  return *cache;
}

// Validates the call against the CPU op's contract; fills the shape.
Status MakeShape(const OpArgs& args, DType dtype, AttentionShape* s) {
  if (args.in.empty() || args.out.empty() || args.saved.empty())
    return InvalidArgumentError("attention (cuda): needs qkv, out and the saved lse");
  if (args.in.size() > 1)
    return UnimplementedError(
        "attention (cuda): the left-padding mask (input pad, RLHF's prompts of several lengths) "
        "and packed documents' starts (data.reset_attention_mask) run on the host only so far");
  const Tensor& qkv = args.in[0];
  if (qkv.rank() != 3)
    return InvalidArgumentError("attention (cuda): qkv must be [B, T, (H + 2 Hkv) D], got " +
                                ShapeToString(qkv.shape()));
  static const Attrs kEmpty;
  const Attrs& attrs = args.attrs ? *args.attrs : kEmpty;
  if (HasAttentionOptions(attrs))
    return UnimplementedError(
        "attention (cuda): scale, window and softcap have a CPU kernel only so far");
  s->batch = qkv.dim(0);
  s->seq = qkv.dim(1);
  s->n_head = attrs.Int("n_head", 0);
  s->n_kv_head = attrs.Int("n_kv_head", s->n_head);
  if (s->n_head < 1 || s->n_kv_head < 1 || s->n_head % s->n_kv_head != 0)
    return InvalidArgumentError("attention (cuda): n_head " + std::to_string(s->n_head) +
                                " must be positive and a multiple of n_kv_head " +
                                std::to_string(s->n_kv_head));
  const int64_t per_dim = s->n_head + 2 * s->n_kv_head;
  if (qkv.dim(2) % per_dim != 0)
    return InvalidArgumentError(
        "attention (cuda): qkv width " + std::to_string(qkv.dim(2)) +
        " is not a multiple of n_head + 2 n_kv_head = " + std::to_string(per_dim));
  s->head_dim = qkv.dim(2) / per_dim;
  if (s->head_dim < 1 || s->head_dim > kMaxHeadDim)
    return InvalidArgumentError("attention (cuda): head dim " + std::to_string(s->head_dim) +
                                " outside [1, " + std::to_string(kMaxHeadDim) + "]");
  const Shape out_shape{s->batch, s->seq, s->n_head * s->head_dim};
  const Shape lse_shape{s->batch, s->n_head, s->seq};
  if (args.out[0].shape() != out_shape || args.saved[0].shape() != lse_shape)
    return InvalidArgumentError("attention (cuda): out must be " + ShapeToString(out_shape) +
                                " and lse " + ShapeToString(lse_shape) + ", got " +
                                ShapeToString(args.out[0].shape()) + " and " +
                                ShapeToString(args.saved[0].shape()));
  if (qkv.dtype() != dtype || args.out[0].dtype() != dtype || args.saved[0].dtype() != DType::kF32)
    return InvalidArgumentError(std::string("attention (cuda): expected ") + DTypeName(dtype) +
                                " qkv and out and an f32 lse");
  return OkStatus();
}

AttentionType TypeOf(DType t) {
  return t == DType::kBF16  ? AttentionType::kBF16
         : t == DType::kF16 ? AttentionType::kF16
                            : AttentionType::kF32;
}

template <DType kType>
Status Forward(const OpArgs& args) {
  AttentionShape s;
  DS_RETURN_IF_ERROR(MakeShape(args, kType, &s));
  const AttentionType t = TypeOf(kType);
  const AttentionPath path =
      ChooseAttentionPath(s, t, args.in[0].data(), args.out[0].data(), nullptr, nullptr);
  DS_CUDA_RETURN_IF_ERROR(LaunchAttentionForward(s, t, path, args.in[0].data(), args.out[0].data(),
                                                 args.saved[0].f32(), cuda::CurrentStream()));
  return OkStatus();
}

template <DType kType>
Status Backward(const OpArgs& args) {
  if (args.grad_in.empty() || !args.grad_in[0].defined()) return OkStatus();
  AttentionShape s;
  DS_RETURN_IF_ERROR(MakeShape(args, kType, &s));
  if (args.grad_out.empty() || args.grad_out[0].shape() != args.out[0].shape() ||
      args.grad_out[0].dtype() != kType || args.grad_in[0].shape() != args.in[0].shape() ||
      args.grad_in[0].dtype() != kType)
    return InvalidArgumentError("attention (cuda): dout and dqkv must match out and qkv");
  const AttentionType t = TypeOf(kType);
  const AttentionPath path = ChooseAttentionPath(s, t, args.in[0].data(), args.grad_out[0].data(),
                                                 args.grad_in[0].data(), nullptr);
  const cudaStream_t stream = cuda::CurrentStream();
  DS_ASSIGN_OR_RETURN(void* scratch, Scratch().Get(stream, AttentionScratchBytes(s, path)));
  DS_CUDA_RETURN_IF_ERROR(LaunchAttentionBackward(s, t, path, args.in[0].data(), args.out[0].data(),
                                                  args.grad_out[0].data(), args.saved[0].f32(),
                                                  args.grad_in[0].data(), scratch, stream));
  return OkStatus();
}

const bool kRegistered = RegisterKernel("attention", Device::kCuda, DType::kF32,
                                        {Forward<DType::kF32>, Backward<DType::kF32>}) &&
                         RegisterKernel("attention", Device::kCuda, DType::kBF16,
                                        {Forward<DType::kBF16>, Backward<DType::kBF16>}) &&
                         RegisterKernel("attention", Device::kCuda, DType::kF16,
                                        {Forward<DType::kF16>, Backward<DType::kF16>});

}  // namespace
}  // namespace ds::kernels::attention
