// The host model states as a StateView: the ParamStore's flat buffers and shards, memcpy, and
// the host optimizer (zero/optimizer.h) on the owned shard.
#include <cstring>

#include "proto/plan.pb.h"
#include "zero/grad_norm.h"
#include "zero/optimizer.h"
#include "zero/optimizer_swapper.h"
#include "zero/state_view.h"

namespace ds::zero {

void ConvertHost(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * DTypeSize(st));
  } else if (st == DType::kF32 && dt == DType::kBF16) {
    ConvertF32ToBf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (st == DType::kBF16 && dt == DType::kF32) {
    ConvertBf16ToF32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else {
    for (int64_t i = 0; i < n; ++i) StoreFloat(dst, dt, i, LoadFloat(src, st, i));
  }
}

void AccumulateHost(void* shard, DType t, int64_t pos, const void* values, DType vt, int64_t n) {
  if (t == DType::kF32 && vt == DType::kF32) {
    float* dst = static_cast<float*>(shard) + pos;
    const float* src = static_cast<const float*>(values);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    return;
  }
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    StoreFloat(shard, t, pos + i, LoadFloat(shard, t, pos + i) + LoadFloat(values, vt, i));
}

namespace {

class HostView final : public StateView {
 public:
  HostView(ParamStore* p, Optimizer* o, OptimizerSwapper* w)
      : p_(p), o_(o), swapper_(w), t_(p->model_dtype()), ts_(DTypeSize(t_)) {}

  DType dtype() const override { return t_; }
  char* Params(int64_t i) override { return static_cast<char*>(p_->model()) + i * ts_; }
  char* ParamShard(int64_t pos) override {
    return static_cast<char*>(p_->param_shard()) + pos * ts_;
  }
  char* Grads(int64_t i) override { return static_cast<char*>(p_->FlatGradPtr(i)); }
  char* Updated(int64_t i) override {
    if (p_->mixed()) return Params(i);
    return reinterpret_cast<char*>(p_->master()) + i * sizeof(float);
  }
  DType updated_dtype() const override { return p_->mixed() ? t_ : DType::kF32; }
  const ParamStore& layout() const override { return *p_; }

  Status AddToGradShard(int64_t pos, const void* values, DType vt, int64_t n) override {
    if (n > 0) AccumulateHost(p_->grad_shard(), t_, pos, values, vt, n);
    return OkStatus();
  }
  Status ReleaseGrads(int64_t i, int64_t n) override {
    p_->ReleaseGrads(i, n);
    return OkStatus();
  }
  void ParamsChanged() override { p_->MarkModelChanged(); }
  Status Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return OkStatus();
  }
  Status Zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
    return OkStatus();
  }
  Status Convert(const void* src, DType st, void* dst, DType dt, int64_t n) override {
    if (n > 0) ConvertHost(src, st, dst, dt, n);
    return OkStatus();
  }

  Status ZeroGrads() override {
    p_->ZeroGrads();
    return OkStatus();
  }
  StatusOr<double> SquaredSum(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                              bool in_shard) override {
    double sum = 0;
    for (const auto& [lo, n] : ranges)
      sum += in_shard ? zero::SquaredSum(p_->grad_shard(), t_, lo, lo + n)
                      : GradSquaredSum(*p_, lo, lo + n);
    return sum;
  }
  Status Step(const proto::Instruction& in, float lr, float grad_scale) override {
    if (in.has_swap()) {
      if (!swapper_)
        return FailedPreconditionError("the plan steps sub-group " +
                                       std::to_string(in.swap().sub_group()) +
                                       " from NVMe, and this rank has no optimizer swapper");
      return swapper_->Step(in, lr, grad_scale);
    }
    o_->Step(lr, grad_scale);
    return OkStatus();
  }
  Status ReleaseParams(int64_t i, int64_t n) override {
    p_->ReleaseModel(i, n);
    return OkStatus();
  }
  void DropParamShard(int64_t pos, int64_t n) override {
    if (p_->params_swapped()) p_->ReleaseParamShardRange(pos, n);
  }

 private:
  ParamStore* p_;
  Optimizer* o_;
  OptimizerSwapper* swapper_;
  DType t_;
  size_t ts_;
};

}  // namespace

std::unique_ptr<StateView> MakeHostView(ParamStore* params, Optimizer* optimizer,
                                        OptimizerSwapper* swapper) {
  return std::make_unique<HostView>(params, optimizer, swapper);
}

}  // namespace ds::zero
