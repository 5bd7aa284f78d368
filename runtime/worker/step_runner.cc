#include "runtime/worker/step_runner.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/exec/executor.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/worker/aux_losses.h"
#include "zero/grad_norm.h"
#include "zero/optimizer.h"
#include "zero/optimizer_swapper.h"
#include "zero/zero_collectives.h"

namespace ds::worker {
namespace {

using proto::Instruction;

uint64_t MicroSeed(uint64_t seed, int64_t step, int64_t micro) {
  return seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step) * 1000003ull +
         static_cast<uint64_t>(micro);
}

// The real compute: the executor over the data loader's micro-batches.
class ExecutorCompute final : public StepCompute {
 public:
  ExecutorCompute(exec::Executor* e, data::BatchSource* d) : e_(e), d_(d), aux_(e->graph()) {}
  Status LoadMicrobatch(const Instruction&) override { return d_->Next(e_->ids(), e_->targets()); }
  Status Forward(uint64_t seed, const Instruction& in) override {
    DS_RETURN_IF_ERROR(e_->ForwardNodes(seed, in.node_begin(), in.node_end()));
    if (in.computes_loss() && !aux_.empty()) {
      aux_.Clear();
      aux_.Add(*e_);
    }
    return OkStatus();
  }
  float loss() const override { return e_->loss() + aux_.loss_correction(); }
  double aux_sum() const override { return aux_.sum(); }
  int aux_count() const override { return aux_.count(); }
  Status Backward(float loss_grad, uint64_t seed, const Instruction& in) override {
    return e_->BackwardNodes(loss_grad, seed, in.node_begin(), in.node_end());
  }
  Status FinishGradients() override { return e_->FinishGradients(); }
  StatusOr<float*> TensorData(const Instruction&, int tensor, bool grad, int64_t count) override {
    const Tensor t = e_->TensorData(tensor, grad);
    if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != count)
      return InvalidArgumentError("the plan all-reduces " + std::to_string(count) +
                                  " fp32 values of tensor " + std::to_string(tensor) +
                                  (grad ? "'s gradient" : "") +
                                  ", which the executor does not hold as such");
    return t.f32();
  }
  StatusOr<float*> CheckpointSlice(const Instruction&, int tensor, int64_t count) override {
    return CheckpointSliceOf(e_, tensor, count);
  }
  Status StashCheckpoint(const Instruction&, int tensor) override {
    return e_->StashCheckpoint(tensor);
  }
  Status RestoreCheckpoint(const Instruction&, int tensor) override {
    return e_->RestoreCheckpoint(tensor);
  }

 private:
  exec::Executor* e_;
  data::BatchSource* d_;
  AuxLosses aux_;  // the routers' aux losses, of the last forward that computed the loss
};

}  // namespace

StatusOr<float*> StepCompute::TensorData(const Instruction&, int, bool, int64_t) {
  return UnimplementedError("this compute holds no tensors for a tensor-parallel all-reduce");
}
StatusOr<float*> CheckpointSliceOf(exec::Executor* e, int tensor, int64_t count) {
  const Tensor t = e->CheckpointSlice(tensor);
  if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != count)
    return InvalidArgumentError("the plan all-gathers " + std::to_string(count) +
                                "-element fp32 slices of checkpoint " + std::to_string(tensor) +
                                ", which the executor does not keep as such");
  return t.f32();
}

StatusOr<float*> StepCompute::CheckpointSlice(const Instruction&, int, int64_t) {
  return UnimplementedError("this compute keeps no partitioned checkpoints");
}
Status StepCompute::RestoreCheckpoint(const Instruction&, int) {
  return UnimplementedError("this compute keeps no checkpoints in host memory");
}
Status StepCompute::StashCheckpoint(const Instruction&, int) {
  return UnimplementedError("this compute keeps no partitioned checkpoints");
}
Status StepCompute::BackwardInput(float, uint64_t, const Instruction&) {
  return UnimplementedError("this compute runs no split backward (zero-bubble schedules)");
}
Status StepCompute::BackwardWeight(uint64_t, const Instruction&) {
  return UnimplementedError("this compute runs no split backward (zero-bubble schedules)");
}

