// OptimizerKernels on a GPU (runtime/core/optimizer_kernels.h): kernels/cuda/optimizer.cu's
// multi-tensor AdamW and squared-norm launches on the DeviceMemory's stream. Segment sets are
// cut into blocks of at most kOptimizerChunk elements and uploaded once; the norm's partials
// workspace and result scalar are allocated once, sized for the largest set. Registered for
// Device::kCuda when the plugin (libds_cuda.so) loads.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cuda/elementwise_launch.h"
#include "kernels/cuda/optimizer_launch.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/optimizer_kernels.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/stream_context.h"

namespace ds::cuda {
namespace {

// Calls `launch(T{})` with T the CUDA storage type of `dtype` (a value of that type, only for
// its type) and turns the launch error into a Status; `what` names the work in errors.
template <typename F>
Status ForStorage(DType dtype, const char* what, F launch) {
  cudaError_t err;
  switch (dtype) {
    case DType::kF32:
      err = launch(float{});
      break;
    case DType::kBF16:
      err = launch(__nv_bfloat16{});
      break;
    case DType::kF16:
      err = launch(__half{});
      break;
    default:
      return InvalidArgumentError(std::string("optimizer kernels: no ") + what + " for " +
                                  DTypeName(dtype));
  }
  DS_CUDA_RETURN_IF_ERROR(err);
  return OkStatus();
}

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
      DS_ASSIGN_OR_RETURN(workspace_,
                          DeviceBuffer::Allocate(memory_, workspace_count_ * sizeof(double)));
      DS_ASSIGN_OR_RETURN(result_,
                          DeviceBuffer::Allocate(memory_, sizeof(kernels::GradNormResult)));
    }
    sets_.push_back(std::move(set));
    return static_cast<int>(sets_.size()) - 1;
  }

  Status AdamStep(int set, const AdamBuffers& b, const AdamStepParams& o) override {
    DS_ASSIGN_OR_RETURN(const Set* s, Find(set));
    if (s->count == 0) return OkStatus();
    kernels::AdamWStepParams p;
    p.lr = o.lr;
    p.beta1 = o.beta1;
    p.beta2 = o.beta2;
    p.eps = o.eps;
    p.weight_decay = o.weight_decay;
    p.grad_scale = o.grad_scale;
    p.step = o.step;
    p.decoupled = o.decoupled;
    p.bias_correction = o.bias_correction;
    const cudaStream_t stream = Stream();
    return ForStorage(b.dtype, "AdamW", [&](auto tag) {
      using T = decltype(tag);
      return kernels::LaunchAdamWStep(s->segs(), s->count, b.master, b.m, b.v,
                                      static_cast<const T*>(b.grad), static_cast<T*>(b.model), p,
                                      stream);
    });
  }

  Status SgdStep(int set, const AdamBuffers& b, const SgdStepParams& o) override {
    DS_ASSIGN_OR_RETURN(const Set* s, Find(set));
    if (s->count == 0) return OkStatus();
    kernels::SgdStepParams p;
    p.lr = o.lr;
    p.momentum = o.momentum;
    p.weight_decay = o.weight_decay;
    p.grad_scale = o.grad_scale;
    const cudaStream_t stream = Stream();
    return ForStorage(b.dtype, "SGD", [&](auto tag) {
      using T = decltype(tag);
      return kernels::LaunchSgdStep(s->segs(), s->count, b.master, b.m,
                                    static_cast<const T*>(b.grad), static_cast<T*>(b.model), p,
                                    stream);
    });
  }

  StatusOr<SquaredNormResult> SquaredNorm(int set, const void* grad, DType dtype,
                                          float inv_scale) override {
    DS_ASSIGN_OR_RETURN(const Set* s, Find(set));
    const cudaStream_t stream = Stream();
    auto* workspace = static_cast<double*>(workspace_.data());
    auto* result = static_cast<kernels::GradNormResult*>(result_.data());
    DS_RETURN_IF_ERROR(ForStorage(dtype, "norm", [&](auto tag) {
      using T = decltype(tag);
      return kernels::LaunchGradSquaredNorm(s->segs(), s->count, static_cast<const T*>(grad),
                                            inv_scale, workspace, result, stream);
    }));
    kernels::GradNormResult host{};
    DS_RETURN_IF_ERROR(memory_->CopyToHost(&host, result, sizeof(host)));  // waits for the stream
    return SquaredNormResult{host.sum_sq, host.overflow == 0};
  }

  Status Accumulate(void* dst, const void* src, int64_t n, DType dtype) override {
    const cudaStream_t stream = Stream();
    return ForStorage(dtype, "accumulate", [&](auto tag) {
      using T = decltype(tag);
      return kernels::LaunchAccumulate(static_cast<const T*>(src), static_cast<T*>(dst), n, stream);
    });
  }

 private:
  struct Set {
    DeviceBuffer segments;  // kernels::AdamWSegment[count]
    int64_t count = 0;
    const kernels::AdamWSegment* segs() const {
      return static_cast<const kernels::AdamWSegment*>(segments.data());
    }
  };
  StatusOr<const Set*> Find(int set) const {
    if (set < 0 || set >= static_cast<int>(sets_.size()))
      return InvalidArgumentError("optimizer kernels: no segment set " + std::to_string(set));
    return &sets_[set];
  }
  // The memory's stream, made current for the launches that follow.
  cudaStream_t Stream() const {
    memory_->Bind();
    return cuda::CurrentStream();
  }

  DeviceMemory* memory_;
  std::vector<Set> sets_;
  DeviceBuffer workspace_, result_;
  int64_t workspace_count_ = 0;
};

StatusOr<std::unique_ptr<OptimizerKernels>> Make(DeviceMemory* memory) {
  return std::unique_ptr<OptimizerKernels>(new CudaOptimizerKernels(memory));
}

const bool kRegistered = OptimizerKernels::Register(Device::kCuda, &Make);

}  // namespace
}  // namespace ds::cuda
