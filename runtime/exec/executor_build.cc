// The executor's construction, apart from running it (executor.cc): the data inputs and state
// bound, a kernel and an argument set per node, and the activation gradients' arena (Note
// [Activation gradient liveness]); the activations' own arena is executor_layout.cc's.
#include <algorithm>
#include <memory>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor_node.h"
#include "runtime/graph/activation_grads.h"
#include "runtime/graph/recompute.h"
#include "runtime/graph/validate.h"

namespace ds::exec {

using internal::AlignUp;

Status Executor::BindState() {
  const Graph& g = *graph_;
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].role != TensorRole::kState) continue;
    const std::string& name = g.tensors[t].name;
    auto it = opt_.state.find(name);
    if (it == opt_.state.end())
      return InvalidArgumentError("executor: state tensor \"" + name + "\" is not bound");
    if (device_)
      return UnimplementedError("executor: state tensors on a device (\"" + name + "\")");
    const Tensor& v = it->second;
    if (v.shape() != specs_[t].shape || v.dtype() != specs_[t].dtype)
      return InvalidArgumentError("executor: state \"" + name + "\" is bound as " +
                                  ShapeToString(v.shape()) + " " + DTypeName(v.dtype()) +
                                  ", the graph needs " + ShapeToString(specs_[t].shape) + " " +
                                  DTypeName(specs_[t].dtype));
    views_[t] = v;
  }
  return OkStatus();
}

Status Executor::Build() {
  const Graph& g = *graph_;
  device_ = opt_.memory != nullptr;
  const Device kd = device_ ? opt_.memory->device() : Device::kCpu;
  if (device_) DS_RETURN_IF_ERROR(BuildDevice());
  DS_ASSIGN_OR_RETURN(specs_, InferTensorSpecs(g, {{"batch", opt_.batch}, {"seq", opt_.seq}},
                                               g.name.empty() ? "graph" : g.name));
  // Saved buffers and FLOPs come from the fp32 specs; a 16-bit device path stores its
  // activations in the model dtype (DeviceSpecs).
  const std::vector<TensorSpec> f32_specs = specs_;
  const DType kernel_dtype = device_ && params_->mixed() ? params_->model_dtype() : DType::kF32;
  if (kernel_dtype != DType::kF32) DS_RETURN_IF_ERROR(DeviceSpecs());
  views_.assign(g.tensors.size(), Tensor());
  grad_views_.assign(g.tensors.size(), Tensor());
  DS_RETURN_IF_ERROR(BindDataInputs());
  DS_RETURN_IF_ERROR(BindState());
  // Node kernels, then the forward arena (activations + saved buffers, LayoutActivations).
  std::vector<std::vector<TensorSpec>> saved_specs(g.nodes.size());
  size_t max_node_params = 0;
  DS_RETURN_IF_ERROR(MakeNodes(kd, kernel_dtype, f32_specs, &saved_specs, &max_node_params));
  grad_specs_ = specs_;
  ChooseBf16Activations();
  std::vector<std::vector<Tensor>> saved_views;
  DS_RETURN_IF_ERROR(LayoutActivations(saved_specs, &saved_views));
  if (params_->mixed()) {
    scratch_ = Buffer::Allocate(max_node_params);
    if (opt_.training) grad_scratch_ = Buffer::Allocate(max_node_params);
  }
  DS_RETURN_IF_ERROR(BindNodeArgs(saved_views));
  if (opt_.training) DS_RETURN_IF_ERROR(PlanActivationGrads());
  for (const std::unique_ptr<NodeExec>& ne : nodes_)  // primitives made now, not in a step
    if (ne->kernel->prepare)
      DS_RETURN_IF_ERROR(ne->kernel->prepare(ne->args).WithPrefix(ne->node->name));
  return OkStatus();
}