struct StepRunner::Impl {
  using Handler = Status (Impl::*)(int index, const Instruction& in);
  struct Entry {
    Handler run = nullptr;
    bool lands_grads = false;  // gradients still on their way from a device land first
  };

  const proto::Plan* plan = nullptr;
  int rank = 0;
  StepParts p;
  std::unique_ptr<StepCompute> own_compute;
  StepCompute* compute = nullptr;
  const proto::RankPlan* mine = nullptr;
  std::unique_ptr<zero::ZeroCollectives> zero;
  std::array<Entry, Instruction::Kind_ARRAYSIZE> table{};

  // Per step.
  int64_t step = 0;
  int micro = 0;
  double loss_sum = 0;
  double aux_sum = 0;  // the MoE layers' aux losses over the micro-batches
  int aux_count = 0;
  int losses = 0;  // forwards that computed the loss (or a pipeline stage's part of it)
  double norm_sq = 0;
  bool overflow = false;
  StepResult result;

  Status Load(int, const Instruction& in);
  Status Forward(int, const Instruction& in);
  Status Backward(int, const Instruction& in);
  Status Collective(int index, const Instruction& in);
  Status GatherUpdated(int index, const Instruction& in);
  Status Release(int, const Instruction& in);
  Status GradNorm(int, const Instruction& in);
  Status Overflow(int, const Instruction& in);
  Status OptimizerStep(int, const Instruction& in);
  Status Swap(int index, const Instruction& in);
  Status ZeroGrads(int, const Instruction& in);
  Status Loss(int, const Instruction& in);
  Status ActAllReduce(int, const Instruction& in);
  Status ActGatherScatter(int, const Instruction& in);
  Status ActAllToAll(int, const Instruction& in);
  Status TpGrads(int, const Instruction& in);
  Status TiedGrads(int, const Instruction& in);
  Status PointToPoint(int index, const Instruction& in);
  Status Stash(int, const Instruction& in);
  Status Restore(int, const Instruction& in);
  StatusOr<parallel::Communicator*> Group(const Instruction& in);
  int GroupSize(const Instruction& in) {  // the ranks of the instruction's collective
    auto it = p.groups.find(in.collective().group());
    return it != p.groups.end() ? it->second->size() : p.comm ? p.comm->size() : 1;
  }
  void Fill();
  Status RunOne(int index, const Instruction& in);

  // Memory profile (parts.memory_profile): peak resident bytes of the model states.
  void SampleMemory();
  std::vector<std::pair<int64_t, int64_t>> persistent_ranges;  // stage 3: flat (offset, count)
  std::map<std::string, size_t> peak_by_role;
  size_t peak_model_states = 0;

  bool profiling = false;  // DS_PROFILE_OPS=1: milliseconds per instruction kind
  std::map<std::string, double> profile;
};

