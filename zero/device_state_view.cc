// The device's model states as a StateView: DeviceStates' buffers, DeviceMemory copies on the
// compute stream, the norm and the optimizer step as device kernels.
#include <map>

#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/device_memory.h"
#include "zero/device_states.h"
#include "zero/state_view.h"

namespace ds::zero {
namespace {

class DeviceView final : public StateView {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;

 public:
  DeviceView(DeviceStates* d, ParamStore* p)
      : d_(d), p_(p), mem_(d->memory()), t_(p->model_dtype()), ts_(DTypeSize(t_)) {}

  // The norm shares of every distinct GRAD_NORM_REDUCE of the rank's plan.
  Status RegisterNormShares(const proto::Plan& plan, int rank) {
    for (const proto::RankPlan& r : plan.ranks()) {
      if (r.rank() != rank) continue;
      for (const proto::Instruction& in : r.instructions()) {
        if (in.kind() != proto::Instruction::GRAD_NORM_REDUCE) continue;
        Ranges ranges;
        for (const proto::ParamRange& q : in.ranges()) ranges.push_back({q.offset(), q.count()});
        if (shares_.count({ranges, in.in_shard()})) continue;
        DS_ASSIGN_OR_RETURN(int id, d_->AddNormShare(ranges, in.in_shard()));
        shares_[{ranges, in.in_shard()}] = id;
      }
    }
    return OkStatus();
  }

  DType dtype() const override { return t_; }
  char* Params(int64_t i) override { return static_cast<char*>(d_->ParamAt(i)); }
  char* ParamShard(int64_t pos) override { return static_cast<char*>(d_->ParamShardAt(pos)); }
  char* Grads(int64_t i) override { return static_cast<char*>(d_->GradAt(i)); }
  char* Updated(int64_t i) override { return static_cast<char*>(d_->params()) + i * ts_; }
  DType updated_dtype() const override { return t_; }
  const ParamStore& layout() const override { return *p_; }

  Status AddToGradShard(int64_t pos, const void* values, DType vt, int64_t n) override {
    if (vt != t_) return UnimplementedError("the device adds gradients in the model dtype only");
    return n > 0 ? d_->AccumulateAtShardPos(pos, values, n) : OkStatus();
  }
  Status ReleaseGrads(int64_t i, int64_t n) override { return d_->ZeroGradRange(i, n); }
  Status Copy(void* dst, const void* src, size_t bytes) override {
    return bytes > 0 ? mem_->Copy(dst, src, bytes) : OkStatus();
  }
  Status Zero(void* dst, size_t bytes) override {
    return bytes > 0 ? mem_->Zero(dst, bytes) : OkStatus();
  }
  Status Convert(const void* src, DType st, void* dst, DType dt, int64_t n) override {
    if (st != dt) return UnimplementedError("the device converts no dtypes in its collectives");
    return Copy(dst, src, n * DTypeSize(st));
  }
  void* stream() const override { return mem_->native_stream(); }

  Status ZeroGrads() override { return d_->ZeroGrads(); }
  StatusOr<double> SquaredSum(const Ranges& ranges, bool in_shard) override {
    auto it = shares_.find({ranges, in_shard});
    if (it == shares_.end()) return InternalError("a gradient norm share the plan did not name");
    DS_ASSIGN_OR_RETURN(SquaredNormResult r, d_->GradSquaredSum(it->second));
    return r.sum_sq;
  }
  Status Step(const proto::Instruction& in, float lr, float grad_scale) override {
    if (in.has_swap())
      return FailedPreconditionError("the device's optimizer step does not swap sub-groups");
    return d_->Step(lr, grad_scale);
  }
  // The gather arena's place passes on by the plan's placement (Note [ZeRO-3 on a device]).
  Status ReleaseParams(int64_t, int64_t) override { return OkStatus(); }

 private:
  DeviceStates* d_;
  ParamStore* p_;
  DeviceMemory* mem_;
  DType t_;
  size_t ts_;
  std::map<std::pair<Ranges, bool>, int> shares_;
};

}  // namespace

StatusOr<std::unique_ptr<StateView>> MakeDeviceView(DeviceStates* device, ParamStore* params,
                                                    const proto::Plan& plan, int rank) {
  auto view = std::make_unique<DeviceView>(device, params);
  DS_RETURN_IF_ERROR(view->RegisterNormShares(plan, rank));
  return std::unique_ptr<StateView>(std::move(view));
}

}  // namespace ds::zero
