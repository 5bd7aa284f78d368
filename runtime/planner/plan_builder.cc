#include "runtime/planner/plan_builder.h"

#include <string>

#include "parallel/expert/ep_graph.h"
#include "parallel/expert/moe_overlap.h"
#include "parallel/pipeline/pipe_schedule.h"
#include "parallel/pipeline/pipe_stages.h"
#include "parallel/sequence/ulysses_graph.h"
#include "parallel/tensor/checkpoint_plan.h"
#include "parallel/tensor/tp_plan.h"
#include "parallel/tensor/tp_shards.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/proto_dtype.h"
#include "runtime/plan/memory_timeline.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/plan/recompute_plan.h"
#include "runtime/planner/pipe_plan.h"
#include "runtime/planner/rank_cut.h"
#include "zero/plan/zero_builder.h"

namespace ds::planner {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

Status Bad(const std::string& setting, const std::string& what) {
  return InvalidArgumentError("plan: " + setting + " " + what);
}

Status CheckSettings(const plan::Topology& topo, const plan::PlanConfig& c) {
  if (topo.world < 1) return Bad("world size", "must be >= 1, got " + Str(topo.world));
  if (topo.dp * topo.tp * topo.pp != topo.world)
    return Bad("topology", "pp " + Str(topo.pp) + " x dp " + Str(topo.dp) + " x tp " +
                               Str(topo.tp) + " != world size " + Str(topo.world));
  if (topo.ep != c.expert)
    return Bad("topology", "ep " + Str(topo.ep) + " differs from parallel.expert " + Str(c.expert));
  if (topo.sp != c.ulysses)
    return Bad("topology",
               "sp " + Str(topo.sp) + " differs from parallel.ulysses " + Str(c.ulysses));
  if (topo.sp > 1 && (topo.tp > 1 || topo.pp > 1 || topo.ep > 1))
    return UnimplementedError("plan: parallel.ulysses " + Str(topo.sp) +
                              " with parallel.tensor, pipeline or expert above 1: Ulysses runs on "
                              "a data-parallel grid only so far");
  if (topo.sp > 1 && c.states_on_device)
    return UnimplementedError("plan: parallel.ulysses " + Str(topo.sp) +
                              " on a device: its ops have CPU kernels only so far");
  if (topo.sp > 1 && c.seq_len % topo.sp != 0)
    return Bad("parallel.ulysses", Str(topo.sp) + " does not divide seq_len " + Str(c.seq_len) +
                                       " (each rank takes seq_len / " + Str(topo.sp) +
                                       " positions of every sequence)");
  if (topo.ep > 1 && c.states_on_device)
    return UnimplementedError("plan: parallel.expert " + Str(topo.ep) +
                              " on a device: the MoE ops have CPU kernels only so far");
  if (topo.tp != c.tensor || topo.pp != c.pipeline)
    return Bad("topology", "tp " + Str(topo.tp) + " and pp " + Str(topo.pp) +
                               " differ from parallel.tensor " + Str(c.tensor) +
                               " and parallel.pipeline " + Str(c.pipeline));
  if (c.sequence_parallel && topo.tp < 2)
    return Bad("parallel.sequence_parallel",
               "shards the tokens over the tensor-parallel ranks: it needs parallel.tensor > 1");
  if (c.sequence_parallel && c.seq_len % topo.tp != 0)
    return Bad("parallel.sequence_parallel",
               "needs seq_len " + Str(c.seq_len) + " divisible by parallel.tensor " + Str(topo.tp));
  if (topo.tp > 1 && c.states_on_device)
    return UnimplementedError(
        "plan: parallel.tensor " + Str(topo.tp) +
        " with the model states on the device: the tensor-parallel all-reduces run on host "
        "activations (Gloo) only so far; train on the CPU or set parallel.tensor 1");
  DS_RETURN_IF_ERROR(zero::CheckZeroSettings(c));
  if (c.seq_len < 1) return Bad("seq_len", "must be >= 1, got " + Str(c.seq_len));
  if (c.optimizer_states < 0)
    return Bad("optimizer states", "must be >= 0, got " + Str(c.optimizer_states));
  if (!IsFloat(c.model_dtype) || !IsFloat(c.comm_dtype))
    return Bad("precision", "must be fp32, bf16 or fp16 for the model and its communication");
  return OkStatus();
}

// DeepSpeed's batch triad for this dp size, with ResolveBatchSizes' rules and messages.
Status ResolveBatch(const plan::Topology& topo, plan::PlanConfig* c) {
  config::JobConfig job;
  job.source = "plan for world size " + Str(topo.world);
  job.train_batch_size = c->train_batch_size;
  job.train_micro_batch_size_per_gpu = c->micro_batch_size;
  job.gradient_accumulation_steps = c->gradient_accumulation_steps;
  job.elasticity = c->elasticity;
  // Ulysses' ranks share micro-batches: the batch is over dp / sp data ranks (DeepSpeed's rule).
  DS_RETURN_IF_ERROR(config::ResolveBatchSizes(&job, topo.dp / topo.sp));
  c->train_batch_size = job.train_batch_size;
  c->micro_batch_size = job.train_micro_batch_size_per_gpu;
  c->gradient_accumulation_steps = job.gradient_accumulation_steps;
  return OkStatus();
}

void EchoSettings(const plan::PlanConfig& c, const plan::Topology& topo, proto::Plan* plan) {
  plan->set_version(kPlanVersion);
  proto::PlanTopology* t = plan->mutable_topology();
  t->set_world(topo.world);
  t->set_dp(topo.dp);
  t->set_tp(topo.tp);
  t->set_pp(topo.pp);
  t->set_ep(topo.ep);
  t->set_sp(topo.sp);
  proto::PlanSettings* s = plan->mutable_settings();
  s->set_zero_stage(c.stage);
  s->set_model_dtype(ToProtoDType(c.model_dtype));
  s->set_comm_dtype(ToProtoDType(c.comm_dtype));
  s->set_micro_batch_size(c.micro_batch_size);
  s->set_gradient_accumulation_steps(c.gradient_accumulation_steps);
  s->set_train_batch_size(c.train_batch_size);
  s->set_seq_len(c.seq_len);
  s->set_reduce_bucket_size(c.reduce_bucket_size);
  s->set_allgather_bucket_size(c.allgather_bucket_size);
  s->set_overlap_comm(c.overlap_comm);
  s->set_reduce_scatter(c.reduce_scatter);
  s->set_prefetch_bucket_size(c.prefetch_bucket_size);
  s->set_max_live_parameters(c.max_live_parameters);
  s->set_max_reuse_distance(c.max_reuse_distance);
  s->set_param_persistence_threshold(c.param_persistence_threshold);
  s->set_gradient_clipping(c.gradient_clipping);
  s->set_optimizer_states(c.optimizer_states);
  s->set_states_on_device(c.states_on_device);
  s->set_device_collectives(c.states_on_device && c.device_collectives);
  s->set_recompute(RecomputeModeName(c.recompute));
  s->set_partition_activations(c.partition_activations);
  s->set_sequence_parallel(c.sequence_parallel);
  s->set_in_memory_interval(c.in_memory_interval);
  s->set_hpz_partition_size(c.hpz_partition_size);
  const int local = zero::QgzLocalSize(c, topo.dp);
  s->set_qgz_local_size(c.quantized_gradient_bits > 0 && local > 1 && local < topo.dp ? local : 1);
  if (c.quantized_weight_bits > 0) *s->mutable_quantized_weights() = zero::WeightQuantization(c);
  if (c.quantized_gradient_bits > 0)
    *s->mutable_quantized_gradients() = zero::GradientQuantization(c);
  if (c.optimizer_nvme) {
    proto::SwapSettings* w = s->mutable_optimizer_swap();
    w->set_enabled(true);
    w->set_sub_group_size(c.sub_group_size);
    w->set_buffer_count(c.swap_buffer_count);
    w->set_pipeline_read(c.pipeline_read);
    w->set_pipeline_write(c.pipeline_write);
    w->set_params(c.param_nvme);
    if (c.param_nvme) {
      w->set_param_buffer_count(c.param_buffer_count);
      w->set_param_buffer_size(c.param_buffer_size);
    }
  }
}

// A bad stage split or schedule, named before anything is planned.
Status CheckPipeline(const Graph& graph, const plan::Topology& topo, const plan::PlanConfig& c) {
  if (topo.pp == 1 && c.virtual_stages > 1)
    return Bad("pipeline.virtual_stages", Str(c.virtual_stages) + " needs parallel.pipeline > 1");
  if (topo.pp == 1) return OkStatus();
  DS_RETURN_IF_ERROR(parallel::PartitionStages(graph, topo.pp * c.virtual_stages,
                                               c.partition_method, c.micro_batch_size, c.seq_len)
                         .status()
                         .WithPrefix("plan"));
  DS_RETURN_IF_ERROR(parallel::BuildPipelineSchedule(
                         c.pipe_schedule, topo.pp, static_cast<int>(c.gradient_accumulation_steps),
                         c.virtual_stages)
                         .status()
                         .WithPrefix("plan"));
  return OkStatus();
}

}  // namespace

