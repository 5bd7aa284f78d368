#include "runtime/worker/step_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "parallel/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/param_store.h"
#include "runtime/optim/grad_norm.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optimizer.h"

namespace ds {
namespace {

using proto::Instruction;

uint64_t MicroSeed(uint64_t seed, int64_t step, int64_t micro) {
  return seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step) * 1000003ull +
         static_cast<uint64_t>(micro);
}

}  // namespace

struct StepRunner::Impl {
  const proto::Plan* plan;
  int rank;
  StepParts p;
  const proto::RankPlan* mine = nullptr;
  int dp = 1;
  std::vector<float> staging;  // fp32 copy of a 16-bit gradient bucket, or the gather buffer

  // Async reductions in flight (plan `async`), by instruction index: the handle, and for
  // 16-bit gradients the fp32 copy being reduced and where it goes back.
  struct Pending {
    std::unique_ptr<parallel::CommHandle> handle;
    std::vector<float> data;
    void* grads = nullptr;
  };
  std::multimap<int, Pending> pending;  // one entry per range of the instruction
  Status WaitFor(int index);
  Status WaitAll();
  Status ReduceAsync(int index, const Instruction& in);

  // Per step.
  int64_t step = 0;
  int micro = 0;
  double loss_sum = 0;
  double norm_sq = 0;
  bool overflow = false;
  StepResult result;

  Status Reduce(const Instruction& in);
  Status GradNorm();
  Status Overflow();
  Status OptimizerStep();
  Status AllGatherParams();
  Status Execute(const Instruction& in);
};

std::pair<int64_t, int64_t> StepRunner::OwnedRange(const proto::Plan& plan, int rank,
                                                   int64_t total) {
  if (plan.settings().zero_stage() == 0 || plan.partition().units_size() == 0) {
    // Stage 0: every rank updates everything; the norm is still split to sum once.
    return {0, total};
  }
  const proto::PartitionUnit& u = plan.partition().units(0);
  int64_t begin = u.offset() + rank * u.chunk();
  int64_t end = std::min(u.offset() + u.count(), begin + u.chunk());
  begin = std::min(begin, total);
  end = std::min(std::max(end, begin), total);
  return {begin, end};
}

// Sums the bucket's gradients over the dp ranks. 16-bit gradients are reduced in fp32.
// Note [Reduce-scatter as all-reduce]: with stage 2 the plan asks for a reduce-scatter; until
// the flat buffers are partitioned in memory, every rank reduces the whole bucket (same
// numbers, twice the traffic) and the optimizer reads only its shard.
Status StepRunner::Impl::Reduce(const Instruction& in) {
  if (dp == 1) return OkStatus();
  const DType t = p.params->model_dtype();
  for (const proto::ParamRange& r : in.ranges()) {
    if (t == DType::kF32) {
      float* g = static_cast<float*>(p.params->grads()) + r.offset();
      DS_RETURN_IF_ERROR(p.comm->AllReduce(parallel::BufferView(g, r.count()), parallel::ReduceOp::kSum));
      continue;
    }
    void* g = static_cast<char*>(p.params->grads()) + r.offset() * DTypeSize(t);
    staging.resize(std::max<size_t>(staging.size(), r.count()));
    for (int64_t i = 0; i < r.count(); ++i) staging[i] = LoadFloat(g, t, i);
    DS_RETURN_IF_ERROR(p.comm->AllReduce(parallel::BufferView(staging.data(), r.count()),
                                         parallel::ReduceOp::kSum));
    for (int64_t i = 0; i < r.count(); ++i) StoreFloat(g, t, i, staging[i]);
  }
  return OkStatus();
}

// Issues the bucket's reduction on the communication thread; WaitFor(index) completes it.
// Each range becomes one async all-reduce (16-bit gradients through an fp32 copy).
Status StepRunner::Impl::ReduceAsync(int index, const Instruction& in) {
  if (dp == 1) return OkStatus();
  const DType t = p.params->model_dtype();
  for (const proto::ParamRange& r : in.ranges()) {
    Pending job;
    if (t == DType::kF32) {
      float* g = static_cast<float*>(p.params->grads()) + r.offset();
      job.handle = p.comm->AllReduceAsync(parallel::BufferView(g, r.count()), parallel::ReduceOp::kSum);
    } else {
      job.grads = static_cast<char*>(p.params->grads()) + r.offset() * DTypeSize(t);
      job.data.resize(r.count());
      for (int64_t i = 0; i < r.count(); ++i) job.data[i] = LoadFloat(job.grads, t, i);
      job.handle = p.comm->AllReduceAsync(parallel::BufferView(job.data.data(), r.count()),
                                          parallel::ReduceOp::kSum);
    }
    pending.emplace(index, std::move(job));
  }
  return OkStatus();
}

