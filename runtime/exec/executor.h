// Executor: runs one rank's forward and backward over a validated graph for a fixed
// (batch, seq), with every buffer allocated once at creation: activations, op-private
// saved buffers, and activation gradients (assigned by liveness over the backward order,
// so they reuse memory). Nothing is allocated in the step loop.
//
// Precision: kernels compute in fp32. With a 16-bit ParamStore, each node's parameters
// are widened into a scratch buffer before the node runs and its fp32 parameter gradients
// are narrowed and added into the 16-bit gradients after its backward.
//
// Device path (ExecutorOptions::memory set): activations, activation gradients, the data
// inputs, and a copy of the parameters and of their gradients live in that DeviceMemory and
// the kernels registered for its device run on them (fp32, or bf16 with activations in bf16
// and the loss in fp32, or the same in fp16; ZeRO-3 with the states on the device, with them
// on the host (each block range's gathered parameters uploaded before it runs), or to infer).
// The
// ParamStore stays on the host as the source of truth, as with ZeRO-Offload's optimizer on
// the CPU: the parameters are uploaded when ParamStore::version() moved, the micro-batch when
// the first block runs, and the gradients of the parameters a BackwardBlocks call touched go
// to the host on the memory's copy stream while the next blocks compute; they are added into
// the ParamStore's gradients at the next BackwardBlocks or FinishGradients(), which whoever
// reads those gradients calls first (the step runner does). ids() / targets() stay host
// memory; Activation() returns device memory. With HostMemory the same path runs on the CPU.
// With device_params / device_grad_at given, the parameters and their gradients already live
// on the device (the optimizer steps there) and nothing moves between the two.
//
// Not thread-safe: one thread drives an Executor (kernels parallelize internally).
//
//   DS_ASSIGN_OR_RETURN(auto ex, Executor::Create(graph, &params, {4, 256, true}));
//   std::copy(tokens, tokens + 4 * 256, ex->ids());
//   DS_RETURN_IF_ERROR(ex->Forward(seed));
//   DS_RETURN_IF_ERROR(ex->Backward(1.0f, seed));   // grads accumulate into params
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "runtime/core/device_memory.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/recompute.h"
#include "zero/param_store.h"

namespace ds::exec {

struct ExecutorOptions {
  int64_t batch = 1;
  int64_t seq = 1;
  bool training = true;            // false: no gradients, no backward, dropout off
  DeviceMemory* memory = nullptr;  // borrowed; null: host memory, CPU kernels, no copies
  // Device path with the model states on the device (zero/device_states.h): the
  // flat parameters in `memory` laid out as the ParamStore's, and where the gradient of a
  // flat element is (one parameter's contiguous from there; a bucket arena at ZeRO-2). The
  // executor reads and accumulates there and copies nothing to or from the ParamStore.
  void* device_params = nullptr;
  std::function<void*(int64_t flat_element)> device_param_at;  // instead of device_params (ZeRO-3)
  std::function<void*(int64_t flat_element)> device_grad_at;   // training only
  // Activation recompute (the plan's segments, runtime/graph/recompute.h): their transient
  // tensors share one arena; RecomputeNodes runs a segment's forward again before its backward.
  std::vector<RecomputeSegment> recompute;
  // partition_activations: which of the segments' `parts` slices of a partitioned input this
  // rank keeps (its tensor-parallel rank).
  int checkpoint_rank = 0;
  // Zero-bubble schedules: backwards run in two halves (BackwardPart), so the output gradients of
  // nodes with parameters keep their own memory until the weight half has read them.
  bool split_backward = false;
  // The graph's kState tensors by name (generation's KV caches and per-run inputs): the caller's
  // buffers, kept between runs, of exactly the shapes the graph gives at (batch, seq). Host
  // memory only.
  std::map<std::string, Tensor> state;
  // The graph's kFrozen weights (LoRA's base model): a store of them (zero::ParamStore with role
  // kFrozen, fp32), borrowed; forward and backward read them, nothing writes them. Host only.
  const zero::ParamStore* frozen = nullptr;
  // Host path, 16-bit model: the precision of the matrix products' inputs (OpArgs::matmul).
  // kBF16 (a bf16 model on a CPU that multiplies bf16: the trainer decides, from
  // device.cpu_bf16_matmul) rounds the linear layers' activations to bf16 too; kF32 multiplies
  // the widened bf16 weights by fp32 activations.
  DType matmul = DType::kF32;
};

// The halves of a backward a zero-bubble schedule runs apart: kInput the activations' gradients
// (what the previous pipeline stage waits for; seeds dL/dloss), kWeight later the parameters'
// (from the output gradients kInput left in place). Each skips the nodes with none of its own.
enum class BackwardPart { kWhole, kInput, kWeight };

struct NodeProfile {
  double forward_ms = 0, backward_ms = 0;
  int64_t calls = 0;
};

// One node's cost (the flops profiler): its parameters, FLOPs per call (the op's formulas at
// the executor's batch and sequence), and the time SetNodeTiming collected.
struct NodeCost {
  std::string name, op;
  int block = -1;
  int64_t params = 0;  // elements of the parameters it reads
  double forward_flops = 0, backward_flops = 0;
  double forward_ms = 0, backward_ms = 0;
  int64_t forward_calls = 0;
};

class Executor {
 public:
  static StatusOr<std::unique_ptr<Executor>> Create(const Graph& graph, zero::ParamStore* params,
                                                    const ExecutorOptions& options);
  ~Executor();

