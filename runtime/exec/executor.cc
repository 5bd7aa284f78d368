#include "runtime/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor_node.h"

namespace ds::exec {

namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Executor::Executor(const Graph& graph, zero::ParamStore* params, const ExecutorOptions& options)
    : graph_(&graph), params_(params), opt_(options) {
  const char* p = std::getenv("DS_PROFILE_OPS");
  profiling_ = p && p[0] == '1';
}

Executor::~Executor() {
  if (staging_) {
    opt_.memory->WaitCopies().IgnoreError();  // no copy may land in freed memory
    opt_.memory->FreeHost(staging_);
  }
}

StatusOr<std::unique_ptr<Executor>> Executor::Create(const Graph& graph, zero::ParamStore* params,
                                                     const ExecutorOptions& options) {
  if (options.batch <= 0 || options.seq <= 0)
    return InvalidArgumentError("executor: batch and seq must be positive");
  std::unique_ptr<Executor> ex(new Executor(graph, params, options));
  DS_RETURN_IF_ERROR(ex->Build());
  return ex;
}

StatusOr<char*> Executor::Arena(size_t bytes, Buffer* host) {
  if (!device_) {
    *host = Buffer::Allocate(bytes);
    return static_cast<char*>(host->data());
  }
  DS_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(opt_.memory, bytes));
  char* p = static_cast<char*>(b.data());
  device_buffers_.push_back(std::move(b));
  return p;
}

// Generation's state (KV caches, positions): the caller's buffers, checked against the graph.
void Executor::WidenParams(const NodeExec& n) const {
  for (const NodeExec::ParamUse& u : n.params) {
    if (!u.scratch.defined()) continue;  // the kernel reads it in bf16 (bf16_inputs, bf16_reads)
    const uint16_t* src = static_cast<const uint16_t*>(params_->ModelView(*u.slot).data());
    if (params_->model_dtype() == DType::kBF16)
      ConvertBf16ToF32(src, u.scratch.f32(), u.slot->numel);
    else
      ConvertF16ToF32(src, u.scratch.f32(), u.slot->numel);
  }
}

void Executor::NarrowGrads(const NodeExec& n) const {
  const bool bf16 = params_->model_dtype() == DType::kBF16;
  for (const NodeExec::ParamUse& u : n.params) {
    if (!u.grad_scratch.defined()) continue;  // the kernel added into the gradient itself
    uint16_t* g = static_cast<uint16_t*>(params_->GradView(*u.slot).data());
    if (bf16)
      AddF32IntoBf16(u.grad_scratch.f32(), g, u.slot->numel);
    else
      AddF32IntoF16(u.grad_scratch.f32(), g, u.slot->numel);
  }
}

Status Executor::Forward(uint64_t seed) { return ForwardBlocks(seed, -1, graph_->num_blocks); }

Status Executor::Backward(float loss_grad, uint64_t seed) {
  return BackwardBlocks(loss_grad, seed, -1, graph_->num_blocks);
}

std::pair<int, int> Executor::NodesOfBlocks(int first_block, int last_block) const {
  int begin = static_cast<int>(nodes_.size()), end = 0;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    const int b = nodes_[i]->node->block;
    if (b < first_block || b > last_block) continue;
    begin = std::min(begin, i);
    end = i + 1;
  }
  return {std::min(begin, end), end};
}

void Executor::SetNodeTiming(bool on) {
  if (on)
    for (NodeCost& c : node_costs_) c.forward_ms = c.backward_ms = 0, c.forward_calls = 0;
  node_timing_ = on;
}

std::vector<NodeCost> Executor::NodeCosts() const { return node_costs_; }

Tensor Executor::TensorData(int tensor, bool grad) const {
  if (tensor < 0 || tensor >= static_cast<int>(views_.size())) return Tensor();
  return grad ? grad_views_[tensor] : views_[tensor];
}

Status Executor::ForwardBlocks(uint64_t seed, int first_block, int last_block) {
  const auto [begin, end] = NodesOfBlocks(first_block, last_block);
  return ForwardNodes(seed, begin, end);
}