void StepRunner::Impl::Fill() {
  table[Instruction::LOAD_MICROBATCH] = {&Impl::Load, false};
  table[Instruction::FORWARD] = {&Impl::Forward, false};
  table[Instruction::BACKWARD] = {&Impl::Backward, false};
  table[Instruction::BACKWARD_INPUT] = {&Impl::Backward, false};
  table[Instruction::BACKWARD_WEIGHT] = {&Impl::Backward, false};
  table[Instruction::ALL_REDUCE] = {&Impl::Collective, true};
  table[Instruction::REDUCE_SCATTER] = {&Impl::Collective, true};
  table[Instruction::GATHER_PARAMS] = {&Impl::Collective, true};
  table[Instruction::ALL_GATHER] = {&Impl::GatherUpdated, true};
  table[Instruction::RELEASE_PARAMS] = {&Impl::Release, true};
  table[Instruction::GRAD_NORM_REDUCE] = {&Impl::GradNorm, true};
  table[Instruction::OVERFLOW_REDUCE] = {&Impl::Overflow, true};
  table[Instruction::OPTIMIZER_STEP] = {&Impl::OptimizerStep, true};
  table[Instruction::ZERO_GRADS] = {&Impl::ZeroGrads, true};
  table[Instruction::LOSS_REDUCE] = {&Impl::Loss, true};
  table[Instruction::SWAP_IN] = {&Impl::Swap, false};
  table[Instruction::SWAP_OUT] = {&Impl::Swap, false};
  table[Instruction::ACT_ALL_REDUCE] = {&Impl::ActAllReduce, false};
  table[Instruction::RECOMPUTE] = {&Impl::Forward, false};
  table[Instruction::ACT_ALL_GATHER] = {&Impl::ActGatherScatter, false};
  table[Instruction::ACT_REDUCE_SCATTER] = {&Impl::ActGatherScatter, false};
  table[Instruction::ACT_ALL_TO_ALL] = {&Impl::ActAllToAll, false};
  table[Instruction::TP_GRAD_ALL_REDUCE] = {&Impl::TpGrads, true};
  table[Instruction::TIED_GRAD_ALL_REDUCE] = {&Impl::TiedGrads, true};
  table[Instruction::SEND] = {&Impl::PointToPoint, false};
  table[Instruction::RECV] = {&Impl::PointToPoint, false};
  table[Instruction::CHECKPOINT_STASH] = {&Impl::Stash, false};
  table[Instruction::CHECKPOINT_RESTORE] = {&Impl::Restore, false};
}

Status StepRunner::Impl::Load(int, const Instruction& in) {
  micro = in.micro_batch();
  return compute->LoadMicrobatch(in);
}

// The micro-batch's own dropout seed: a pipeline runs a forward or backward of one micro-batch
// after loading later ones.
Status StepRunner::Impl::Forward(int, const Instruction& in) {
  if (in.micro_batch() >= 0) micro = in.micro_batch();
  DS_RETURN_IF_ERROR(compute->Forward(MicroSeed(p.seed, step, micro), in));
  if (in.computes_loss()) {
    loss_sum += compute->loss();
    aux_sum += compute->aux_sum();
    aux_count += compute->aux_count();
    ++losses;
  }
  return OkStatus();
}

Status StepRunner::Impl::Backward(int, const Instruction& in) {
  if (in.micro_batch() >= 0) micro = in.micro_batch();
  const float loss_grad = static_cast<float>(p.scaler->scale() / in.mean_over());
  const uint64_t seed = MicroSeed(p.seed, step, micro);
  if (in.kind() == Instruction::BACKWARD_INPUT) return compute->BackwardInput(loss_grad, seed, in);
  if (in.kind() == Instruction::BACKWARD_WEIGHT) return compute->BackwardWeight(seed, in);
  return compute->Backward(loss_grad, seed, in);
}

// The communicator of the group a tensor-parallel instruction names.
StatusOr<parallel::Communicator*> StepRunner::Impl::Group(const Instruction& in) {
  auto it = p.groups.find(in.collective().group());
  if (it == p.groups.end())
    return FailedPreconditionError("the plan runs " + Instruction::Kind_Name(in.kind()) +
                                   " over group \"" + in.collective().group() +
                                   "\", which this rank was given no communicator for");
  return it->second;
}

// Tensor parallelism: an activation (forward) or its gradient (backward) summed, or maxed, over
// the tp group in place, between two node ranges.
Status StepRunner::Impl::ActAllReduce(int, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  DS_ASSIGN_OR_RETURN(float* data, compute->TensorData(in, in.activation().tensor(),
                                                       in.activation().grad(), c.count()));
  return comm->AllReduce(parallel::BufferView(data, c.count()),
                         c.reduce_max() ? parallel::ReduceOp::kMax : parallel::ReduceOp::kSum);
}