Status StepRunner::Impl::WaitFor(int index) {
  const DType t = p.params->model_dtype();
  auto [first, last] = pending.equal_range(index);
  for (auto it = first; it != last; ++it) {
    Pending& job = it->second;
    DS_RETURN_IF_ERROR(job.handle->Wait());
    if (job.grads)
      for (size_t i = 0; i < job.data.size(); ++i) StoreFloat(job.grads, t, i, job.data[i]);
  }
  pending.erase(first, last);
  return OkStatus();
}

Status StepRunner::Impl::WaitAll() {
  while (!pending.empty()) DS_RETURN_IF_ERROR(WaitFor(pending.begin()->first));
  return OkStatus();
}

// Squared norm of this rank's share of the (reduced) gradients, summed over the ranks.
Status StepRunner::Impl::GradNorm() {
  const int64_t total = p.params->total_elements();
  const int64_t chunk = (total + dp - 1) / dp;
  const int64_t begin = std::min(total, rank * chunk), end = std::min(total, begin + chunk);
  const double sum = GradSquaredSum(*p.params, begin, end);
  float buf = static_cast<float>(sum);
  if (dp > 1)
    DS_RETURN_IF_ERROR(p.comm->AllReduce(parallel::BufferView(&buf, 1), parallel::ReduceOp::kSum));
  norm_sq = buf;
  result.grad_norm = std::sqrt(norm_sq) / p.scaler->scale();
  return OkStatus();
}

Status StepRunner::Impl::Overflow() {
  float flag = std::isfinite(norm_sq) ? 0.0f : 1.0f;
  if (dp > 1)
    DS_RETURN_IF_ERROR(p.comm->AllReduce(parallel::BufferView(&flag, 1), parallel::ReduceOp::kMax));
  overflow = flag > 0;
  return OkStatus();
}

Status StepRunner::Impl::OptimizerStep() {
  result.lr = p.schedule->LrAt(step);
  if (!std::isfinite(result.grad_norm)) {
    if (!p.fp16)
      return DataLossError("step " + std::to_string(step + 1) + ": gradient norm is not finite");
    overflow = true;
  }
  if (overflow) return OkStatus();
  const float clip = ClipCoefficient(result.grad_norm, p.max_grad_norm);
  p.optimizer->Step(static_cast<float>(result.lr), static_cast<float>(clip / p.scaler->scale()));
  return OkStatus();
}

// Every rank's updated shard to every rank: the 16-bit model copy when the fp32 master is
// sharded (mixed precision), else the fp32 master itself.
Status StepRunner::Impl::AllGatherParams() {
  if (dp == 1 || overflow) return OkStatus();
  const proto::PartitionUnit& u = plan->partition().units(0);
  const int64_t total = p.params->total_elements();
  const int64_t begin = u.offset() + rank * u.chunk();
  if (p.params->master_sharded()) {
    const DType t = p.params->model_dtype();
    uint16_t* model = static_cast<uint16_t*>(p.params->model());
    std::vector<uint16_t> mine(u.chunk(), 0), all(static_cast<size_t>(u.chunk()) * dp);
    for (int64_t i = 0; i < u.chunk() && begin + i < total; ++i) mine[i] = model[begin + i];
    DS_RETURN_IF_ERROR(p.comm->AllGather(parallel::BufferView(mine.data(), u.chunk(), t),
                                         parallel::BufferView(all.data(), u.chunk() * dp, t)));
    for (int64_t i = 0; i < u.count() && u.offset() + i < total; ++i) model[u.offset() + i] = all[i];
    return OkStatus();
  }
  staging.assign(static_cast<size_t>(u.chunk()) * dp, 0.0f);
  std::vector<float> mine(u.chunk(), 0.0f);
  for (int64_t i = 0; i < u.chunk() && begin + i < total; ++i) mine[i] = p.params->master()[begin + i];
  DS_RETURN_IF_ERROR(p.comm->AllGather(parallel::BufferView(mine.data(), u.chunk()),
                                       parallel::BufferView(staging.data(), u.chunk() * dp)));
  for (int64_t i = 0; i < u.count() && u.offset() + i < total; ++i)
    p.params->master()[u.offset() + i] = staging[i];
  p.params->SyncModelFromMaster();
  return OkStatus();
}