Status Executor::ForwardNodes(uint64_t seed, int node_begin, int node_end) {
  using Clock = std::chrono::steady_clock;
  const int total = static_cast<int>(nodes_.size());
  if (node_begin < 0 || node_end > total || node_begin >= node_end) return OkStatus();
  if (device_) {
    opt_.memory->Bind();
    DS_RETURN_IF_ERROR(
        SyncParamsToDevice(nodes_[node_begin]->node->block, nodes_[node_end - 1]->node->block));
    if (node_begin == 0)
      DS_RETURN_IF_ERROR(opt_.memory->CopyToDevice(device_inputs_, data_arena_.data(),
                                                   2 * opt_.batch * opt_.seq * sizeof(int32_t)));
  }
  for (int i = node_begin; i < node_end; ++i) {
    NodeExec& ne = *nodes_[i];
    const bool timed = profiling_ || node_timing_;
    auto t0 = timed ? Clock::now() : Clock::time_point();
    if (!ne.params.empty()) WidenParams(ne);
    ne.args.seed = Mix(seed, ne.node->seed_id >= 0 ? ne.node->seed_id : i);
    Status s = ne.kernel->forward(ne.args);
    if (!s.ok()) return s.WithPrefix("forward of node \"" + ne.node->name + "\"");
    if (timed) {
      if (device_)
        DS_RETURN_IF_ERROR(opt_.memory->Synchronize());  // time the kernels, not their launch
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (profiling_) {
        NodeProfile& p = profile_[ne.node->op];
        p.forward_ms += ms;
        ++p.calls;
      }
      if (node_timing_) {
        node_costs_[i].forward_ms += ms;
        ++node_costs_[i].forward_calls;
      }
    }
  }
  if (device_ && node_end == total) {
    const Tensor& l = views_[graph_->loss];
    uint16_t half = 0;
    DS_RETURN_IF_ERROR(
        opt_.memory->CopyToHost(l.dtype() == DType::kF32 ? static_cast<void*>(&loss_host_) : &half,
                                l.data(), DTypeSize(l.dtype())));
    if (l.dtype() != DType::kF32)
      loss_host_ = l.dtype() == DType::kBF16 ? Bf16ToFloat(half) : F16ToFloat(half);
  }
  return OkStatus();
}

Status Executor::BackwardBlocks(float loss_grad, uint64_t seed, int first_block, int last_block) {
  const auto [begin, end] = NodesOfBlocks(first_block, last_block);
  return BackwardNodes(loss_grad, seed, begin, end);
}

Status Executor::BackwardNodes(float loss_grad, uint64_t seed, int node_begin, int node_end,
                               BackwardPart part) {
  if (!opt_.training) return FailedPreconditionError("executor: Backward on an inference executor");
  if (part != BackwardPart::kWhole && (device_ || !opt_.split_backward))
    return FailedPreconditionError(
        "executor: a split backward needs split_backward, on the host (zero-bubble schedules)");
  const bool inputs = part != BackwardPart::kWeight, weights = part != BackwardPart::kInput;
  using Clock = std::chrono::steady_clock;
  const int total = static_cast<int>(nodes_.size());
  if (node_begin < 0 || node_end > total || node_begin >= node_end) return OkStatus();
  const int first_block = nodes_[node_begin]->node->block;
  const int last_block = nodes_[node_end - 1]->node->block;
  const bool seeds = node_end == total && inputs;
  if (device_) {
    opt_.memory->Bind();
    DS_RETURN_IF_ERROR(SyncParamsToDevice(first_block, last_block));
    if (seeds) {
      const Tensor& seed_grad = grad_views_[graph_->loss];
      uint16_t half = 0;
      if (seed_grad.dtype() != DType::kF32)
        half = seed_grad.dtype() == DType::kBF16 ? FloatToBf16(loss_grad) : FloatToF16(loss_grad);
      DS_RETURN_IF_ERROR(opt_.memory->CopyToDevice(
          seed_grad.data(),
          seed_grad.dtype() == DType::kF32 ? static_cast<const void*>(&loss_grad) : &half,
          DTypeSize(seed_grad.dtype())));
    }
  } else if (seeds) {
    grad_views_[graph_->loss].f32()[0] = loss_grad;
  }
  for (int i = node_end - 1; i >= node_begin; --i) {
    NodeExec& ne = *nodes_[i];
    // A split backward's halves each skip the nodes with nothing of theirs to compute.
    if ((!inputs && ne.param_grads.empty()) || (!weights && ne.act_grads.empty())) continue;
    const bool timed = profiling_ || node_timing_;
    auto t0 = timed ? Clock::now() : Clock::time_point();
    if (inputs)
      for (const Tensor& t : ne.zero_before_backward) DS_RETURN_IF_ERROR(ZeroTensor(t));
    if (!ne.params.empty()) {
      WidenParams(ne);
      if (weights)
        for (const NodeExec::ParamUse& u : ne.params)
          if (!u.fresh && u.grad_scratch.defined()) u.grad_scratch.Zero();
    }
    ne.args.seed = Mix(seed, ne.node->seed_id >= 0 ? ne.node->seed_id : i);
    Status s =
        part == BackwardPart::kWhole ? ne.kernel->backward(ne.args) : BackwardPartOf(ne, part);
    if (!s.ok()) return s.WithPrefix("backward of node \"" + ne.node->name + "\"");
    if (!ne.params.empty() && weights) NarrowGrads(ne);
    if (timed) {
      if (device_) DS_RETURN_IF_ERROR(opt_.memory->Synchronize());
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (profiling_) profile_[ne.node->op].backward_ms += ms;
      if (node_timing_) node_costs_[i].backward_ms += ms;
    }
  }
  if (device_ && !states_on_device_) {
    DS_RETURN_IF_ERROR(FinishGradients());  // the previous call's, which copied meanwhile
    DS_RETURN_IF_ERROR(SendParamGradsToHost(first_block, last_block));
  }
  return OkStatus();
}

