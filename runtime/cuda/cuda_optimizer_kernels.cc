// OptimizerKernels on a GPU (runtime/exec/optimizer_kernels.h): kernels/cuda/optimizer.cu's
// multi-tensor AdamW and squared-norm launches on the DeviceMemory's stream. Segment sets are
// cut into blocks of at most kOptimizerChunk elements and uploaded once; the norm's partials
// workspace and result scalar are allocated once, sized for the largest set. Registered for
// Device::kCuda when the plugin (libds_cuda.so) loads.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cuda/elementwise_launch.h"
#include "kernels/cuda/optimizer_launch.h"
#include "kernels/cuda/stream_context.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/exec/optimizer_kernels.h"

namespace ds::cuda {
namespace {

class CudaOptimizerKernels final : public OptimizerKernels {
 public:
  explicit CudaOptimizerKernels(DeviceMemory* memory) : memory_(memory) {}

  StatusOr<int> AddSegments(const std::vector<OptimizerSegment>& segments) override {
    std::vector<kernels::OptimizerParamRange> ranges;
    for (const OptimizerSegment& s : segments) ranges.push_back({s.offset, s.numel, s.decay});
    const std::vector<kernels::AdamWSegment> split = kernels::SplitOptimizerSegments(ranges);
    Set set;
    set.count = static_cast<int64_t>(split.size());
    if (!split.empty()) {
      const size_t bytes = split.size() * sizeof(kernels::AdamWSegment);
      DS_ASSIGN_OR_RETURN(set.segments, DeviceBuffer::Allocate(memory_, bytes));
      DS_RETURN_IF_ERROR(memory_->CopyToDevice(set.segments.data(), split.data(), bytes));
    }
    if (set.count > workspace_count_ || !result_.data()) {
      workspace_count_ = std::max<int64_t>(set.count, 1);
      DS_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::Allocate(memory_, workspace_count_ * sizeof(double)));
      DS_ASSIGN_OR_RETURN(result_, DeviceBuffer::Allocate(memory_, sizeof(kernels::GradNormResult)));
    }
    sets_.push_back(std::move(set));
    return static_cast<int>(sets_.size()) - 1;
  }