// Sequence parallelism: token chunks gathered into the whole tensor, or the whole partial sums
// reduce-scattered into chunks (values forward, gradients backward), source to destination.
Status StepRunner::Impl::ActGatherScatter(int, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  const bool gather = in.kind() == Instruction::ACT_ALL_GATHER;
  const int64_t chunk = c.count() / comm->size();
  const proto::ActivationRef& a = in.activation();
  DS_ASSIGN_OR_RETURN(float* src,
                      compute->TensorData(in, a.tensor(), a.grad(), gather ? chunk : c.count()));
  DS_ASSIGN_OR_RETURN(
      float* dst, compute->TensorData(in, a.out_tensor(), a.grad(), gather ? c.count() : chunk));
  if (gather)
    return comm->AllGather(parallel::BufferView(src, chunk), parallel::BufferView(dst, c.count()));
  return comm->ReduceScatter(parallel::BufferView(src, c.count()), parallel::BufferView(dst, chunk),
                             parallel::ReduceOp::kSum);
}

// Expert parallelism and Ulysses: a buffer's packed blocks (MoE: the step's capacity rows of
// each, which the plan's capacity tensor holds) exchanged over the group, source to destination;
// an async one (an overlap window) is completed by the instruction that wait_for-names it.
Status StepRunner::Impl::ActAllToAll(int index, const Instruction& in) {
  const proto::Collective& c = in.collective();
  const proto::ActivationRef& a = in.activation();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  int64_t count = c.count();
  if (a.capacity_tensor() >= 0) {
    DS_ASSIGN_OR_RETURN(const float* cap, compute->TensorData(in, a.capacity_tensor(), false, 1));
    const int64_t rows = static_cast<int64_t>(*cap);
    if (rows < 0 || rows > a.block_rows())
      return InternalError("the all-to-all of \"" + a.name() + "\" got capacity " +
                           std::to_string(rows) + " for " + std::to_string(a.block_rows()) +
                           " rows per block");
    count = c.count() / (a.block_rows() * a.row_elements()) * rows * a.row_elements();
  }
  DS_ASSIGN_OR_RETURN(float* src, compute->TensorData(in, a.tensor(), a.grad(), c.count()));
  DS_ASSIGN_OR_RETURN(float* dst, compute->TensorData(in, a.out_tensor(), a.grad(), c.count()));
  const parallel::BufferView from(src, count), to(dst, count);
  if (!in.async()) return comm->AllToAll(from, to);  // on this thread, no hand-over
  zero::CollectiveJob job;
  job.handle = comm->AllToAllAsync(from, to);
  return zero->Track(index, true, std::move(job));
}

// Sequence parallelism: the gradients of parameters used on token chunks, summed over tp.
Status StepRunner::Impl::TpGrads(int, const Instruction& in) {
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  return zero->ReduceGrads(in, comm);
}

// A pipeline's tied parameters, summed over the first and last stage.
Status StepRunner::Impl::TiedGrads(int, const Instruction& in) {
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  return zero->ReduceTied(in, comm);
}

// Pipeline parallelism: an activation or gradient of the instruction's chunk and slot to or
// from the neighbouring stage over its link group (two ranks: the peer is the other one), on
// the link's thread; the instruction that wait_for-names it completes it.
Status StepRunner::Impl::PointToPoint(int index, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  if (comm->size() != 2)
    return FailedPreconditionError("the plan runs " + Instruction::Kind_Name(in.kind()) +
                                   " over group \"" + c.group() + "\" of " +
                                   std::to_string(comm->size()) + " ranks; a link has 2");
  DS_ASSIGN_OR_RETURN(float* data, compute->TensorData(in, in.activation().tensor(),
                                                       in.activation().grad(), c.count()));
  const parallel::BufferView view(data, c.count());
  const int peer = 1 - comm->rank();
  zero::CollectiveJob job;
  job.handle = in.kind() == Instruction::SEND ? comm->SendAsync(view, peer, 0)
                                              : comm->RecvAsync(view, peer, 0);
  return zero->Track(index, in.async(), std::move(job));
}