// Data inputs (ids, targets): one int32 arena. A pipeline stage before the last reads no
// targets; its targets() buffer is still there for the data loader to fill.
Status Executor::BindDataInputs() {
  const Graph& g = *graph_;
  int ids = -1, targets = -1;
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].role == TensorRole::kInput) ids = static_cast<int>(t);
    if (g.tensors[t].role == TensorRole::kTarget) targets = static_cast<int>(t);
  }
  if (ids < 0) return InvalidArgumentError("executor: graph needs an input (the token ids)");
  const int64_t tokens = opt_.batch * opt_.seq;
  data_arena_ = Buffer::Allocate(2 * tokens * sizeof(int32_t));
  int32_t* data = static_cast<int32_t*>(data_arena_.data());
  inputs_ = {data, data + tokens};
  if (device_) {  // the kernels read a device copy, uploaded when the first block runs
    DS_ASSIGN_OR_RETURN(device_inputs_, Arena(2 * tokens * sizeof(int32_t), nullptr));
    data = reinterpret_cast<int32_t*>(device_inputs_);
  }
  views_[ids] = Tensor(data, specs_[ids].shape, DType::kI32);
  if (targets >= 0) views_[targets] = Tensor(data + tokens, specs_[targets].shape, DType::kI32);
  return OkStatus();
}

// A kernel, saved-buffer specs and costs per node; *max_node_params: the largest fp32 scratch
// one node's parameters need (mixed precision on the host widens them there).
Status Executor::MakeNodes(Device kd, DType kernel_dtype, const std::vector<TensorSpec>& f32_specs,
                           std::vector<std::vector<TensorSpec>>* saved_specs,
                           size_t* max_node_params) {
  const Graph& g = *graph_;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeInfo& n = g.nodes[i];
    auto ne = std::make_unique<NodeExec>();
    ne->node = &n;
    ne->def = kernels::FindOp(n.op);
    ne->kernel = kernels::FindKernel(n.op, kd, kernel_dtype);
    if (!ne->def || !ne->kernel)
      return UnimplementedError("executor: no " + std::string(DeviceName(kd)) + "/" +
                                DTypeName(kernel_dtype) + " kernel for op \"" + n.op + "\" (node " +
                                n.name + ")");
    std::vector<TensorSpec> in;
    for (int t : n.inputs) in.push_back(f32_specs[t]);
    if (ne->def->saved) (*saved_specs)[i] = ne->def->saved(n.attrs, in);
    NodeCost& cost = node_costs_.emplace_back();
    cost.name = n.name;
    cost.op = n.op;
    cost.block = n.block;
    cost.forward_flops = ne->def->forward_flops ? ne->def->forward_flops(n.attrs, in) : 0;
    cost.backward_flops = ne->def->backward_flops ? ne->def->backward_flops(n.attrs, in) : 0;
    fwd_flops_ += cost.forward_flops;
    bwd_flops_ += cost.backward_flops;
    size_t node_params = 0;
    for (int t : n.inputs)
      if (g.tensors[t].role == TensorRole::kParam) {
        node_params += AlignUp(specs_[t].numel() * 4);
        cost.params += specs_[t].numel();
      }
    *max_node_params = std::max(*max_node_params, node_params);
    nodes_.push_back(std::move(ne));
  }
  return OkStatus();
}

// A frozen weight as forward and backward read it: the frozen store's fp32 view.
StatusOr<Tensor> Executor::FrozenView(int t) const {
  const std::string& name = graph_->tensors[t].name;
  if (!opt_.frozen)
    return InvalidArgumentError("executor: frozen weight " + name + " but no frozen store");
  if (device_)
    return InvalidArgumentError(
        "executor: frozen weights (LoRA's base model) live in host memory "
        "only; " +
        name + " cannot be read by a device executor");
  const zero::ParamSlot* slot = opt_.frozen->ForParam(*graph_, t);
  if (!slot) return InternalError("executor: frozen weight " + name + " not in the frozen store");
  return opt_.frozen->ModelView(*slot);
}