// One half of a node's backward: the other half's gradients left undefined for the kernel (every
// kernel skips an undefined gradient), then put back.
Status Executor::BackwardPartOf(NodeExec& ne, BackwardPart part) const {
  const std::vector<int>& skip = part == BackwardPart::kInput ? ne.param_grads : ne.act_grads;
  std::vector<Tensor> kept;
  for (int k : skip) kept.push_back(std::exchange(ne.args.grad_in[k], Tensor()));
  const Status s = ne.kernel->backward(ne.args);
  for (size_t j = 0; j < skip.size(); ++j) ne.args.grad_in[skip[j]] = kept[j];
  return s;
}

Status Executor::BuildDevice() {
  const std::string where = "executor on " + opt_.memory->name();
  // ZeRO-3 with the states on the device reads their gather arena (device_param_at); with them
  // on the host (ZeRO-Offload), each block range's span of the gathered host parameters is
  // uploaded before it runs (SyncParamsToDevice).
  if (opt_.device_params || opt_.device_param_at) {
    if (opt_.training && !opt_.device_grad_at)
      return InvalidArgumentError(where + ": device_params without device_grad_at");
    states_on_device_ = true;
    device_params_ = static_cast<char*>(opt_.device_params);
    return OkStatus();
  }
  const size_t bytes =
      static_cast<size_t>(params_->total_elements()) * DTypeSize(params_->model_dtype());
  DS_ASSIGN_OR_RETURN(own_params_, DeviceBuffer::Allocate(opt_.memory, bytes));
  device_params_ = static_cast<char*>(own_params_.data());
  if (opt_.training) {
    DS_ASSIGN_OR_RETURN(own_grads_, DeviceBuffer::Allocate(opt_.memory, bytes));
    device_grads_ = static_cast<char*>(own_grads_.data());
  }
  return OkStatus();
}

Status Executor::ZeroTensor(const Tensor& t) const {
  if (!device_) {
    t.Zero();
    return OkStatus();
  }
  return opt_.memory->Zero(t.data(), t.nbytes());
}

std::pair<int64_t, int64_t> Executor::BlockParamSpan(int first_block, int last_block,
                                                     std::vector<bool>* touched) const {
  const std::vector<zero::ParamSlot>& slots = params_->slots();
  int64_t lo = INT64_MAX, hi = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->node->block < first_block || nodes_[i]->node->block > last_block) continue;
    for (int k : node_slots_[i]) {
      if (touched) (*touched)[k] = true;
      lo = std::min(lo, slots[k].offset);
      hi = std::max(hi, slots[k].offset + slots[k].numel);
    }
  }
  return {lo, hi};
}

Status Executor::SyncParamsToDevice(int first_block, int last_block) {
  if (states_on_device_) return OkStatus();
  if (params_->params_partitioned() && opt_.training) {  // an inference executor: all gathered
    const auto [lo, hi] = BlockParamSpan(first_block, last_block, nullptr);
    if (lo >= hi) return OkStatus();
    const size_t size = DTypeSize(params_->model_dtype());
    return opt_.memory->CopyToDevice(device_params_ + lo * size,
                                     static_cast<const char*>(params_->model()) + lo * size,
                                     (hi - lo) * size);
  }
  if (uploaded_version_ == params_->version()) return OkStatus();
  DS_RETURN_IF_ERROR(
      opt_.memory->CopyToDevice(device_params_, params_->model(), own_params_.size()));
  uploaded_version_ = params_->version();
  return OkStatus();
}