// partition_activations: this rank's slice of a checkpoint kept aside after forward, and the
// tp group's slices gathered back into the whole tensor before its segment's recompute
// (cpu_checkpointing: the whole tensor kept in host memory, copied back).
Status StepRunner::Impl::Stash(int, const Instruction& in) {
  return compute->StashCheckpoint(in, in.activation().tensor());
}

Status StepRunner::Impl::Restore(int, const Instruction& in) {
  const proto::Collective& c = in.collective();
  if (c.placement() == proto::LOCAL)  // cpu_checkpointing: one part, in host memory
    return compute->RestoreCheckpoint(in, in.activation().tensor());
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  const int64_t slice = c.count() / comm->size();
  DS_ASSIGN_OR_RETURN(float* src, compute->CheckpointSlice(in, in.activation().tensor(), slice));
  DS_ASSIGN_OR_RETURN(float* dst,
                      compute->TensorData(in, in.activation().tensor(), false, c.count()));
  return comm->AllGather(parallel::BufferView(src, slice), parallel::BufferView(dst, c.count()));
}

Status StepRunner::Impl::Collective(int index, const Instruction& in) {
  return zero->Issue(index, in);
}

// After a skipped step (fp16 overflow, agreed by every rank) the parameters did not change.
Status StepRunner::Impl::GatherUpdated(int index, const Instruction& in) {
  return overflow ? OkStatus() : zero->Issue(index, in);
}

Status StepRunner::Impl::Release(int, const Instruction& in) {
  for (zero::StateView* v : zero->ViewsFor(in))
    for (const proto::ParamRange& r : in.ranges())
      DS_RETURN_IF_ERROR(v->ReleaseParams(r.offset(), r.count()));
  return OkStatus();
}

// Squared norm of the reduced gradients over the ranges the plan gives this rank (each element
// counted on exactly one rank), summed over the group.
Status StepRunner::Impl::GradNorm(int, const Instruction& in) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const proto::ParamRange& r : in.ranges()) ranges.push_back({r.offset(), r.count()});
  DS_ASSIGN_OR_RETURN(double sum, zero->ViewsFor(in).back()->SquaredSum(ranges, in.in_shard()));
  DS_RETURN_IF_ERROR(zero->AllReduceSumExact(in, &sum));
  norm_sq = static_cast<float>(sum);
  result.grad_norm = std::sqrt(norm_sq) / p.scaler->scale();
  return OkStatus();
}

Status StepRunner::Impl::Overflow(int, const Instruction& in) {
  float flag = std::isfinite(norm_sq) ? 0.0f : 1.0f;
  DS_RETURN_IF_ERROR(zero->AllReduceScalar(in, &flag, /*max=*/true));
  overflow = flag > 0;
  return OkStatus();
}

Status StepRunner::Impl::OptimizerStep(int, const Instruction& in) {
  result.lr = p.schedule->LrAt(step);
  if (!std::isfinite(result.grad_norm)) {
    if (!p.fp16)
      return DataLossError("step " + std::to_string(step + 1) + ": gradient norm is not finite");
    overflow = true;
  }
  if (!overflow) {
    const float clip = zero::ClipCoefficient(result.grad_norm, p.max_grad_norm);
    const float scale = static_cast<float>(clip / p.scaler->scale());
    DS_RETURN_IF_ERROR(zero->ViewsFor(in).back()->Step(in, static_cast<float>(result.lr), scale));
  }
  return OkStatus();
}

// SWAP_IN / SWAP_OUT of a sub-group's optimizer states (offload_optimizer nvme), tracked with the
// collectives so that the plan's waits complete them.
Status StepRunner::Impl::Swap(int index, const Instruction& in) {
  DS_ASSIGN_OR_RETURN(zero::CollectiveJob job, p.swapper->Start(in));
  return zero->Track(index, in.async(), std::move(job));
}

