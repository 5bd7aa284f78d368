// Trainer: one rank's training engine. It owns the parameters, the executor, the
// optimizer, the LR schedule, the loss scaler and the data loaders, and runs optimizer
// steps of `gradient_accumulation_steps` micro-batches each:
//
//   for each micro-batch: load batch -> forward -> backward (dL/dloss = scale / gas)
//   global grad norm (overflow check) -> skip, or clip + optimizer step -> zero grads
//
// The step itself is the step planner's instruction stream for this rank (runtime/plan),
// run by a StepRunner: single-rank training is the dp = 1 plan. Not thread-safe.
//
//   DS_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config, std::move(graph)));
//   DS_RETURN_IF_ERROR(trainer->Initialize());
//   while (trainer->step() < total) DS_ASSIGN_OR_RETURN(StepMetrics m, trainer->TrainStep());
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/exec/executor.h"
#include "runtime/graph/graph.h"
#include "zero/param_store.h"

namespace ds {
namespace proto {
class Plan;
}
namespace parallel {
class Communicator;
struct TpLocalGraph;
}  // namespace parallel
namespace ckpt {
struct CheckpointContents;
class CheckpointReader;
}  // namespace ckpt
namespace data {
class BatchSource;
class TrainSource;
}  // namespace data
namespace optim {
class LossScaler;
class LrSchedule;
}  // namespace optim
namespace plan {
struct PlanConfig;
struct Topology;
}  // namespace plan
namespace planner {
struct RankGraph;
}
namespace generate {
class Generator;
}
namespace zero {
class DeviceStates;
class Optimizer;
class OptimizerSwapper;
}  // namespace zero
}  // namespace ds

namespace ds::worker {

class PlanBeacon;

class TpGenerator;

class CommsLogger;
struct CopyHeader;
struct CopySection;
class PipelineCompute;
class TrainBatches;
class StepRunner;
struct OwnedSlice;

struct StepMetrics {
  int64_t step = 0;    // optimizer steps done after this one
  double loss = 0;     // mean over the micro-batches
  double moe_aux = 0;  // MoE: the routers' load-balancing loss, mean over layers (1 = balanced)
  double lr = 0;
  double grad_norm = 0;  // before clipping, unscaled
  double loss_scale = 1;
  bool skipped = false;  // fp16 overflow: no update
  double step_ms = 0;
  double tokens_per_s = 0;
  double tflops = 0;  // achieved model TFLOP/s (forward + backward)
  int64_t peak_rss_bytes = 0;
  // NVMe offload: what the step's swaps moved, the union of their transfers' spans, and how long
  // the step waited for them (the rest of the step is compute and collectives).
  int64_t swap_read_bytes = 0;
  int64_t swap_written_bytes = 0;
  double io_busy_ms = 0;
  double io_wait_ms = 0;
  // Pipeline parallelism: the step's milliseconds in forward and backward compute; the rest of
  // step_ms the rank waited (the schedule's bubble, its links) or reduced and stepped.
  double compute_ms = 0;
};

class Trainer {
 public:
  // `graph` must be validated. Resolves batch sizes for comm's size (data parallelism) and
  // plans the step. `comm` (borrowed; null = one rank) is the data-parallel group.
  // `device` (borrowed; null = the one device.type names) replaces the accelerator with
  // this memory and its kernels: tests run the device.type cuda path on HostMemory.
  // `host_comm` (borrowed): the same ranks for collectives on host memory (norms, the loss,
  // checkpoints) when `comm` works on device buffers (NCCL); null: `comm` does both.
  static StatusOr<std::unique_ptr<Trainer>> Create(const config::JobConfig& config, Graph graph,
                                                   parallel::Communicator* comm = nullptr,
                                                   DeviceMemory* device = nullptr,
                                                   parallel::Communicator* host_comm = nullptr);
  ~Trainer();