// Note [Device gradients]
// Kernels accumulate parameter gradients into the device copy. After each BackwardBlocks the
// gradients of the parameters its blocks read go to the host: a block range's parameters are
// (nearly) one flat span, so that is one copy on the memory's copy stream, queued after the
// backward kernels, into page-locked staging; the compute stream then zeroes the span once
// the copy has read it, and the host is not held. The next BackwardBlocks (after launching
// its own kernels) or FinishGradients waits for the copy and adds the staged values into the
// ParamStore (where the plan's reductions and the optimizer find them): the host's adds and
// the copy overlap the next blocks' compute. Parameters of the span the blocks did not read
// hold zero gradients on the device and are skipped. A parameter read by blocks of two calls
// (tied embeddings) is added once per call.
Status Executor::SendParamGradsToHost(int first_block, int last_block) {
  const std::vector<zero::ParamSlot>& slots = params_->slots();
  std::vector<bool> touched(slots.size(), false);
  const auto [lo, hi] = BlockParamSpan(first_block, last_block, &touched);
  if (lo >= hi) return OkStatus();
  const size_t size = DTypeSize(params_->model_dtype());
  const size_t bytes = static_cast<size_t>(hi - lo) * size;
  if (bytes > staging_bytes_) {  // first use of a span this large (nothing is in flight here)
    if (staging_) opt_.memory->FreeHost(staging_);
    staging_ = nullptr;
    DS_ASSIGN_OR_RETURN(staging_, opt_.memory->AllocateHost(bytes));
    staging_bytes_ = bytes;
  }
  char* device = device_grads_ + lo * size;
  DS_RETURN_IF_ERROR(opt_.memory->CopyToHostAsync(staging_, device, bytes));
  DS_RETURN_IF_ERROR(opt_.memory->OrderAfterCopies());
  DS_RETURN_IF_ERROR(opt_.memory->Zero(device, bytes));
  sent_lo_ = lo;
  sent_slots_.clear();
  for (size_t k = 0; k < slots.size(); ++k)
    if (touched[k]) sent_slots_.push_back(static_cast<int>(k));
  return OkStatus();
}

Status Executor::FinishGradients() {
  if (sent_slots_.empty()) return OkStatus();
  DS_RETURN_IF_ERROR(opt_.memory->WaitCopies());
  const std::vector<zero::ParamSlot>& slots = params_->slots();
  const DType m = params_->model_dtype();
  const size_t size = DTypeSize(m);
  const char* staged = static_cast<const char*>(staging_);
  for (int k : sent_slots_) {
    void* host = params_->GradView(slots[k]).data();
    const void* add = staged + (slots[k].offset - sent_lo_) * size;
    const int64_t n = slots[k].numel;
    if (m == DType::kF32) {
      float* h = static_cast<float*>(host);
      const float* a = static_cast<const float*>(add);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t j = 0; j < n; ++j) h[j] += a[j];
    } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t j = 0; j < n; ++j)
        StoreFloat(host, m, j, LoadFloat(host, m, j) + LoadFloat(add, m, j));
    }
  }
  sent_slots_.clear();
  return OkStatus();
}

// The 16-bit device path: parameters in the model dtype, and every activation in the dtype the
// ops' shape inference gives for them (the model dtype; the loss stays fp32), as the CUDA
// kernels take them (kernels/cuda/conformance_gpu_test.cc runs each op this way).
Status Executor::DeviceSpecs() {
  const Graph& g = *graph_;
  const DType m = params_->model_dtype();
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].role == TensorRole::kParam) specs_[t].dtype = m;
  for (const NodeInfo& n : g.nodes) {
    const kernels::OpDef* def = kernels::FindOp(n.op);
    if (!def || !def->infer)
      return UnimplementedError("executor: unknown op \"" + n.op + "\" (node " + n.name + ")");
    std::vector<TensorSpec> in, out;
    for (int t : n.inputs) in.push_back(specs_[t]);
    Status s = def->infer(n.attrs, in, &out);
    if (!s.ok())
      return s.WithPrefix("executor on " + opt_.memory->name() + ": node \"" + n.name + "\" in " +
                          DTypeName(m));
    for (size_t k = 0; k < n.outputs.size() && k < out.size(); ++k) specs_[n.outputs[k]] = out[k];
  }
  return OkStatus();
}

Tensor Executor::Activation(const std::string& name) const {
  int t = graph_->FindTensor(name);
  if (t < 0 || graph_->tensors[t].role != TensorRole::kActivation) return Tensor();
  return views_[t];
}

}  // namespace ds::exec