  int32_t* ids() const { return inputs_[0]; }
  int32_t* targets() const { return inputs_[1]; }
  int64_t batch() const { return opt_.batch; }
  const Graph& graph() const { return *graph_; }
  int64_t seq() const { return opt_.seq; }

  // Runs every node; `seed` feeds dropout (derive it from step and micro-batch).
  Status Forward(uint64_t seed);
  // Runs the nodes of blocks [first_block, last_block] only (block -1 = the embeddings,
  // num_blocks = the head and loss): the step planner's FORWARD instruction. Blocks must be
  // run in order; together they equal Forward().
  Status ForwardBlocks(uint64_t seed, int first_block, int last_block);
  // Runs nodes [node_begin, node_end): the step planner's FORWARD instruction, a block range or
  // a part of one cut at a tensor-parallel collective. Ranges must be run in order.
  Status ForwardNodes(uint64_t seed, int node_begin, int node_end);
  float loss() const { return device_ ? loss_host_ : views_[graph_->loss].f32()[0]; }
  // Backpropagates dL/dloss = `loss_grad` (e.g. loss_scale / accumulation_steps) and
  // accumulates parameter gradients into the ParamStore. Needs the preceding Forward.
  Status Backward(float loss_grad, uint64_t seed);
  // Backward of blocks [first_block, last_block], last block first: the planner's BACKWARD
  // instruction. The first call of a step must include the loss block (num_blocks), which
  // seeds dL/dloss = `loss_grad`.
  Status BackwardBlocks(float loss_grad, uint64_t seed, int first_block, int last_block);
  // Backward of nodes [node_begin, node_end), last node first; a range that ends with the last
  // node seeds dL/dloss = `loss_grad`.
  // `part` (split_backward executors on the host): one half of it.
  Status BackwardNodes(float loss_grad, uint64_t seed, int node_begin, int node_end,
                       BackwardPart part = BackwardPart::kWhole);
  // The memory of tensor `tensor`'s forward value, or of its gradient (undefined Tensor when it
  // has none): what a tensor-parallel all-reduce works on in place.
  Tensor TensorData(int tensor, bool grad) const;
  // partition_activations: the slice of a partitioned segment input this rank keeps (undefined
  // Tensor for any other tensor), and StashCheckpoint copies the tensor's slice there after
  // forward wrote it (the plan's CHECKPOINT_STASH); the plan's CHECKPOINT_RESTORE all-gathers
  // the slices back into TensorData(tensor) before the segment's recompute.
  Tensor CheckpointSlice(int tensor) const;
  Status StashCheckpoint(int tensor);
  // cpu_checkpointing (RecomputeSegment::on_host): the whole tensor's copy lives in host memory;
  // StashCheckpoint copies it there, RestoreCheckpoint copies it back before the recompute.
  Status RestoreCheckpoint(int tensor);
  int64_t host_checkpoint_bytes() const { return static_cast<int64_t>(host_slices_.size()); }
  // Device path with the states on the host: adds the gradients still on their way from the
  // device into the ParamStore. A no-op otherwise.
  Status FinishGradients();

  // The forward value of a named activation (e.g. "logits"); undefined Tensor if absent.
  Tensor Activation(const std::string& name) const;

  double forward_flops() const { return fwd_flops_; }
  double backward_flops() const { return bwd_flops_; }
  // Bytes allocated for activations+saved, and for activation gradients. Of the first: what
  // forward keeps for backward (partitioned checkpoints' slices included), and the recompute
  // segments' shared arena (Note [Activation layout] in executor_layout.cc); the rest is the
  // forward-only tensors' arena.
  int64_t activation_bytes() const { return act_bytes_; }
  int64_t kept_activation_bytes() const { return kept_bytes_; }
  int64_t recompute_arena_bytes() const { return transient_bytes_; }
  int64_t activation_grad_bytes() const { return grad_bytes_; }
  // The micro-batch's token ids and targets (int32).
  int64_t input_bytes() const { return static_cast<int64_t>(data_arena_.size()); }
  // Activations stored in bf16 (Note [bf16 activations] in runtime/graph/host_bf16.h): how many of
  // the graph's activation tensors, and their bytes (half what fp32 would take).
  int bf16_activations() const { return bf16_acts_; }
  int64_t bf16_activation_bytes() const { return bf16_act_bytes_; }
  // Per-op-type time, collected when DS_PROFILE_OPS=1 is set (on a device it synchronizes
  // after every node, so the times are the kernels' and the run is slower).
  const std::map<std::string, NodeProfile>& profile() const { return profile_; }
  // The flops profiler: on = time every node from now on (the times start at zero; on a
  // device it synchronizes after each node); off = stop timing.
  void SetNodeTiming(bool on);
  std::vector<NodeCost> NodeCosts() const;

