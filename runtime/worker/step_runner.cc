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
#include "runtime/worker/step_runner_impl.h"
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

}  // namespace

void StepRunner::Impl::Fill() {
  table[Instruction::LOAD_MICROBATCH] = {&Impl::Load, false};
  table[Instruction::FORWARD] = {&Impl::Forward, false};
  table[Instruction::BACKWARD] = {&Impl::Backward, false};
  table[Instruction::BACKWARD_INPUT] = {&Impl::Backward, false};
  table[Instruction::BACKWARD_WEIGHT] = {&Impl::Backward, false};
  table[Instruction::ALL_REDUCE] = {&Impl::Collective, true};
  table[Instruction::REDUCE_SCATTER] = {&Impl::Collective, true};
  table[Instruction::GATHER_PARAMS] = {&Impl::Collective, true};
  table[Instruction::GATHER_SECONDARY] = {&Impl::Collective, true};
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
  table[Instruction::CHECKPOINT_RELOAD] = {&Impl::Reload, false};
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
  // Only an fp16 plan checks for overflow (OVERFLOW_REDUCE, before this): a step it agreed to
  // skip; any other non-finite norm is an error.
  if (!std::isfinite(result.grad_norm) && !overflow)
    return DataLossError("step " + std::to_string(step + 1) + ": gradient norm is not finite");
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

StatusOr<std::unique_ptr<StepRunner>> StepRunner::Create(const proto::Plan* plan, int rank,
                                                         const StepParts& parts) {
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->rank = rank;
  impl->p = parts;
  impl->Fill();
  if (!parts.compute) impl->own_compute = MakeExecutorCompute(parts.executor, parts.data);
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
    m.beacon.Enter(step + 1, index, &in);
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
    if (m.p.memory_profile)
      m.memory.Sample(*m.p.params, *m.p.optimizer, m.persistent_ranges, m.zero->staging_bytes());
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

Status StepRunner::GatherUpdatedParams() {
  Impl& m = *impl_;
  const auto& instructions = m.mine->instructions();
  for (int index = 0; index < instructions.size(); ++index) {
    const Instruction& in = instructions[index];
    if (in.kind() != Instruction::ALL_GATHER) continue;
    DS_RETURN_IF_ERROR(m.zero->Issue(index, in));
    DS_RETURN_IF_ERROR(m.zero->WaitFor(index));
  }
  return m.zero->WaitAll();
}

const std::vector<std::pair<int64_t, int64_t>>& StepRunner::PersistentRanges() const {
  return impl_->persistent_ranges;
}

Status StepRunner::GatherParamUnits(const std::vector<int>& units) {
  return impl_->zero->GatherParamUnits(units);
}

void StepRunner::ReleaseParamUnits(const std::vector<int>& units) {
  impl_->zero->ReleaseParamUnits(units);
}

PlanBeacon& StepRunner::beacon() { return impl_->beacon; }

std::string StepRunner::MemoryReport() const {
  const Impl& m = *impl_;
  return m.memory.Report(m.zero->DeviceStatesLine(), m.mine->memory().model_state_bytes());
}

}  // namespace ds::worker