  // Initializes weights from the initializers (seeded), or loads the checkpoint that
  // config.checkpoint.load names ("latest" = newest under checkpoint.dir; none yet is fine).
  Status Initialize();
  // A restart from an in-memory copy (RestoreState) instead: only what a copy does not hold is
  // initialized first (LoRA's frozen base weights). Every rank calls it; on error nothing of the
  // copies is used and the caller initializes as usual.
  Status InitializeFromCopy(const StatusOr<std::string>& copy);
  StatusOr<StepMetrics> TrainStep();
  // Where TrainStep's micro-batches come from: `source` (borrowed; the RLHF steps' examples
  // built in memory), or with null the token file data.train names. Without either TrainStep
  // fails, naming data.train. Every rank sets its own (its data-parallel share).
  void SetBatchSource(data::BatchSource* source);
  // The buffer of one of the graph's per-token inputs (kState tensors: PPO's advantages, old
  // log-probabilities, mask), [micro, seq]: the batch source writes it in each Next, before the
  // micro-batch's forward. NotFound naming it when the graph has none.
  StatusOr<Tensor> StateInput(const std::string& name) const;
  // Mean validation loss over `iters` global batches from the start of the validation data
  // (each rank its data-parallel share: gas micro-batches per batch), averaged over the ranks.
  StatusOr<double> Evaluate(int64_t iters);
  // Writes a checkpoint of the current step under config.checkpoint.dir. With data
  // parallelism every rank must call it: under ZeRO every rank writes its own shard file
  // and rank 0 the manifest (collectives); at stage 0 rank 0 writes everything.
  Status SaveCheckpoint();
  // fault_tolerance.in_memory_interval (trainer_memory_copy.cc, Note [In-memory copies]): this
  // rank's model states at the current step as one byte string (into `out`, reused), local; and
  // back from such a copy: every rank calls RestoreState (it votes; a rank without a copy
  // passes its error), and on error no rank changes anything. CopyBytes: a copy's size.
  Status SnapshotState(std::string* out);
  // The same copy written to file descriptor `fd` (the copy directory's file), its CRC-32C
  // into *crc.
  Status SnapshotTo(int fd, uint32_t* crc);
  Status RestoreState(const StatusOr<std::string>& copy);
  // An elastic job that changed size (ZeRO 0-2 over data parallelism): this rank's part cut out
  // of every old rank's copy, `fetch(old_rank)` bringing each in turn; voted as RestoreState.
  using CopyFetch = std::function<StatusOr<std::string>(int old_rank)>;
  Status RestoreResharded(int old_world, const CopyFetch& fetch);
  int64_t CopyBytes() const;
  // Loads a checkpoint directory (or a root with a `latest` pointer), saved at any world
  // size and stage; every rank must call it (it votes on the result). On error nothing of
  // the checkpoint is used: weights and optimizer state are untouched on every rank.
  Status LoadCheckpoint(const std::string& path);
  // Loads weights only (fresh optimizer, step 0) from a safetensors file with the graph's
  // parameter names, e.g. one written by `ds-ckpt import` from Hugging Face.
  // keep_missing: parameters the file lacks keep their initialization (a model with a new head,
  // e.g. a reward model from an SFT model's weights); fp32 at ZeRO 0-2 without tp / ep.
  Status LoadWeights(const std::string& safetensors_path, bool keep_missing = false);