  Status AdamStep(int set, const AdamBuffers& b, const AdamStepParams& o) override {
    if (set < 0 || set >= static_cast<int>(sets_.size()))
      return InvalidArgumentError("optimizer kernels: no segment set " + std::to_string(set));
    const Set& s = sets_[set];
    if (s.count == 0) return OkStatus();
    kernels::AdamWStepParams p;
    p.lr = o.lr;
    p.beta1 = o.beta1;
    p.beta2 = o.beta2;
    p.eps = o.eps;
    p.weight_decay = o.weight_decay;
    p.grad_scale = o.grad_scale;
    p.step = o.step;
    p.decoupled = o.decoupled;
    memory_->Bind();
    const cudaStream_t stream = kernels::CurrentStream();
    const auto* segs = static_cast<const kernels::AdamWSegment*>(s.segments.data());
    switch (b.dtype) {
      case DType::kF32:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchAdamWStep(segs, s.count, b.master, b.m, b.v,
                                                         static_cast<const float*>(b.grad),
                                                         static_cast<float*>(b.model), p, stream));
        return OkStatus();
      case DType::kBF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchAdamWStep(
            segs, s.count, b.master, b.m, b.v, static_cast<const __nv_bfloat16*>(b.grad),
            static_cast<__nv_bfloat16*>(b.model), p, stream));
        return OkStatus();
      case DType::kF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchAdamWStep(segs, s.count, b.master, b.m, b.v,
                                                         static_cast<const __half*>(b.grad),
                                                         static_cast<__half*>(b.model), p, stream));
        return OkStatus();
      default:
        return InvalidArgumentError(std::string("optimizer kernels: no AdamW for ") + DTypeName(b.dtype));
    }
  }

  Status SgdStep(int set, const AdamBuffers& b, const SgdStepParams& o) override {
    if (set < 0 || set >= static_cast<int>(sets_.size()))
      return InvalidArgumentError("optimizer kernels: no segment set " + std::to_string(set));
    const Set& s = sets_[set];
    if (s.count == 0) return OkStatus();
    kernels::SgdStepParams p;
    p.lr = o.lr;
    p.momentum = o.momentum;
    p.weight_decay = o.weight_decay;
    p.grad_scale = o.grad_scale;
    memory_->Bind();
    const cudaStream_t stream = kernels::CurrentStream();
    const auto* segs = static_cast<const kernels::AdamWSegment*>(s.segments.data());
    switch (b.dtype) {
      case DType::kF32:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchSgdStep(segs, s.count, b.master, b.m, static_cast<const float*>(b.grad),
                                                       static_cast<float*>(b.model), p, stream));
        return OkStatus();
      case DType::kBF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchSgdStep(segs, s.count, b.master, b.m,
                                                       static_cast<const __nv_bfloat16*>(b.grad),
                                                       static_cast<__nv_bfloat16*>(b.model), p, stream));
        return OkStatus();
      case DType::kF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchSgdStep(segs, s.count, b.master, b.m,
                                                       static_cast<const __half*>(b.grad),
                                                       static_cast<__half*>(b.model), p, stream));
        return OkStatus();
      default:
        return InvalidArgumentError(std::string("optimizer kernels: no SGD for ") + DTypeName(b.dtype));
    }
  }

  StatusOr<SquaredNormResult> SquaredNorm(int set, const void* grad, DType dtype, float inv_scale) override {
    if (set < 0 || set >= static_cast<int>(sets_.size()))
      return InvalidArgumentError("optimizer kernels: no segment set " + std::to_string(set));
    const Set& s = sets_[set];
    memory_->Bind();
    const cudaStream_t stream = kernels::CurrentStream();
    const auto* segs = static_cast<const kernels::AdamWSegment*>(s.segments.data());
    auto* workspace = static_cast<double*>(workspace_.data());
    auto* result = static_cast<kernels::GradNormResult*>(result_.data());
    switch (dtype) {
      case DType::kF32:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchGradSquaredNorm(segs, s.count, static_cast<const float*>(grad),
                                                               inv_scale, workspace, result, stream));
        break;
      case DType::kBF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchGradSquaredNorm(
            segs, s.count, static_cast<const __nv_bfloat16*>(grad), inv_scale, workspace, result, stream));
        break;
      case DType::kF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchGradSquaredNorm(segs, s.count, static_cast<const __half*>(grad),
                                                               inv_scale, workspace, result, stream));
        break;
      default:
        return InvalidArgumentError(std::string("optimizer kernels: no norm for ") + DTypeName(dtype));
    }
    kernels::GradNormResult host{};
    DS_RETURN_IF_ERROR(memory_->CopyToHost(&host, result, sizeof(host)));  // waits for the stream
    return SquaredNormResult{host.sum_sq, host.overflow == 0};
  }

  Status Accumulate(void* dst, const void* src, int64_t n, DType dtype) override {
    memory_->Bind();
    const cudaStream_t stream = kernels::CurrentStream();
    switch (dtype) {
      case DType::kF32:
        DS_CUDA_RETURN_IF_ERROR(
            kernels::LaunchAccumulate(static_cast<const float*>(src), static_cast<float*>(dst), n, stream));
        return OkStatus();
      case DType::kBF16:
        DS_CUDA_RETURN_IF_ERROR(kernels::LaunchAccumulate(static_cast<const __nv_bfloat16*>(src),
                                                          static_cast<__nv_bfloat16*>(dst), n, stream));
        return OkStatus();
      case DType::kF16:
        DS_CUDA_RETURN_IF_ERROR(
            kernels::LaunchAccumulate(static_cast<const __half*>(src), static_cast<__half*>(dst), n, stream));
        return OkStatus();
      default:
        return UnimplementedError(std::string("optimizer kernels: no accumulate for ") + DTypeName(dtype));
    }
  }

 private:
  struct Set {
    DeviceBuffer segments;  // kernels::AdamWSegment[count]
    int64_t count = 0;
  };
  DeviceMemory* memory_;
  std::vector<Set> sets_;
  DeviceBuffer workspace_, result_;
  int64_t workspace_count_ = 0;
};

StatusOr<std::unique_ptr<OptimizerKernels>> Make(DeviceMemory* memory) {
  return std::unique_ptr<OptimizerKernels>(new CudaOptimizerKernels(memory));
}

const bool kRegistered = OptimizerKernels::Register(kernels::Device::kCuda, &Make);

}  // namespace
}  // namespace ds::cuda