Status StepRunner::Impl::ZeroGrads(int, const Instruction& in) {
  for (zero::StateView* v : zero->ViewsFor(in)) DS_RETURN_IF_ERROR(v->ZeroGrads());
  return OkStatus();
}

Status StepRunner::Impl::Loss(int, const Instruction& in) {
  zero::ZeroCollectives::LossSums l;
  l.loss = static_cast<float>(loss_sum / in.mean_over());
  l.has = losses > 0 && !in.loss_part();
  l.aux_sum = static_cast<float>(aux_sum);
  l.aux_count = static_cast<float>(aux_count);
  DS_RETURN_IF_ERROR(zero->ReduceLoss(in, &l));
  result.loss = l.loss;
  result.moe_aux = l.aux_sum;
  return OkStatus();
}

Status StepRunner::Impl::RunOne(int index, const Instruction& in) {
  const Entry& e = in.kind() < static_cast<int>(table.size()) ? table[in.kind()] : Entry();
  if (!e.run)
    return UnimplementedError("step runner: instruction kind " + Instruction::Kind_Name(in.kind()) +
                              " is not run yet");
  for (int w : in.wait_for()) DS_RETURN_IF_ERROR(zero->WaitFor(w));
  if (e.lands_grads) DS_RETURN_IF_ERROR(compute->FinishGradients());
  return (this->*e.run)(index, in);
}

void StepRunner::Impl::SampleMemory() {
  // Model states as the plan counts them: parameters (stage 3: shard and persistent units),
  // gradients (full or shard), fp32 master and optimizer state. Gathered units, unreduced
  // gradient buckets and the collectives' staging are transient and reported apart.
  size_t total = 0;
  auto add = [&](const std::string& role, size_t bytes, bool model_state) {
    peak_by_role[role] = std::max(peak_by_role[role], bytes);
    if (model_state) total += bytes;
  };
  for (const auto& [role, bytes] : p.params->ResidentBytes(persistent_ranges))
    add(role, bytes, role != "gathered" && role != "grad buckets");
  add("optimizer", p.optimizer->ResidentBytes(), true);
  add("comm staging", static_cast<size_t>(zero->staging_bytes()), false);
  peak_model_states = std::max(peak_model_states, total);
}

StatusOr<std::unique_ptr<StepRunner>> StepRunner::Create(const proto::Plan* plan, int rank,
                                                         const StepParts& parts) {
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->rank = rank;
  impl->p = parts;
  impl->Fill();
  if (!parts.compute)
    impl->own_compute = std::make_unique<ExecutorCompute>(parts.executor, parts.data);
  impl->compute = parts.compute ? parts.compute : impl->own_compute.get();
  for (const proto::PartitionUnit& u : plan->partition().units())
    if (u.persistent()) impl->persistent_ranges.push_back({u.offset(), u.count()});
  const char* profile = std::getenv("DS_PROFILE_OPS");
  impl->profiling = (profile && profile[0] == '1') || parts.time_instructions;
  for (const proto::RankPlan& r : plan->ranks())
    if (r.rank() == rank) impl->mine = &r;
  if (!impl->mine)
    return InvalidArgumentError("the plan has no instructions for rank " + std::to_string(rank));
  for (const Instruction& in : impl->mine->instructions())
    if ((in.kind() == Instruction::BACKWARD || in.kind() == Instruction::BACKWARD_INPUT ||
         in.kind() == Instruction::LOSS_REDUCE) &&
        in.mean_over() <= 0)
      return InvalidArgumentError("the plan's " + Instruction::Kind_Name(in.kind()) +
                                  " has no mean_over (a plan older than version 2?)");
  if (plan->swap().sub_groups_size() > 0 && !parts.swapper)
    return InvalidArgumentError(
        "the plan swaps the optimizer states to NVMe (offload_optimizer device nvme), and the "
        "step runner was given no swapper");
  zero::ZeroParts z{parts.params,    parts.optimizer, parts.device, parts.comm,
                    parts.host_comm, parts.swapper,   parts.groups};
  DS_ASSIGN_OR_RETURN(impl->zero, zero::ZeroCollectives::Create(plan, rank, z));
  return std::unique_ptr<StepRunner>(new StepRunner(std::move(impl)));
}