  // Writes the fp32 (master) weights as safetensors with the graph's parameter names.
  // Under ZeRO over ranks (fp32, on the host) every rank must call it; rank 0 writes.
  // With model.lora: the base model's weights with the adapters merged in (ExportMerged).
  Status ExportWeights(const std::string& path);
  // model.lora (trainer_lora.cc): the adapters as PEFT saves them, into directory `dir`
  // (adapter_model.safetensors, adapter_config.json); and the merged weights. Every rank calls
  // them (the adapters are gathered from the ZeRO partition); rank 0 writes.
  Status ExportAdapter(const std::string& dir);
  Status ExportMerged(const std::string& path);
  // The frozen base weights (LoRA), or null.
  const zero::ParamStore* frozen() const { return frozen_.get(); }
  // An executor without gradients over the same parameters, for evaluation and generation,
  // on the host (callers read its activations) whatever device.type trains on.
  // ZeRO-3: gathers every parameter first (a collective) and keeps them gathered. With the
  // model states on a device it downloads them into the host copies now; a later checkpoint
  // hands those back (make a new executor after one). The graph's per-token inputs (PPO's
  // heads) are bound to zeroed buffers (their losses count nothing; read the logits or values).
  StatusOr<std::unique_ptr<exec::Executor>> MakeInferenceExecutor(int64_t batch, int64_t seq);
  // Vectors in this rank's master layout (fp32 per owned parameter element, as optimizer states:
  // the RLHF actor's moving average) as the whole flat fp32 parameters, on every rank (a sum
  // over the data-parallel group; every rank calls it), and back (local). Unimplemented under
  // tensor, expert or pipeline parallelism and with device or NVMe model states.
  StatusOr<std::vector<float>> MasterLayoutToFull(const std::vector<float>& values);
  std::vector<float> FullToMasterLayout(const std::vector<float>& full) const;
  // Whole flat fp32 parameters as safetensors with the graph's names (rank 0 writes; every rank
  // calls it and returns rank 0's outcome), and read back from such a file.
  Status WriteFullWeights(const std::vector<float>& full, const std::string& path);
  StatusOr<std::vector<float>> ReadFullWeights(const std::string& path) const;
  // The hybrid engine's switch (RLHF rollouts): GatherParams makes every parameter whole in the
  // host store that inference executors and generators read (ZeRO-3: one all-gather of every
  // unit; every rank must call it, once, before any of them generates), ReleaseParams returns
  // to the training layout (only the persistent units stay). Training steps gather what they
  // use themselves; a generator made earlier reads the store again after the next gather.
  Status GatherParams();
  void ReleaseParams();
  // A Generator (runtime/generate/generator.h: KV cache, left-padded batches, sampling) over the
  // same parameters, prepared as MakeInferenceExecutor prepares them; max_len 0: max_seq_len.
  // gather_blocks > 0 at ZeRO-3 (DeepSpeed's pin_parameters false): nothing is gathered now;
  // every forward of the generator gathers the units gather_blocks blocks at a time and releases
  // them, and every rank decodes until no rank has a live sequence (every rank calls Generate
  // as often).
  StatusOr<std::unique_ptr<generate::Generator>> MakeGenerator(int64_t max_batch, int64_t max_len,
                                                               int gather_blocks = 0);
  // The hybrid engine's tensor-parallel rollouts (DeepSpeed's inference_tp_size,
  // tp_generator.h): this rank's group of `tp` consecutive ranks, its slice of the weights cut
  // `gather_blocks` blocks at a time, and a Generator over it for max_batch prompts per rank.
  // Every rank calls it; data parallelism only (no parallel.tensor, pipeline or expert), tp
  // dividing the world and the model's heads as tensor parallelism needs.
  StatusOr<std::unique_ptr<TpGenerator>> MakeTpGenerator(int64_t max_batch, int64_t max_len, int tp,
                                                         int gather_blocks);
  // Cuts `g`'s slices again from the current weights (after training steps): under ZeRO-3 the
  // partition units of gather_blocks blocks at a time are all-gathered, sliced and released.
  // Every rank calls it.
  Status SliceForTp(TpGenerator* g);
  // A forward of inference executor `ex` (MakeInferenceExecutor's, its inputs set) with the
  // ZeRO-3 partition units gathered `gather_blocks` blocks at a time and released after their
  // blocks ran, as training's forward gathers them: no rank holds the whole model (RLHF's scoring
  // forwards). Leaves the parameters in the training layout. Every rank calls it.
  Status ForwardGathered(exec::Executor* ex, int gather_blocks);
  // With DS_MEMORY_PROFILE=1 in the environment: the step runner's peak resident bytes of
  // the model states beside the plan's (StepRunner::MemoryReport), then the executors'
  // activations (with the micro-batch's tokens) and activation gradients beside the plan's.
  std::string MemoryReport() const;
  // Where the rank is in its plan, for the coordinator's hang diagnosis (plan_beacon.h).
  PlanBeacon& beacon();
  // With DS_PROFILE_OPS=1 or wall_clock_breakdown: milliseconds per step-plan instruction kind
  // over all steps run (StepRunner).
  const std::map<std::string, double>& InstructionProfile() const;