Status StepRunner::Impl::Execute(const Instruction& in) {
  switch (in.kind()) {
    case Instruction::LOAD_MICROBATCH:
      micro = in.micro_batch();
      return p.data->Next(p.executor->ids(), p.executor->targets());
    case Instruction::FORWARD: {
      DS_RETURN_IF_ERROR(p.executor->ForwardBlocks(MicroSeed(p.seed, step, micro), in.first_block(),
                                                   in.last_block()));
      if (in.last_block() >= p.loss_block) loss_sum += p.executor->loss();
      return OkStatus();
    }
    case Instruction::BACKWARD: {
      const int64_t gas = plan->settings().gradient_accumulation_steps();
      const float loss_grad = static_cast<float>(p.scaler->scale() / (gas * dp));
      return p.executor->BackwardBlocks(loss_grad, MicroSeed(p.seed, step, micro), in.first_block(),
                                        in.last_block());
    }
    case Instruction::ALL_REDUCE:
    case Instruction::REDUCE_SCATTER:
      return Reduce(in);
    case Instruction::GRAD_NORM_REDUCE:
      return GradNorm();
    case Instruction::OVERFLOW_REDUCE:
      return Overflow();
    case Instruction::OPTIMIZER_STEP:
      return OptimizerStep();
    case Instruction::ALL_GATHER:
      return AllGatherParams();
    case Instruction::ZERO_GRADS:
      p.params->ZeroGrads();
      return OkStatus();
    default:
      return UnimplementedError("step runner: instruction kind " +
                                proto::Instruction::Kind_Name(in.kind()) + " is not run yet");
  }
}

StatusOr<std::unique_ptr<StepRunner>> StepRunner::Create(const proto::Plan* plan, int rank,
                                                         const StepParts& parts) {
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->rank = rank;
  impl->p = parts;
  impl->dp = std::max(1, plan->topology().dp());
  for (const proto::RankPlan& r : plan->ranks())
    if (r.rank() == rank) impl->mine = &r;
  if (!impl->mine) return InvalidArgumentError("the plan has no instructions for rank " + std::to_string(rank));
  if (plan->settings().zero_stage() > 2)
    return UnimplementedError("ZeRO stage 3 is planned but not executed yet (stages 0-2 run)");
  if (impl->dp != parts.comm->size())
    return InvalidArgumentError("the plan is for dp " + std::to_string(impl->dp) +
                                " but the communicator has " + std::to_string(parts.comm->size()) + " ranks");
  return std::unique_ptr<StepRunner>(new StepRunner(std::move(impl)));
}

StepRunner::StepRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StepRunner::~StepRunner() = default;

StatusOr<StepResult> StepRunner::Run(int64_t step) {
  Impl& m = *impl_;
  m.step = step;
  m.loss_sum = 0;
  m.norm_sq = 0;
  m.overflow = false;
  m.result = StepResult();
  m.result.lr = m.p.schedule->LrAt(step);
  bool norm_done = false;
  m.pending.clear();
  const auto& instructions = m.mine->instructions();
  for (int index = 0; index < instructions.size(); ++index) {
    const Instruction& in = instructions[index];
    for (int w : in.wait_for()) DS_RETURN_IF_ERROR(m.WaitFor(w));
    if (in.async() && (in.kind() == Instruction::ALL_REDUCE || in.kind() == Instruction::REDUCE_SCATTER)) {
      DS_RETURN_IF_ERROR(m.ReduceAsync(index, in));
      continue;
    }
    if (in.kind() == Instruction::OPTIMIZER_STEP && !norm_done) {
      // Clipping off: the plan has no norm reduction, but fp16 overflow and the metrics need it.
      DS_RETURN_IF_ERROR(m.GradNorm());
      DS_RETURN_IF_ERROR(m.Overflow());
    }
    if (in.kind() == Instruction::GRAD_NORM_REDUCE || in.kind() == Instruction::OVERFLOW_REDUCE)
      norm_done = true;
    Status s = m.Execute(in);
    if (!s.ok()) return s.WithPrefix("rank " + std::to_string(m.rank) + " " +
                                     proto::Instruction::Kind_Name(in.kind()));
  }
  DS_RETURN_IF_ERROR(m.WaitAll());
  const int64_t gas = m.plan->settings().gradient_accumulation_steps();
  float loss = static_cast<float>(m.loss_sum / gas);
  if (m.dp > 1)
    DS_RETURN_IF_ERROR(m.p.comm->AllReduce(parallel::BufferView(&loss, 1), parallel::ReduceOp::kSum));
  m.result.loss = loss / m.dp;
  m.result.skipped = m.overflow;
  DS_RETURN_IF_ERROR(m.p.scaler->Update(m.overflow));
  return m.result;
}

}  // namespace ds