// Each node's forward arguments: its inputs' and outputs' views, its saved buffers, and each
// parameter where this layout reads it (the device copy, the fp32 scratch of a 16-bit host
// model, or the store's own fp32 view).
Status Executor::BindNodeArgs(const std::vector<std::vector<Tensor>>& saved_views) {
  const Graph& g = *graph_;
  node_slots_.assign(nodes_.size(), {});
  char* sc = static_cast<char*>(scratch_.data());  // nodes run one at a time: shared scratch
  char* gsc = static_cast<char*>(grad_scratch_.data());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeExec& ne = *nodes_[i];
    kernels::OpArgs& a = ne.args;
    a.attrs = &ne.node->attrs;
    a.training = opt_.training;
    a.matmul = device_ ? DType::kF32 : opt_.matmul;
    size_t used = 0;  // this node's bytes of the scratch
    for (size_t k = 0; k < ne.node->inputs.size(); ++k) {
      const int t = ne.node->inputs[k];
      if (g.tensors[t].role == TensorRole::kFrozen) {
        DS_ASSIGN_OR_RETURN(Tensor w, FrozenView(t));
        a.in.push_back(w);
        continue;
      }
      if (g.tensors[t].role != TensorRole::kParam) {
        a.in.push_back(views_[t]);
        continue;
      }
      const zero::ParamSlot* slot = params_->ForParam(g, t);
      if (!slot) return InternalError("executor: parameter " + g.tensors[t].name + " not in store");
      if (device_) {
        const DType m = params_->model_dtype();
        void* p = opt_.device_param_at ? opt_.device_param_at(slot->offset)
                                       : device_params_ + slot->offset * DTypeSize(m);
        a.in.push_back(Tensor(p, slot->shape, m));
        node_slots_[i].push_back(static_cast<int>(slot - params_->slots().data()));
      } else if (params_->mixed()) {
        // A kernel that multiplies bf16, or only copies values out, reads a bf16 weight where it
        // is stored (no widening).
        const bool as_bf16 = params_->model_dtype() == DType::kBF16 &&
                             ((a.matmul == DType::kBF16 && (ne.kernel->bf16_inputs >> k & 1u)) ||
                              (ne.kernel->bf16_reads >> k & 1u));
        NodeExec::ParamUse use{slot, Tensor(sc + used, slot->shape, DType::kF32),
                               gsc ? Tensor(gsc + used, slot->shape, DType::kF32) : Tensor()};
        used += AlignUp(slot->numel * 4);
        if (as_bf16) use.scratch = Tensor();
        // The kernel adds into the stored bf16 gradient itself (Kernel::bf16_param_grads).
        if (as_bf16 && (ne.kernel->bf16_param_grads >> k & 1u)) use.grad_scratch = Tensor();
        a.in.push_back(as_bf16 ? params_->ModelView(*slot) : use.scratch);
        ne.params.push_back(use);
      } else {
        a.in.push_back(params_->ModelView(*slot));  // fp32: the master, or stage 3's gathered copy
      }
    }
    for (int t : ne.node->outputs) a.out.push_back(views_[t]);
    a.saved = saved_views[i];
  }
  return OkStatus();
}

// The activation gradients' arena (runtime/graph/activation_grads.h: placed over their backward
// live ranges, as the planner counts it). A buffer is zeroed just before the backward step that
// opens its interval (kernels accumulate).
Status Executor::PlanActivationGrads() {
  const Graph& g = *graph_;
  const int n = static_cast<int>(g.nodes.size()), nt = static_cast<int>(g.tensors.size());
  std::vector<uint32_t> non_diff(n);
  for (int i = 0; i < n; ++i) non_diff[i] = nodes_[i]->def->non_differentiable_inputs;
  ChooseBf16Grads();
  std::vector<int64_t> bytes(nt);
  for (int t = 0; t < nt; ++t) bytes[t] = static_cast<int64_t>(AlignUp(grad_specs_[t].nbytes()));
  const GradPlacement place = PlaceActivationGrads(g, non_diff, opt_.split_backward, bytes);
  DS_ASSIGN_OR_RETURN(char* grads, Arena(static_cast<size_t>(place.bytes), &grad_arena_));
  grad_bytes_ = place.bytes;
  for (int t : place.order) {
    grad_views_[t] = Tensor(grads + place.offset[t], grad_specs_[t].shape, grad_specs_[t].dtype);
    const int node = n - 1 - place.start[t];
    if (t != g.loss) nodes_[node]->zero_before_backward.push_back(grad_views_[t]);
  }
  BindGradArgs();
  if (!device_ && !opt_.split_backward)
    for (std::unique_ptr<NodeExec>& ne : nodes_) MarkFreshGrads(*ne);
  return CheckBf16GradsFresh();
}

