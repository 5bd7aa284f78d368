// The Trainer's inference side: executors without gradients and generators over the same
// parameters (evaluation, ds-generate, RLHF rollouts), and the hybrid engine's switch between
// the training layout and the whole model.
#include <algorithm>
#include <string>

#include "parallel/comm/communicator.h"
#include "parallel/tensor/tp_shards.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/generate/generator.h"
#include "runtime/graph/validate.h"
#include "runtime/planner/decode_graph.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/tp_generator.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer_swapper.h"

namespace ds::worker {

// The hybrid engine's switch: every parameter whole in the host store (ZeRO-3 all-gathered,
// NVMe-offloaded ones read, device states downloaded), and back to the training layout.
// With model.lora the generators read the base model with the adapters fused (FuseAdapters), as
// DeepSpeed-Chat's hybrid engine fuses them before generating.
Status Trainer::GatherParams() {
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());
  DS_RETURN_IF_ERROR(runner_->GatherAllParams());
  return fused_ ? FuseAdapters() : OkStatus();
}

void Trainer::ReleaseParams() {
  runner_->ReleaseGatheredParams();
  if (swapper_) swapper_->DropParams();
}

StatusOr<std::unique_ptr<exec::Executor>> Trainer::MakeInferenceExecutor(int64_t batch,
                                                                         int64_t seq) {
  if (part_->tp || part_->stage >= 0)
    return UnimplementedError(config_.source +
                              ": generation from a tensor- or pipeline-parallel model "
                              "(parallel.tensor or parallel.pipeline > 1) is not written yet");
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());
  DS_RETURN_IF_ERROR(runner_->GatherAllParams());  // stage 3: stays gathered
  // Expert parallelism: the other ranks' experts gathered first (every rank joins).
  zero::ParamStore* params = params_.get();
  if (part_->sliced) {
    DS_ASSIGN_OR_RETURN(params, GatherWholeModel());
  }
  // Every rank holds every parameter: it generates with the whole model, alone.
  const Graph& g = part_->local ? part_->whole : graph_;
  exec::ExecutorOptions o{batch, seq, false};
  o.frozen = frozen_.get();
  // Per-token inputs (PPO's heads): zeroed buffers of this executor's shape; its losses then
  // count nothing, and the caller reads the logits or values.
  DS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs,
                      InferTensorSpecs(g, {{"batch", batch}, {"seq", seq}}, g.name));
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].role != TensorRole::kState) continue;
    std::vector<float>& buf = inference_state_.emplace_back(specs[t].numel(), 0.0f);
    o.state[g.tensors[t].name] = Tensor(buf.data(), specs[t].shape, specs[t].dtype);
  }
  return exec::Executor::Create(g, params, o);
}

StatusOr<std::unique_ptr<generate::Generator>> Trainer::MakeGenerator(int64_t max_batch,
                                                                      int64_t max_len,
                                                                      int gather_blocks) {
  const int ep = std::max(1, plan_->topology().ep());
  if (part_->stage >= 0 || (part_->tp && ep > 1))
    return UnimplementedError(config_.source +
                              ": generation from a pipeline-parallel model, or a tensor-parallel "
                              "one with expert parallelism, is not written yet");
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());
  generate::GeneratorOptions o{max_batch, max_len};
  if (config_.model.lora.enabled) {  // the hybrid engine: the adapters fused into the base model
    DS_RETURN_IF_ERROR(FuseAdapters());
    return generate::Generator::Create(fused_graph_, fused_.get(), o);
  }
  if (gather_blocks > 0 && params_->params_partitioned() && !part_->tp && !part_->sliced) {
    runner_->ReleaseGatheredParams();
    o.gather_blocks = gather_blocks;
    o.gather = [this](int a, int b) { return runner_->GatherParamUnits(UnitsOfBlocks(a, b)); };
    o.release = [this](int a, int b) {
      runner_->ReleaseParamUnits(UnitsOfBlocks(a, b));
      return OkStatus();
    };
    o.any_live = [this](bool live) -> StatusOr<bool> {
      int32_t v = live ? 1 : 0;
      DS_RETURN_IF_ERROR(
          host_comm_->AllReduce(parallel::BufferView(&v, 1), parallel::ReduceOp::kMax));
      return v != 0;
    };
    return generate::Generator::Create(graph_, params_.get(), o);
  }
  DS_RETURN_IF_ERROR(runner_->GatherAllParams());  // stage 3: stays gathered
  zero::ParamStore* params = params_.get();
  if (part_->tp) {  // each tp rank its heads and vocabulary rows, over its tp group
    o.tp = std::max(1, plan_->topology().tp());
    o.tp_rank = part_->cut.tp_rank();
    o.tp_comm = tp_comm_;
  } else if (part_->sliced) {  // expert parallelism: the other ranks' experts gathered first
    DS_ASSIGN_OR_RETURN(params, GatherWholeModel());
  }
  return generate::Generator::Create(part_->tp || part_->local ? part_->whole : graph_, params, o);
}