Status CheckFrozenLayout(const Graph& graph, const plan::Topology& topology) {
  if (graph.Frozen().empty() ||
      (topology.tp == 1 && topology.pp == 1 && topology.ep == 1 && topology.sp == 1))
    return OkStatus();
  return InvalidArgumentError(
      "plan: a model with frozen weights (model.lora) trains under data parallelism and ZeRO "
      "0-3; tensor, pipeline, expert and sequence parallelism are not written for it yet "
      "(parallel: tensor " +
      std::to_string(topology.tp) + ", pipeline " + std::to_string(topology.pp) + ", expert " +
      std::to_string(topology.ep) + ", sequence " + std::to_string(topology.sp) + ")");
}

namespace {

// MakePlan without the ranks' cuts: the checks, then the pipeline's stage plans or one plan of
// tp rank 0's graph expanded to the grid.
StatusOr<proto::Plan> PlanModel(const Graph& graph, const plan::Topology& topology,
                                const plan::PlanConfig& config) {
  DS_RETURN_IF_ERROR(CheckFrozenLayout(graph, topology));
  // Sizes the tensor-parallel rules cannot split come first, with the model key that says so.
  for (int r = 0; r < topology.tp && topology.tp > 1; ++r)
    DS_RETURN_IF_ERROR(
        parallel::TensorParallelShards(graph, topology.tp, r).status().WithPrefix("plan"));
  DS_RETURN_IF_ERROR(CheckSettings(topology, config));
  if (parallel::NumExperts(graph) > 0 && config.sequence_parallel)
    return UnimplementedError(
        "plan: parallel.sequence_parallel with a mixture-of-experts model: its MoE layers run "
        "whole on every tp rank and need every token; train it without sequence parallelism");
  DS_RETURN_IF_ERROR(
      plan::ParallelGrid::Create(topology.world, topology.tp, topology.pp, topology.ep, topology.sp)
          .status());
  plan::PlanConfig resolved = config;
  DS_RETURN_IF_ERROR(ResolveBatch(topology, &resolved));
  DS_RETURN_IF_ERROR(CheckPipeline(graph, topology, resolved));
  if (topology.pp > 1) return MakePipelinePlan(graph, topology, resolved);
  // Every tp (and ep) rank's graph has the same structure and shapes: rank 0's is planned.
  auto local = parallel::TensorParallelGraph(graph, topology.tp, 0, config.sequence_parallel);
  if (!local.ok()) return local.status().WithPrefix("plan");
  DS_RETURN_IF_ERROR(
      parallel::ApplyExpertParallel(topology.ep, 0, &*local, topology.tp, 0).WithPrefix("plan"));
  if (!config.moe_overlap) parallel::CloseOverlapWindows(&*local);
  DS_RETURN_IF_ERROR(parallel::ApplyUlysses(topology.sp, 0, &*local).WithPrefix("plan"));
  return PlanLocal(*local, topology, resolved);
}

// How the executors will store the activations (model_facts.h).
plan::ActivationOptions ActivationOptionsOf(const plan::PlanConfig& config) {
  plan::ActivationOptions o;
  if (config.on_device && config.model_dtype != DType::kF32)
    o.storage = plan::ActivationStorage::kDevice16;
  else if (config.host_bf16_activations)
    o.storage = plan::ActivationStorage::kHostBf16;
  o.model_dtype = config.model_dtype;
  o.split_backward = config.pipeline > 1 && config.pipe_schedule == plan::PipeScheduleKind::kZbH1;
  return o;
}

}  // namespace