// Note [Fresh gradients]
// Kernels add into their gradients, so the executor zeroes an activation's gradient before
// the backward that first writes it, and a 16-bit model's fp32 parameter-gradient scratch
// before each backward. A kernel that can write a gradient whole (Kernel::
// overwrites_fresh_grads: linear's products with beta 0, cross-entropy's rows) is told which of
// its gradients are fresh instead, and those are not zeroed: the logits' gradient alone is 8M
// floats a step at V 8192. Only where the buffer is this node's input once, its zeroing is this
// node's, and the backward runs whole.
void Executor::MarkFreshGrads(NodeExec& ne) {
  if (!ne.kernel->overwrites_fresh_grads) return;
  kernels::OpArgs& a = ne.args;
  for (size_t k = 0; k < a.grad_in.size() && k < 32; ++k) {
    const Tensor& gk = a.grad_in[k];
    if (!gk.defined()) continue;
    int uses = 0;
    for (const Tensor& other : a.grad_in) uses += other.data() == gk.data();
    if (uses != 1) continue;
    auto& zeros = ne.zero_before_backward;
    auto z = std::find_if(zeros.begin(), zeros.end(),
                          [&](const Tensor& t) { return t.data() == gk.data(); });
    if (z != zeros.end()) {
      zeros.erase(z);
      a.fresh_grads |= 1u << k;
      continue;
    }
    auto p = std::find_if(ne.params.begin(), ne.params.end(), [&](const NodeExec::ParamUse& u) {
      return u.grad_scratch.data() == gk.data();
    });
    if (p == ne.params.end()) continue;  // accumulates (the ParamStore's, over micro-batches)
    p->fresh = true;
    a.fresh_grads |= 1u << k;
  }
}

// Each node's backward arguments: its outputs' gradients in, and per input the gradient it
// accumulates into (none, the parameter's gradient where this layout keeps it, or the
// activation's arena view).
void Executor::BindGradArgs() {
  const Graph& g = *graph_;
  for (std::unique_ptr<NodeExec>& node : nodes_) {
    NodeExec& ne = *node;
    kernels::OpArgs& a = ne.args;
    for (int t : ne.node->outputs) a.grad_out.push_back(grad_views_[t]);
    size_t p = 0;
    for (size_t k = 0; k < ne.node->inputs.size(); ++k) {
      const int t = ne.node->inputs[k];
      if (ne.def->non_differentiable_inputs & (1u << k)) {
        a.grad_in.push_back(Tensor());
      } else if (g.tensors[t].role == TensorRole::kParam) {
        ne.param_grads.push_back(static_cast<int>(k));
        const zero::ParamSlot* slot = params_->ForParam(g, t);
        if (device_) {
          const DType m = params_->model_dtype();
          void* grad = states_on_device_ ? opt_.device_grad_at(slot->offset)
                                         : device_grads_ + slot->offset * DTypeSize(m);
          a.grad_in.push_back(Tensor(grad, slot->shape, m));
        } else if (params_->mixed()) {
          const NodeExec::ParamUse& u = ne.params[p++];
          a.grad_in.push_back(u.grad_scratch.defined() ? u.grad_scratch : params_->GradView(*slot));
        } else {
          a.grad_in.push_back(params_->GradView(*slot));
        }
      } else if (g.tensors[t].role == TensorRole::kActivation) {
        ne.act_grads.push_back(static_cast<int>(k));
        a.grad_in.push_back(grad_views_[t]);
      } else {
        a.grad_in.push_back(Tensor());
      }
    }
  }
}

}  // namespace ds::exec