  int64_t step() const { return step_; }
  int world_rank() const { return world_rank_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t tokens_per_step() const;
  const config::JobConfig& config() const { return config_; }
  const proto::Plan& plan() const { return *plan_; }
  const Graph& graph() const { return graph_; }
  zero::ParamStore& params() { return *params_; }
  exec::Executor& executor() { return *executor_; }
  // The flops profiler: time every node of this rank's executors (on) or stop (off).
  void SetNodeTiming(bool on);
  // comms_logger: what the step plan's collectives did (null when the block is off).
  const CommsLogger* comms_logger() const { return comms_.get(); }
  // The model states on the device (the plan's states_on_device), or null.
  const zero::DeviceStates* device_states() const { return device_states_.get(); }

 private:
  Trainer(const config::JobConfig& config, Graph graph, parallel::Communicator* comm,
          DeviceMemory* device, parallel::Communicator* host_comm);
  // Build's parts, in order: the communicators, the run's shape, the model states, the executor,
  // the step runner.
  Status Build();
  void AdoptComms();
  Status ResolveRun(const plan::Topology& topology);
  Status BuildModelStates(const plan::Topology& topology, const plan::PlanConfig& config,
                          DType model_dtype);
  // LoRA's frozen base weights (trainer_lora.cc): their store, where the layout allows them;
  // their part of a checkpoint (save; verify or read on load); PEFT's adapter config; the whole
  // fp32 master on every rank (the adapters are small).
  Status BuildFrozen();
  void AddFrozen(ckpt::CheckpointContents* c) const;
  Status VisitFrozen(ckpt::CheckpointReader* reader, bool commit);
  std::string AdapterConfigJson() const;
  StatusOr<std::vector<float>> FullMaster();
  // Rank 0 runs `write` (a file at `path`); every rank returns its outcome (a collective).
  Status RankZeroWrites(const std::string& path, const std::function<Status()>& write);
  // The hybrid engine's fuse (trainer_lora.cc): the base model's graph and a store of its weights
  // with the adapters folded in, rebuilt from the fp32 weights at each call (no add-then-subtract
  // drift); generators over it read it again after each GatherParams. Every rank calls it.
  Status FuseAdapters();
  // ExportMerged's weights: the frozen and trained base weights with the adapters folded in.
  std::map<std::string, std::pair<Shape, std::vector<float>>> MergedWeights(
      const std::vector<float>& full) const;
  Status BuildExecutor(const plan::Topology& topology, const plan::PlanConfig& config,
                       exec::ExecutorOptions* options);
  Status BuildDeviceStates(exec::ExecutorOptions* options);
  Status BuildRunner(const exec::ExecutorOptions& options);
  void LogModel(DType model_dtype) const;
  Status BuildPlan();
  // This rank's part of the model as the plan cut it (trainer_cut.cc): part_, graph_ its graph,
  // its parameters' slicer when they are boxes of the whole ones.
  Status CutGraph(const plan::PlanConfig& config);
  // Pipeline parallelism (trainer_pipe.cc): one executor per activation slot under a
  // PipelineCompute; nothing without a pipeline.
  Status BuildPipelineCompute(const exec::ExecutorOptions& options);
  Status OpenTrainData(int64_t micro);  // data.train's, .path's or .sft's: the default source
  // Packed documents' masks into TrainBatches (data.reset_*, eod_mask_loss).
  Status BindDocumentMasks(int64_t micro);
  StatusOr<std::unique_ptr<data::TrainSource>> OpenSft(const std::string& prompt,
                                                       const std::string& answer, int64_t micro,
                                                       bool shuffle, int dp_rank,
                                                       int dp_size) const;  // data.sft's
  // This rank's data-parallel share of the data: {dp rank, dp size}.
  std::pair<int, int> DataShare() const;
  // Each rank reads its share of `iters` global batches: data.validation's, data.path's split
  // 1, or data.sft's validation pair.
  StatusOr<std::unique_ptr<data::TrainSource>> OpenValidationData(int64_t micro,
                                                                  int64_t iters) const;
  Status MakeCopyHeader(CopyHeader* h);  // trainer_memory_copy.cc
  // Both restores' end (trainer_memory_copy.cc): the vote, then the sections `from` into `mine`.
  Status ApplyCopy(Status verified, const CopyHeader& h, const std::vector<CopySection>& mine,
                   const std::vector<const char*>& from, const std::string& peer_error);
  Status ExportGathered(const std::string& path);             // ExportWeights under ZeRO over ranks
  Status CheckWholeFlat(const char* what) const;              // trainer_master_values.cc
  std::vector<int> UnitsOfBlocks(int first, int last) const;  // the partition units they read
  Status BindStateInputs(const Graph& g, int64_t micro, exec::ExecutorOptions* eo);
  // Validation under a pipeline: each micro-batch's forward through the virtual stages in
  // order, the boundary activations over the links, the mean of the last stage's losses.
  StatusOr<double> EvaluatePipeline(int64_t iters);
  // The recompute segments the executors of `chunk` run (the plan's, by the same rule on the same
  // graph: runtime/graph/recompute.h; without a pipeline, graph_'s), partition_activations'
  // slices among them (this rank's of the tp group); returns how many inputs are split.
  StatusOr<int> SetRecompute(int chunk, exec::ExecutorOptions* options);
  // partition_activations: says on rank 0 when the job has no checkpoint to split, and why.
  void ReportPartitionedActivations(const plan::Topology& topology, int split);
  Status CreateGroups();
  // A whole forward outside the step plan (evaluation): with tensor parallelism (`local`: the
  // graph the executor runs, with its cuts), the node ranges between the cuts and the
  // collectives at them, over the tp group.
  Status ForwardWhole(exec::Executor* executor, const parallel::TpLocalGraph* local);
  void SliceParameters(const parallel::TpLocalGraph* local);
  // offload_optimizer nvme: the swapper of the plan's optimizer swaps, and the move of the
  // states initialization or a load left in memory into its file.
  Status BuildSwapper();
  Status StoreSwappedStates();
  // Sets the parameters from `source` (ParamStore::Fill), one at a time; with NVMe offload each
  // finished sub-group goes to the swap files meanwhile (trainer_swap.cc).
  // `kept_only`: the source reads only the ranges this rank keeps (stage 3, ParamStore::Fill).
  Status InitializeStreaming(const zero::ParamStore::ParamSource& source, bool kept_only = false);
  // model.hf: the source reading each parameter from the folder (trainer_hf.cc), or the
  // random draw of the rest (the reward head DeepSpeed-Chat adds).
  Status InitializeFromHf();
  // InitializeFromHf's line: values read and drawn, time, peak RSS beside the plan.
  void ReportHfLoad(const std::string& dir, int files, int64_t read, int64_t drawn,
                    double seconds) const;
  Status InitializeWeights();  // Initialize without a checkpoint: the folder's, or drawn
  // model.lora.adapter (trainer_lora.cc): the adapters from a PEFT adapter folder whose r, alpha
  // and rsLoRA agree with the job's.
  Status LoadAdapter(const std::string& dir);
  void ReportSwaps(StepMetrics* m);  // trainer_swap.cc
  // Before a checkpoint: the NVMe states read back into memory, or an error when they would not
  // fit what the system has available.
  Status StageSwappedStates();
  // trainer_checkpoint.cc: whole tensors from rank 0, or one shard file per rank (ZeRO).
  Status SaveConsolidated(const ckpt::CheckpointContents& base);
  Status SaveSharded(const ckpt::CheckpointContents& base);
  // trainer_whole.cc: every world rank's slices of the whole parameters for a sharded save;
  // expert parallelism: the whole model gathered over the ep group (generation).
  StatusOr<std::vector<std::vector<OwnedSlice>>> SliceLists(
      const std::vector<std::string>& states) const;
  StatusOr<zero::ParamStore*> GatherWholeModel();

  config::JobConfig config_;
  // This rank's part of the model as the plan cut it (runtime/planner/rank_cut.h): the whole
  // model, the tensor-parallel or expert / Ulysses cut, a pipeline rank's stage and chunks.
  std::unique_ptr<planner::RankGraph> part_;
  Graph graph_;  // the graph this rank runs: the whole model until the cut, then part_.graph
  std::vector<std::unique_ptr<exec::Executor>> pipe_eval_;       // per chunk, for validation
  std::vector<std::unique_ptr<exec::Executor>> slot_executors_;  // slots 1.. (0: executor_)
  std::unique_ptr<PipelineCompute> pipe_compute_;
  std::unique_ptr<zero::InitSlicer> init_slicer_;
  std::vector<std::unique_ptr<parallel::Communicator>> groups_;  // the plan's, this rank's
  std::map<std::string, parallel::Communicator*> group_by_name_;
  parallel::Communicator* tp_comm_ = nullptr;
  parallel::Communicator* ep_comm_ = nullptr;
  parallel::Communicator* sp_comm_ = nullptr;
  // Expert parallelism: the whole model for generation, gathered over the ep group.
  std::unique_ptr<zero::ParamStore> whole_params_;
  parallel::Communicator* world_comm_ = nullptr;  // every rank (comm_: the data-parallel group)
  parallel::Communicator* world_host_comm_ = nullptr;  // the same on host memory (checkpoints)
  int world_rank_ = 0;
  // device.type cuda: the GPU the executors run on (outlives them: declared first), or
  // the memory Create was given.
  std::unique_ptr<DeviceMemory> own_device_memory_;
  DeviceMemory* device_memory_ = nullptr;
  std::unique_ptr<zero::ParamStore> params_;
  // The graph's frozen weights (LoRA's base model), fp32, whole on every rank; null without.
  std::unique_ptr<zero::ParamStore> frozen_;
  // model.lora's generation: the base graph and its weights with the adapters fused (FuseAdapters).
  Graph fused_graph_;
  std::unique_ptr<zero::ParamStore> fused_;
  std::unique_ptr<exec::Executor> executor_;
  std::unique_ptr<exec::Executor> eval_executor_;
  std::unique_ptr<CommsLogger> comms_;  // comms_logger
  std::unique_ptr<zero::Optimizer> optimizer_;
  // The plan's states_on_device: the model states on device_memory_ (optimizer there too).
  std::unique_ptr<zero::DeviceStates> device_states_;
  std::unique_ptr<zero::OptimizerSwapper> swapper_;  // offload_optimizer nvme
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<data::TrainSource> train_data_;           // data.train's, .path's or .sft's
  std::unique_ptr<TrainBatches> batches_;                   // what the step runner reads
  std::map<std::string, std::vector<float>> state_inputs_;  // the per-token inputs' buffers
  std::map<std::string, Tensor> state_views_;               // and their views
  std::list<std::vector<float>> inference_state_;           // inference executors' zeroed ones
  std::unique_ptr<data::TrainSource> val_data_;
  std::unique_ptr<parallel::Communicator> own_comm_;  // dp = 1 without a given communicator
  parallel::Communicator* comm_ = nullptr;
  parallel::Communicator* host_comm_ = nullptr;  // host-memory collectives: the given one, or comm_
  std::unique_ptr<proto::Plan> plan_;
  std::unique_ptr<StepRunner> runner_;
  int64_t step_ = 0;
  int64_t total_steps_ = 0;
  int64_t seq_ = 0;
  double micro_flops_ = 0;  // forward + backward of one micro-batch (a pipeline: every chunk)
};

// MemAvailable of this machine (bytes), 0 when /proc/meminfo cannot be read.
int64_t AvailableMemoryBytes();

// True when `root` holds a `latest` checkpoint pointer.
bool HasLatestCheckpoint(const std::string& root);

// Peak resident set size of this process (VmHWM), in bytes; 0 if unknown.
int64_t PeakRssBytes();

// One int32 flag per rank of `comm`, max-reduced: true when any rank set it (a collective
// vote: every rank calls it).
StatusOr<bool> AnyRank(parallel::Communicator* comm, bool flag);

}  // namespace ds::worker