StatusOr<std::unique_ptr<TpGenerator>> Trainer::MakeTpGenerator(int64_t max_batch, int64_t max_len,
                                                                int tp, int gather_blocks) {
  const int world = world_comm_->size();
  if (part_->tp || part_->sliced || part_->stage >= 0 || device_states_ || swapper_)
    return UnimplementedError(config_.source +
                              ": tensor-parallel rollouts (inference_tp_size) from a model that "
                              "trains with data parallelism only, its states on the host");
  if (config_.model.lora.enabled)
    return InvalidArgumentError(config_.source +
                                ": tensor-parallel rollouts (inference_tp_size) of a model with "
                                "model.lora are not written yet; generate with the adapters fused "
                                "on each rank (inference_tp_size 1)");
  if (tp < 1 || world % tp != 0 || gather_blocks < 1)
    return InvalidArgumentError(config_.source + ": inference_tp_size " + std::to_string(tp) +
                                " must divide the " + std::to_string(world) +
                                " ranks (and tp_gather_partition_size be >= 1)");
  auto g = std::unique_ptr<TpGenerator>(new TpGenerator());
  for (int first = 0; first < world; first += tp) {  // every rank makes every group, in order
    std::vector<int> ranks(tp);
    for (int k = 0; k < tp; ++k) ranks[k] = first + k;
    DS_ASSIGN_OR_RETURN(auto c,
                        world_comm_->Split(ranks, "inference_tp." + std::to_string(first / tp)));
    if (c) g->comm_ = std::move(c);
  }
  g->tp_ = tp;
  g->tp_rank_ = world_rank_ % tp;
  g->gather_blocks_ = gather_blocks;
  g->max_batch_ = max_batch;
  // The slices are the tp partition of the generation graph (the forward to the logits, the
  // model's parameters in its order; no training loss to partition).
  DS_ASSIGN_OR_RETURN(planner::DecodeGraphInfo decode, planner::DecodeGraph(graph_, max_len));
  DS_ASSIGN_OR_RETURN(g->local_, parallel::TensorParallelGraph(decode.graph, tp, g->tp_rank_));
  g->params_ = std::make_unique<zero::ParamStore>(g->local_.graph, DType::kF32);
  DS_RETURN_IF_ERROR(SliceForTp(g.get()));
  generate::GeneratorOptions o{max_batch * tp, max_len, tp, g->tp_rank_, g->comm_.get()};
  DS_ASSIGN_OR_RETURN(g->gen_, generate::Generator::Create(graph_, g->params_.get(), o));
  return g;
}

Status Trainer::SliceForTp(TpGenerator* g) {
  const auto& units = plan_->partition().units();
  const auto& slots = params_->slots();
  std::vector<int> unit_of(slots.size(), -1);  // each parameter's partition unit
  for (size_t i = 0; i < slots.size(); ++i)
    for (int u = 0; u < units.size(); ++u)
      if (slots[i].offset >= units[u].offset() &&
          slots[i].offset < units[u].offset() + units[u].count())
        unit_of[i] = u;
  std::vector<float> local(g->params_->total_elements(), 0.0f), whole;
  const auto& local_slots = g->params_->slots();
  for (size_t i = 0; i < slots.size(); ++i)  // the slices' store lists the same parameters
    if (i >= local_slots.size() || local_slots[i].name != slots[i].name)
      return InternalError("tensor-parallel rollouts: parameter " + std::to_string(i) + " \"" +
                           slots[i].name + "\" has no slice of the same name");
  auto slice = [&](size_t i) {
    const Tensor model = params_->ModelView(slots[i]);
    whole.resize(slots[i].numel);
    for (int64_t j = 0; j < slots[i].numel; ++j)
      whole[j] = LoadFloat(model.data(), model.dtype(), j);
    parallel::TakeShard(g->local_.shards[i], whole.data(), local.data() + local_slots[i].offset);
  };
  // Units in order, gather_blocks blocks' worth at a time; persistent (and unpartitioned) ones
  // are resident.
  size_t next = 0;
  while (next < static_cast<size_t>(units.size())) {
    std::vector<int> group;
    std::vector<int> blocks;
    for (; next < static_cast<size_t>(units.size()); ++next) {
      for (int b : units[next].blocks())
        if (std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);
      if (!group.empty() && static_cast<int>(blocks.size()) > g->gather_blocks_) break;
      group.push_back(static_cast<int>(next));
    }
    DS_RETURN_IF_ERROR(runner_->GatherParamUnits(group));  // every rank, the same units
    for (size_t i = 0; i < slots.size(); ++i)
      if (std::find(group.begin(), group.end(), unit_of[i]) != group.end()) slice(i);
    runner_->ReleaseParamUnits(group);
  }
  for (size_t i = 0; i < slots.size(); ++i)
    if (unit_of[i] < 0) slice(i);  // no partition units (below stage 3 there may be none)
  g->params_->SetFromFull(local.data());
  return OkStatus();
}

Status Trainer::ForwardGathered(exec::Executor* ex, int gather_blocks) {
  if (gather_blocks < 1) return InvalidArgumentError("ForwardGathered: gather_blocks must be >= 1");
  runner_->ReleaseGatheredParams();         // whatever an earlier call left gathered
  const int last = ex->graph().num_blocks;  // the head and loss
  for (int b0 = -1; b0 <= last; b0 += gather_blocks) {
    const int b1 = std::min(last, b0 + gather_blocks - 1);
    const std::vector<int> group = UnitsOfBlocks(b0, b1);  // a tied unit in both of its groups
    DS_RETURN_IF_ERROR(runner_->GatherParamUnits(group));  // every rank, the same units
    const Status s = ex->ForwardBlocks(0, b0, b1);
    runner_->ReleaseParamUnits(group);
    DS_RETURN_IF_ERROR(s);
  }
  return OkStatus();
}

std::vector<int> Trainer::UnitsOfBlocks(int first, int last) const {
  const auto& units = plan_->partition().units();
  std::vector<int> out;
  for (int u = 0; u < units.size(); ++u)
    for (int b : units[u].blocks())
      if (b >= first && b <= last) {
        out.push_back(u);
        break;
      }
  return out;
}

}  // namespace ds::worker