StatusOr<proto::Plan> MakePlan(const Graph& graph, const plan::Topology& topology,
                               const plan::PlanConfig& config) {
  DS_ASSIGN_OR_RETURN(proto::Plan plan, PlanModel(graph, topology, config));
  DS_RETURN_IF_ERROR(AddRankCuts(topology, config, &plan));
  plan.set_hash(plan::PlanHash(plan));
  return plan;
}

StatusOr<proto::Plan> PlanLocal(const parallel::TpLocalGraph& local, const plan::Topology& topology,
                                const plan::PlanConfig& config) {
  DS_ASSIGN_OR_RETURN(
      plan::ParallelGrid grid,
      plan::ParallelGrid::Create(topology.world, topology.tp, topology.pp, topology.ep, topology.sp,
                                 zero::QgzLocalSize(config, topology.dp)));
  DS_ASSIGN_OR_RETURN(std::vector<RecomputeSegment> recompute,
                      RecomputeSegments(local.graph, config.recompute));
  if (config.partition_activations)
    PartitionCheckpoints(local.graph, local.replicated, topology.tp, &recompute);
  if (config.cpu_checkpointing) OffloadCheckpoints(local.graph, &recompute);
  DS_ASSIGN_OR_RETURN(plan::ModelFacts facts,
                      plan::AnalyzeModel(local.graph, config.micro_batch_size, config.seq_len,
                                         recompute, ActivationOptionsOf(config)));
  proto::Plan plan;
  EchoSettings(config, topology, &plan);
  auto shape = [&local](const char* key) {
    auto it = local.graph.config.find(key);
    return it == local.graph.config.end() ? int64_t{0} : static_cast<int64_t>(it->second);
  };
  DS_RETURN_IF_ERROR(zero::BuildZeroPlan(facts, config, topology.dp, &plan, topology.ep));
  // Ulysses: each rank's loss is its whole sequence's (the chunks' sums meet in seq_ce_loss), so
  // the dp reductions sum the sp ranks' gradients and average over the data ranks only.
  for (proto::RankPlan& rp : *plan.mutable_ranks())
    for (proto::Instruction& in : *rp.mutable_instructions())
      if (in.mean_over() > 0 && in.kind() != proto::Instruction::LOSS_REDUCE)
        in.set_mean_over(in.mean_over() / topology.sp);
  DS_RETURN_IF_ERROR(plan::InsertRecompute(local.graph, recompute, &plan));
  if (!local.collectives.empty())
    DS_RETURN_IF_ERROR(parallel::InsertTpCollectives(local, facts, config.micro_batch_size,
                                                     config.seq_len, &plan));
  DS_RETURN_IF_ERROR(parallel::InsertCheckpointPartition(
      local.graph, recompute, config.micro_batch_size, config.seq_len, &plan));
  DS_RETURN_IF_ERROR(parallel::ExpandToGrid(grid, facts, local, &plan));
  plan.mutable_model()->set_n_layer(static_cast<int>(shape("n_layer")));
  plan.mutable_model()->set_n_embd(shape("n_embd"));
  plan.mutable_model()->set_n_head(static_cast<int>(shape("n_head")));
  for (int rank = 0; rank < topology.world; ++rank) {
    DS_ASSIGN_OR_RETURN(*plan.mutable_ranks(rank)->mutable_memory(), plan::WalkMemory(plan, rank));
  }
  plan.set_hash(plan::PlanHash(plan));
  return plan;
}

}  // namespace ds::planner