StepRunner::StepRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StepRunner::~StepRunner() = default;

StatusOr<StepResult> StepRunner::Run(int64_t step) {
  Impl& m = *impl_;
  m.step = step;
  m.loss_sum = 0;
  m.aux_sum = 0;
  m.aux_count = 0;
  m.losses = 0;
  m.norm_sq = 0;
  m.overflow = false;
  m.result = StepResult();
  m.result.lr = m.p.schedule->LrAt(step);
  using Clock = std::chrono::steady_clock;
  const auto& instructions = m.mine->instructions();
  for (int index = 0; index < instructions.size(); ++index) {
    const Instruction& in = instructions[index];
    const CommOp comm = m.p.comms ? LoggedOp(in, m.GroupSize(in)) : CommOp();
    const Clock::time_point t0 =
        m.profiling || !comm.name.empty() ? Clock::now() : Clock::time_point();
    Status s = m.RunOne(index, in);
    if (!comm.name.empty() && s.ok()) {  // comms_logger: complete it now, as DeepSpeed does
      s = m.zero->WaitFor(index);
      m.p.comms->Record(comm.name, Instruction::Kind_Name(in.kind()), comm.bytes, m.GroupSize(in),
                        std::chrono::duration<double, std::milli>(Clock::now() - t0).count(),
                        stdout);
    }
    if (m.profiling && s.ok() && m.p.synchronize) s = m.p.synchronize();  // the device's time
    if (m.profiling)
      m.profile[Instruction::Kind_Name(in.kind())] +=
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (m.p.memory_profile) m.SampleMemory();
    if (!s.ok()) {
      m.zero->WaitAll().IgnoreError();  // no operation may outlive its staging
      return s.WithPrefix("rank " + std::to_string(m.rank) + " instruction " +
                          std::to_string(index) + " " + Instruction::Kind_Name(in.kind()));
    }
  }
  // The plan waits for everything; a collective still in flight is the plan's error.
  DS_RETURN_IF_ERROR(m.zero->WaitAll());
  m.result.skipped = m.overflow;
  DS_RETURN_IF_ERROR(m.p.scaler->Update(m.overflow));
  return m.result;
}

const std::map<std::string, double>& StepRunner::InstructionProfile() const {
  return impl_->profile;
}

Status StepRunner::GatherAllParams() { return impl_->zero->GatherAll(); }

void StepRunner::ReleaseGatheredParams() { impl_->zero->ReleaseAll(); }

const std::vector<std::pair<int64_t, int64_t>>& StepRunner::PersistentRanges() const {
  return impl_->persistent_ranges;
}

Status StepRunner::GatherParamUnits(const std::vector<int>& units) {
  return impl_->zero->GatherParamUnits(units);
}

void StepRunner::ReleaseParamUnits(const std::vector<int>& units) {
  impl_->zero->ReleaseParamUnits(units);
}

std::string StepRunner::MemoryReport() const {
  const Impl& m = *impl_;
  auto mib = [](size_t b) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", b / 1048576.0);
    return std::string(text);
  };
  std::string s = m.zero->DeviceStatesLine();  // the host ParamStore: checkpoint copies
  s += "model states peak " + mib(m.peak_model_states) + " MiB (";
  bool first = true;
  for (const auto& [role, bytes] : m.peak_by_role) {
    s += (first ? "" : ", ") + role + " " + mib(bytes);
    first = false;
  }
  return s + "), planned " + mib(m.mine->memory().model_state_bytes()) + " MiB";
}

}  // namespace ds::worker
