#include "runtime/core/optimizer_kernels.h"

#include "runtime/core/cpu_adam.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/base/status_macros.h"

namespace ds {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}

std::map<Device, OptimizerKernels::Factory>& Registry() {
  static std::map<Device, OptimizerKernels::Factory> r;
  return r;
}

const void* Shifted(const void* p, DType t, int64_t n) {
  return p ? static_cast<const char*>(p) + n * DTypeSize(t) : nullptr;
}
void* Shifted(void* p, DType t, int64_t n) {
  return p ? static_cast<char*>(p) + n * DTypeSize(t) : nullptr;
}

// The host implementation: the same element update as Optimizer::StepAdam, in segments.
class HostOptimizerKernels final : public OptimizerKernels {
 public:
  StatusOr<int> AddSegments(const std::vector<OptimizerSegment>& segments) override {
    sets_.push_back(segments);
    return static_cast<int>(sets_.size()) - 1;
  }

  Status AdamStep(int set, const AdamBuffers& b, const AdamStepParams& o) override {
    DS_RETURN_IF_ERROR(Check(set));
    float bc1 = 1.0f, bc2 = 1.0f;  // bias_correction false: the raw moments
    if (o.bias_correction) {
      bc1 = 1.0f - static_cast<float>(std::pow(o.beta1, static_cast<double>(o.step)));
      bc2 = 1.0f - static_cast<float>(std::pow(o.beta2, static_cast<double>(o.step)));
    }
    const float b1 = o.beta1, b2 = o.beta2, eps = o.eps, scale = o.grad_scale;
    const float step_size = o.lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
    for (const OptimizerSegment& s : sets_[set]) {
      const float wd = s.decay ? o.weight_decay : 0.0f;
      const float decay = o.decoupled ? 1.0f - o.lr * wd : 1.0f;
      const float l2 = o.decoupled ? 0.0f : wd;
      const int64_t off = s.offset;
      AdamRun r{b.master + off,
                b.m + off,
                b.v + off,
                Shifted(b.grad, b.dtype, off),
                Shifted(b.model, b.dtype, off),
                b.dtype,
                s.numel};
      r.grad_scale = scale;
      r.l2 = l2;
      r.b1 = b1;
      r.b2 = b2;
      r.eps = eps;
      r.step_size = step_size;
      r.inv_sqrt_bc2 = inv_sqrt_bc2;
      r.decay = decay;
      AdamUpdateThreaded(r);  // cpu_adam.h: the host Optimizer's loop, to the bit
    }
    return OkStatus();
  }

  Status SgdStep(int set, const AdamBuffers& b, const SgdStepParams& o) override {
    DS_RETURN_IF_ERROR(Check(set));
    for (const OptimizerSegment& s : sets_[set]) {
      const float wd = s.decay ? o.weight_decay : 0.0f, mu = o.momentum, scale = o.grad_scale,
                  lr = o.lr;
      const int64_t off = s.offset;
      // buf is zero before the first step, so mu buf + g = g there, as torch starts it.
      SgdRun r{b.master + off,
               b.m ? b.m + off : nullptr,
               Shifted(b.grad, b.dtype, off),
               Shifted(b.model, b.dtype, off),
               b.dtype,
               s.numel};
      r.grad_scale = scale;
      r.wd = wd;
      r.mu = mu;
      r.lr = lr;
      SgdUpdateThreaded(r);
    }
    return OkStatus();
  }

  StatusOr<SquaredNormResult> SquaredNorm(int set, const void* grad, DType dtype,
                                          float inv_scale) override {
    DS_RETURN_IF_ERROR(Check(set));
    double sum = 0;
    for (const OptimizerSegment& s : sets_[set]) {
      const int64_t begin = s.offset, end = s.offset + s.numel;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (end - begin > (1 << 16))
      for (int64_t i = begin; i < end; ++i) {
        const double v = static_cast<double>(LoadFloat(grad, dtype, i)) * inv_scale;
        sum += v * v;
      }
    }
    return SquaredNormResult{sum, std::isfinite(sum)};
  }

  Status Accumulate(void* dst, const void* src, int64_t n, DType dtype) override {
    if (dtype == DType::kF32) {
      float* d = static_cast<float*>(dst);
      const float* s = static_cast<const float*>(src);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return OkStatus();
    }
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i)
      StoreFloat(dst, dtype, i, LoadFloat(dst, dtype, i) + LoadFloat(src, dtype, i));
    return OkStatus();
  }

 private:
  Status Check(int set) const {
    if (set < 0 || set >= static_cast<int>(sets_.size()))
      return InvalidArgumentError("optimizer kernels: no segment set " + std::to_string(set));
    return OkStatus();
  }
  std::vector<std::vector<OptimizerSegment>> sets_;
};

}  // namespace

bool OptimizerKernels::Register(Device device, Factory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  if (!Registry().emplace(device, factory).second) {
    std::fprintf(stderr, "optimizer kernels for %s registered twice\n", DeviceName(device));
    std::abort();
  }
  return true;
}

StatusOr<std::unique_ptr<OptimizerKernels>> OptimizerKernels::Create(DeviceMemory* memory) {
  // The host implementation is not registered: a plugin that links this file must not
  // register it a second time when it loads.
  if (memory->device() == Device::kCpu)
    return std::unique_ptr<OptimizerKernels>(new HostOptimizerKernels());
  Factory f = nullptr;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(memory->device());
    if (it != Registry().end()) f = it->second;
  }
  if (!f)
    return UnimplementedError("no optimizer kernels for " + memory->name() +
                              " (is the device's backend loaded?)");
  return f(memory);
}

}  // namespace ds