 private:
  struct NodeExec;
  Executor(const Graph& graph, zero::ParamStore* params, const ExecutorOptions& options);
  // Construction (executor_build.cc).
  Status Build();
  Status BindDataInputs();  // views_ of the token ids and targets: one int32 arena
  Status BindState();       // views_ of the kState tensors: the caller's buffers (options.state)
  Status MakeNodes(Device kd, DType kernel_dtype, const std::vector<TensorSpec>& f32_specs,
                   std::vector<std::vector<TensorSpec>>* saved_specs, size_t* max_node_params);
  Status BindNodeArgs(const std::vector<std::vector<Tensor>>& saved_views);
  StatusOr<Tensor> FrozenView(int t) const;  // a kFrozen weight: options.frozen's view
  void BindGradArgs();
  // bf16 on the host (executor_bf16.cc): whether this is a bf16 step, and the activations'
  // (specs_) and their gradients' (grad_specs_) dtypes in it.
  bool Bf16Step() const;
  std::vector<kernels::HostBf16> NodeHostBf16() const;  // its kernels' flags, in node order
  void ChooseBf16Activations();
  void ChooseBf16Grads();
  Status CheckBf16GradsFresh() const;
  Status LayoutActivations(const std::vector<std::vector<TensorSpec>>& saved_specs,
                           std::vector<std::vector<Tensor>>* saved_views);
  Status PlanActivationGrads();
  void WidenParams(const NodeExec& n) const;
  void MarkFreshGrads(NodeExec& ne);  // Note [Fresh gradients]
  void NarrowGrads(const NodeExec& n) const;
  Status BackwardPartOf(NodeExec& n, BackwardPart part) const;
  // Device path.
  Status BuildDevice();
  Status DeviceSpecs();
  Status ZeroTensor(const Tensor& t) const;
  // Stages 0-2: the whole flat copy, when ParamStore::version() moved. ZeRO-3 with the states
  // on the host (ZeRO-Offload): the span of the parameters blocks [first, last] read, which the
  // plan gathered on the host just before.
  Status SyncParamsToDevice(int first_block, int last_block);
  // The flat span [lo, hi) of the parameters nodes of blocks [first, last] read; `touched`
  // (optional) marks their slots.
  std::pair<int64_t, int64_t> BlockParamSpan(int first_block, int last_block,
                                             std::vector<bool>* touched) const;
  // Nodes [first, second) of blocks [first_block, last_block] (nodes are grouped by block).
  std::pair<int, int> NodesOfBlocks(int first_block, int last_block) const;
  // Copies the gradients blocks [first_block, last_block] touched to the host (async) and
  // zeroes them on the device; FinishGradients adds them into the ParamStore.
  Status SendParamGradsToHost(int first_block, int last_block);
  // Memory for `bytes` of the executor: a host Buffer, or device memory on the device path.
  StatusOr<char*> Arena(size_t bytes, Buffer* host);

  const Graph* graph_;
  zero::ParamStore* params_;
  ExecutorOptions opt_;
  std::vector<TensorSpec> specs_;
  std::vector<TensorSpec> grad_specs_;  // activation gradients' (host: fp32, or bf16 by the Note)
  std::vector<Tensor> views_;           // forward value of every tensor
  std::vector<Tensor> grad_views_;      // activation gradients (aliasing by liveness)
  std::map<int, Tensor> slice_views_;   // partitioned checkpoints: this rank's slice
  std::vector<char> host_slices_;       // cpu_checkpointing: the kept copies, in host memory
  std::map<int, bool> slice_on_host_;
  std::vector<int32_t*> inputs_;  // ids, targets
  std::vector<std::unique_ptr<NodeExec>> nodes_;
  Buffer act_arena_, grad_arena_, scratch_, grad_scratch_, data_arena_;
  // Device path.
  bool device_ = false;
  std::vector<DeviceBuffer> device_buffers_;  // activations, gradients, inputs
  DeviceBuffer own_params_, own_grads_;       // flat copies, unless the options lend them
  char* device_params_ = nullptr;
  char* device_grads_ = nullptr;
  bool states_on_device_ = false;  // lent: no uploads, no gradient copies
  char* device_inputs_ = nullptr;
  uint64_t uploaded_version_ = ~0ull;
  float loss_host_ = 0;
  std::vector<std::vector<int>> node_slots_;  // per node: indices of the param slots it reads
  // Gradients on their way to the host (Note [Device gradients]): page-locked staging of
  // staging_bytes_, the flat span [sent_lo_, ...) it holds, and the slots to add.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  int64_t sent_lo_ = 0;
  std::vector<int> sent_slots_;
  double fwd_flops_ = 0, bwd_flops_ = 0;
  int64_t act_bytes_ = 0, grad_bytes_ = 0, kept_bytes_ = 0, transient_bytes_ = 0;
  int bf16_acts_ = 0;
  int64_t bf16_act_bytes_ = 0;
  bool profiling_ = false;
  std::map<std::string, NodeProfile> profile_;
  bool node_timing_ = false;
  std::vector<NodeCost> node_costs_;  // per node
};

}  // namespace ds::exec
