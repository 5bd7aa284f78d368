#include "zero/device_states.h"

#include <algorithm>

#include "runtime/base/status_macros.h"

namespace ds::zero {

StatusOr<std::unique_ptr<DeviceStates>> DeviceStates::Create(
    DeviceMemory* memory, ParamStore* params, Optimizer* optimizer,
    std::vector<DeviceParamBlock> param_blocks, int64_t param_arena_elements) {
  std::unique_ptr<DeviceStates> s(new DeviceStates(memory, params, optimizer));
  s->param_blocks_ = std::move(param_blocks);
  s->param_arena_elements_ = param_arena_elements;
  DS_RETURN_IF_ERROR(s->Build());
  return s;
}

Status DeviceStates::Build() {
  const std::string where = "optimizer on " + memory_->name();
  const ParamStore& ps = *params_store_;
  const bool stage3 = ps.params_partitioned();
  if (stage3 && param_blocks_.empty())
    return InternalError(where + ": ZeRO stage 3 needs the gather arena's blocks");
  // Stages 0-2: at most one owned segment, so shard position + delta is the flat element.
  // Stage 3 works in shard space throughout.
  if (!stage3 && ps.segments().size() > 1)
    return InternalError(where + ": more than one owned segment at stages 0-2");
  if (!stage3 && !ps.segments().empty())
    delta_ = ps.segments()[0].flat_begin - ps.segments()[0].shard_offset;
  tsize_ = DTypeSize(ps.model_dtype());
  const size_t flat =
      static_cast<size_t>(stage3 ? param_arena_elements_ : ps.total_elements()) * tsize_;
  const size_t shard =
      static_cast<size_t>(std::max<int64_t>(1, ps.shard_elements())) * sizeof(float);
  DS_ASSIGN_OR_RETURN(params_, DeviceBuffer::Allocate(memory_, std::max<size_t>(flat, 1)));
  if (stage3 && ps.mixed()) {
    DS_ASSIGN_OR_RETURN(pshard_, DeviceBuffer::Allocate(
                                     memory_, std::max<int64_t>(1, ps.shard_elements()) * tsize_));
  }
  DS_ASSIGN_OR_RETURN(
      grads_,
      DeviceBuffer::Allocate(memory_, static_cast<size_t>(ps.grad_storage_elements()) * tsize_));
  if (ps.grads_partitioned()) {
    DS_ASSIGN_OR_RETURN(shard_, DeviceBuffer::Allocate(
                                    memory_, std::max<int64_t>(1, ps.shard_elements()) * tsize_));
  }
  if (ps.mixed() || stage3) {  // fp32 stage 3: the master shard is the parameter shard
    DS_ASSIGN_OR_RETURN(master_, DeviceBuffer::Allocate(memory_, shard));
  }
  // Adam: m and v; SGD: the momentum buffer (m) when there is momentum.
  const OptimizerOptions& o = optimizer_->options();
  const bool adam = o.type != OptimizerOptions::Type::kSgd;
  if (adam || o.momentum != 0) {
    DS_ASSIGN_OR_RETURN(m_, DeviceBuffer::Allocate(memory_, shard));
  }
  if (adam) {
    DS_ASSIGN_OR_RETURN(v_, DeviceBuffer::Allocate(memory_, shard));
  }
  DS_ASSIGN_OR_RETURN(kernels_, OptimizerKernels::Create(memory_));
  // The optimizer's segments: every parameter's owned part, in shard space.
  std::vector<OptimizerSegment> segs;
  const std::vector<ParamSlot>& slots = ps.slots();
  for (const ShardSegment& g : ps.segments()) {
    const int64_t end = g.flat_begin + g.count;
    for (const ParamSlot& s : slots) {
      const int64_t lo = std::max(s.offset, g.flat_begin), hi = std::min(s.offset + s.numel, end);
      if (lo < hi) segs.push_back({g.shard_offset + (lo - g.flat_begin), hi - lo, s.decay});
    }
  }
  DS_ASSIGN_OR_RETURN(optimizer_set_, kernels_->AddSegments(segs));
  return OkStatus();
}

int64_t DeviceStates::bytes() const {
  return static_cast<int64_t>(params_.size() + grads_.size() + shard_.size() + pshard_.size() +
                              master_.size() + m_.size() + v_.size());
}

void* DeviceStates::ParamAt(int64_t i) const {
  char* base = static_cast<char*>(params_.data());
  if (param_blocks_.empty()) return base + i * tsize_;
  auto it = std::upper_bound(param_blocks_.begin(), param_blocks_.end(), i,
                             [](int64_t v, const DeviceParamBlock& b) { return v < b.flat_begin; });
  if (it == param_blocks_.begin()) return nullptr;
  --it;
  if (i >= it->flat_begin + it->count) return nullptr;
  return base + (it->arena_offset + (i - it->flat_begin)) * tsize_;
}

void* DeviceStates::ParamShardAt(int64_t pos) const {
  if (params_store_->mixed()) return static_cast<char*>(pshard_.data()) + pos * tsize_;
  return static_cast<char*>(master_.data()) + pos * tsize_;
}

Status DeviceStates::PersistentUnits(bool to_device) {
  char* host = static_cast<char*>(params_store_->model());
  for (const DeviceParamBlock& b : param_blocks_) {
    if (!b.persistent || b.count <= 0) continue;
    void* dev = ParamAt(b.flat_begin);
    if (to_device)
      DS_RETURN_IF_ERROR(
          memory_->CopyToDevice(dev, host + b.flat_begin * tsize_, b.count * tsize_));
    else
      DS_RETURN_IF_ERROR(memory_->CopyToHost(host + b.flat_begin * tsize_, dev, b.count * tsize_));
  }
  return OkStatus();
}

void* DeviceStates::GradAt(int64_t i) const {
  const ParamStore& ps = *params_store_;
  return static_cast<char*>(grads_.data()) + (static_cast<const char*>(ps.FlatGradPtr(i)) -
                                              static_cast<const char*>(ps.grad_storage()));
}

Status DeviceStates::Upload() {
  ParamStore& ps = *params_store_;
  const size_t shard = static_cast<size_t>(ps.shard_elements()) * sizeof(float);
  if (ps.params_partitioned()) {  // the shards and the persistent units; the rest is gathered
    DS_RETURN_IF_ERROR(PersistentUnits(true));
    if (ps.mixed() && shard > 0)
      DS_RETURN_IF_ERROR(
          memory_->CopyToDevice(pshard_.data(), ps.param_shard(), ps.shard_elements() * tsize_));
    if (shard > 0)
      DS_RETURN_IF_ERROR(memory_->CopyToDevice(master_.data(), ps.master_data(), shard));
  } else {
    DS_RETURN_IF_ERROR(memory_->CopyToDevice(params_.data(), ps.model(), params_.size()));
    if (ps.mixed() && shard > 0)
      DS_RETURN_IF_ERROR(memory_->CopyToDevice(master_.data(), ps.master_data(), shard));
  }
  const std::vector<Optimizer::StateBuffer> state =
      optimizer_->state();  // (exp_avg, exp_avg_sq) or (momentum)
  DeviceBuffer* on_device[] = {&m_, &v_};
  for (size_t k = 0; k < state.size() && k < 2 && shard > 0; ++k)
    DS_RETURN_IF_ERROR(memory_->CopyToDevice(on_device[k]->data(), state[k].data, shard));
  DS_RETURN_IF_ERROR(ZeroGrads());
  // The device holds the truth now; CopyToDevice returned once the host bytes were read.
  ReleaseHostCopies();
  return OkStatus();
}

void DeviceStates::ReleaseHostCopies() {
  params_store_->ReleaseHost();
  optimizer_->ReleaseState();
}

Status DeviceStates::Download() {
  ParamStore& ps = *params_store_;
  const size_t shard = static_cast<size_t>(ps.shard_elements()) * sizeof(float);
  if (ps.params_partitioned()) {
    DS_RETURN_IF_ERROR(PersistentUnits(false));
    if (ps.mixed() && shard > 0)
      DS_RETURN_IF_ERROR(
          memory_->CopyToHost(ps.param_shard(), pshard_.data(), ps.shard_elements() * tsize_));
    if (shard > 0) DS_RETURN_IF_ERROR(memory_->CopyToHost(ps.master_data(), master_.data(), shard));
  } else {
    DS_RETURN_IF_ERROR(memory_->CopyToHost(ps.model(), params_.data(), params_.size()));
    if (ps.mixed() && shard > 0)
      DS_RETURN_IF_ERROR(memory_->CopyToHost(ps.master_data(), master_.data(), shard));
  }
  const std::vector<Optimizer::StateBuffer> state = optimizer_->state();
  const DeviceBuffer* on_device[] = {&m_, &v_};
  for (size_t k = 0; k < state.size() && k < 2 && shard > 0; ++k)
    DS_RETURN_IF_ERROR(memory_->CopyToHost(state[k].data, on_device[k]->data(), shard));
  ps.MarkModelChanged();
  return OkStatus();
}

Status DeviceStates::ZeroGrads() {
  if (shard_.data()) DS_RETURN_IF_ERROR(memory_->Zero(shard_.data(), shard_.size()));
  return memory_->Zero(grads_.data(), grads_.size());
}

Status DeviceStates::ZeroGradRange(int64_t lo, int64_t n) {
  if (n <= 0) return OkStatus();
  return memory_->Zero(GradAt(lo), n * tsize_);
}

Status DeviceStates::GradsToHost(int64_t lo, int64_t n) {
  if (n <= 0) return OkStatus();
  return memory_->CopyToHost(params_store_->FlatGradPtr(lo), GradAt(lo), n * tsize_);
}

Status DeviceStates::GradsFromHost(int64_t lo, int64_t n) {
  if (n <= 0) return OkStatus();
  return memory_->CopyToDevice(GradAt(lo), params_store_->FlatGradPtr(lo), n * tsize_);
}

Status DeviceStates::AccumulateIntoShard(int64_t flat_lo, const void* values, int64_t n) {
  if (n <= 0) return OkStatus();
  if (!shard_.data()) return InternalError("device states: no gradient shard below ZeRO stage 2");
  char* dst = static_cast<char*>(shard_.data()) + params_store_->ShardPos(flat_lo) * tsize_;
  return kernels_->Accumulate(dst, values, n, params_store_->model_dtype());
}

Status DeviceStates::AccumulateAtShardPos(int64_t pos, const void* values, int64_t n) {
  if (n <= 0) return OkStatus();
  if (!shard_.data()) return InternalError("device states: no gradient shard below ZeRO stage 2");
  char* dst = static_cast<char*>(shard_.data()) + pos * tsize_;
  return kernels_->Accumulate(dst, values, n, params_store_->model_dtype());
}

Status DeviceStates::ShardFromHost(int64_t flat_lo, int64_t n) {
  if (n <= 0) return OkStatus();
  if (!shard_.data()) return InternalError("device states: no gradient shard below ZeRO stage 2");
  const int64_t pos = params_store_->ShardPos(flat_lo);
  return memory_->CopyToDevice(static_cast<char*>(shard_.data()) + pos * tsize_,
                               static_cast<const char*>(params_store_->grad_shard()) + pos * tsize_,
                               n * tsize_);
}

Status DeviceStates::ParamsToHost(int64_t lo, int64_t n) {
  if (n <= 0) return OkStatus();
  params_store_->MarkModelChanged();
  return memory_->CopyToHost(static_cast<char*>(params_store_->model()) + lo * tsize_,
                             static_cast<char*>(params_.data()) + lo * tsize_, n * tsize_);
}

Status DeviceStates::ParamsFromHost(int64_t lo, int64_t n) {
  if (n <= 0) return OkStatus();
  return memory_->CopyToDevice(static_cast<char*>(params_.data()) + lo * tsize_,
                               static_cast<const char*>(params_store_->model()) + lo * tsize_,
                               n * tsize_);
}

StatusOr<int> DeviceStates::AddNormShare(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                         bool in_shard) {
  if (in_shard && !shard_.data())
    return InternalError("device states: no gradient shard below ZeRO stage 2");
  // Flat ranges become runs of the gradient storage (a bucket arena places buckets apart).
  std::vector<OptimizerSegment> segs;
  const ParamStore& ps = *params_store_;
  const char* base = static_cast<const char*>(ps.grad_storage());
  for (const auto& [offset, count] : ranges) {
    if (in_shard) {
      if (count > 0) segs.push_back({offset, count, false});
      continue;
    }
    for (const ParamSlot& s : ps.slots()) {  // one parameter's gradients are contiguous
      const int64_t lo = std::max(offset, s.offset),
                    hi = std::min(offset + count, s.offset + s.numel);
      if (lo >= hi) continue;
      const int64_t at =
          (static_cast<const char*>(ps.FlatGradPtr(lo)) - base) / static_cast<int64_t>(tsize_);
      segs.push_back({at, hi - lo, false});
    }
  }
  DS_ASSIGN_OR_RETURN(int id, kernels_->AddSegments(segs));
  if (static_cast<int>(share_in_shard_.size()) <= id) share_in_shard_.resize(id + 1, false);
  share_in_shard_[id] = in_shard;
  return id;
}

StatusOr<SquaredNormResult> DeviceStates::GradSquaredSum(int share) {
  const bool in_shard =
      share >= 0 && share < static_cast<int>(share_in_shard_.size()) && share_in_shard_[share];
  return kernels_->SquaredNorm(share, in_shard ? shard_.data() : grads_.data(),
                               params_store_->model_dtype(), 1.0f);
}

Status DeviceStates::Step(float lr, float grad_scale) {
  const OptimizerOptions& o = optimizer_->options();
  const ParamStore& ps = *params_store_;
  AdamBuffers b;
  b.m = static_cast<float*>(m_.data());
  b.v = static_cast<float*>(v_.data());
  b.dtype = ps.model_dtype();
  if (ps.params_partitioned()) {  // everything in shard space
    b.master = static_cast<float*>(master_.data());
    b.grad = shard_.data();
    b.model = ps.mixed() ? pshard_.data() : nullptr;
  } else {
    char* params = static_cast<char*>(params_.data()) + delta_ * tsize_;
    b.master = ps.mixed() ? static_cast<float*>(master_.data()) : reinterpret_cast<float*>(params);
    // Stage 2 reads the reduced gradients in shard space; stages 0-1 the flat ones.
    b.grad = shard_.data() ? static_cast<const char*>(shard_.data())
                           : static_cast<const char*>(grads_.data()) + delta_ * tsize_;
    b.model = ps.mixed() ? params : nullptr;
  }
  const int64_t step = optimizer_->step() + 1;
  if (o.type == OptimizerOptions::Type::kSgd) {
    SgdStepParams p;
    p.lr = lr;
    p.momentum = o.momentum;
    p.weight_decay = o.weight_decay;
    p.grad_scale = grad_scale;
    DS_RETURN_IF_ERROR(kernels_->SgdStep(optimizer_set_, b, p));
  } else {
    AdamStepParams p;
    p.lr = lr;
    p.beta1 = o.beta1;
    p.beta2 = o.beta2;
    p.eps = o.eps;
    p.weight_decay = o.weight_decay;
    p.grad_scale = grad_scale;
    p.step = step;
    p.decoupled = o.type == OptimizerOptions::Type::kAdamW;
    p.bias_correction = o.bias_correction;
    DS_RETURN_IF_ERROR(kernels_->AdamStep(optimizer_set_, b, p));
  }
  optimizer_->set_step(step);
  return OkStatus();
}

}  // namespace ds::zero
