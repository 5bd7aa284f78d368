#include "runtime/worker/step_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "parallel/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/param_store.h"
#include "runtime/optim/device_states.h"
#include "runtime/optim/grad_norm.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optimizer.h"
#include "runtime/plan/bucket_arena.h"

namespace ds {
namespace {

using proto::Instruction;

uint64_t MicroSeed(uint64_t seed, int64_t step, int64_t micro) {
  return seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step) * 1000003ull +
         static_cast<uint64_t>(micro);
}

// The flat range [begin, end) rank `rank` owns of a partition unit (empty past the unit).
std::pair<int64_t, int64_t> OwnedOfUnit(const proto::PartitionUnit& u, int rank) {
  const int64_t begin = u.offset() + rank * u.chunk();
  const int64_t end = std::min(u.offset() + u.count(), begin + u.chunk());
  return {begin, std::max(begin, end)};
}

DType CommDType(proto::DataType d) {
  switch (d) {
    case proto::DT_BF16: return DType::kBF16;
    case proto::DT_F16: return DType::kF16;
    default: return DType::kF32;
  }
}

// dst[i] = src[i] converted, for n elements of float types.
void Convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * DTypeSize(st));
  } else if (st == DType::kF32 && dt == DType::kBF16) {
    ConvertF32ToBf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (st == DType::kBF16 && dt == DType::kF32) {
    ConvertBf16ToF32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else {
    for (int64_t i = 0; i < n; ++i) StoreFloat(dst, dt, i, LoadFloat(src, st, i));
  }
}

// shard[pos + i] += values[i] for i < n (shard in the model dtype, values in the comm dtype).
void AccumulateInto(void* shard, DType t, int64_t pos, const void* values, DType vt, int64_t n) {
  if (t == DType::kF32 && vt == DType::kF32) {
    float* dst = static_cast<float*>(shard) + pos;
    const float* src = static_cast<const float*>(values);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    return;
  }
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    StoreFloat(shard, t, pos + i, LoadFloat(shard, t, pos + i) + LoadFloat(values, vt, i));
}

}  // namespace

ShardLayout StepRunner::LayoutFor(const proto::Plan& plan, int rank, int64_t total) {
  ShardLayout layout;
  const int stage = plan.settings().zero_stage();
  if (stage == 0 || plan.partition().units_size() == 0) {
    layout.segments.push_back({0, total, 0});
    layout.shard_elements = total;
    return layout;
  }
  for (const proto::PartitionUnit& u : plan.partition().units()) {
    auto [begin, end] = OwnedOfUnit(u, rank);
    end = std::min(end, total);
    if (end > begin) layout.segments.push_back({begin, end - begin, u.shard_offset()});
  }
  layout.shard_elements = plan.partition().shard_elements();
  layout.partition_grads = stage >= 2;
  layout.partition_params = stage == 3;
  const plan::BucketArena arena = plan::AssignBucketArena(plan, rank);
  for (const plan::BucketBlock& b : arena.blocks)
    layout.grad_blocks.push_back({b.flat_begin, b.count, b.arena_offset});
  layout.grad_arena_elements = arena.elements;
  return layout;
}

// Note [Collectives of the step runner]
// Every collective of the plan goes through Issue(): Prepare() stages the data (gradients are
// reduced in the plan's comm_dtype: the model dtype, as DeepSpeed does, unless the config's
// communication_data_type asks for another; in the model dtype they are reduced in place
// where the layout allows; gathers move model-dtype bytes), starts the operation on the
// communication thread and leaves a `finish` step that moves the result where it belongs
// (back into the flat gradients, into the gradient shard, into the flat parameters). A sync
// instruction waits at once; an async one is completed by the WaitFor() of a later
// instruction's wait_for, or at the end of the step. Stage 1-2 reduce-scatters use
// ReduceScatterV with the plan's per-rank counts (a bucket meets the ranks' partitions
// unevenly); stage 3 units split evenly, so theirs are plain reduce-scatters.
struct StepRunner::Impl {
  const proto::Plan* plan;
  int rank;
  StepParts p;
  const proto::RankPlan* mine = nullptr;
  // Collectives on host memory (staged data, scalars) go here: StepParts::host_comm, or comm.
  parallel::Communicator* host = nullptr;
  int dp = 1;
  int stage = 0;
  DType t = DType::kF32;  // model dtype
  size_t tsize = 4;
  DType ct = DType::kF32;  // comm dtype of gradient reductions
  size_t csize = 4;

  struct Pending {
    std::unique_ptr<parallel::CommHandle> handle;
    std::vector<char> in, out;  // staging (reductions: comm dtype; gathers: model dtype)
    std::function<void(Pending&)> finish;
    std::function<Status(Pending&)> to_device;  // device states: the result back to the device
    DeviceBuffer dev_in, dev_out;       // device states, device-buffer communicator: staging
  };
  std::multimap<int, Pending> pending;  // by instruction index
  // Staging buffers of finished collectives, reused by later ones: a fresh multi-MiB vector
  // per collective would fault its pages in again every step.
  std::vector<std::vector<char>> spare;
  std::vector<char> Staging(size_t bytes, bool zeroed);
  void Recycle(Pending* job);
  Status Issue(int index, const Instruction& in);
  Status WaitFor(int index);
  Status WaitAll();

  Status PrepareReduce(const Instruction& in, Pending* job);
  Status PrepareUnitReduceScatter(const Instruction& in, Pending* job);
  Status PrepareGather(const std::vector<int>& units, Pending* job);
  Status PrepareShardAllGather(const Instruction& in, Pending* job);
  // Device states: copies what `in` reads to the host ParamStore and sets the job's way back.
  Status StageThroughHost(const Instruction& in, Pending* job);
  // Device states with a communicator on device buffers (NCCL), reductions in the model
  // dtype: the collective reads and writes the device's buffers (staging in device memory).
  Status PrepareOnDevice(const Instruction& in, Pending* job);
  // Stage 3 with device states: gathers of units into the gather arena and per-unit
  // reduce-scatters into the gradient shard, on device buffers (or, at one rank, copies).
  Status IssueUnitsOnDevice(int index, const Instruction& in);
  // The part of flat range [lo, lo + n) this rank owns, [first, second) (stages 1-2).
  std::pair<int64_t, int64_t> OwnedPart(int64_t lo, int64_t n) const;
  // Starts tracking an issued job (or finishes one that needed no collective).
  Status Track(int index, const Instruction& in, Pending job);
  int norm_share = -1;  // device states: this rank's share of the gradient norm
  // Reduced gradients of flat elements [lo, lo + n), `values` in the comm dtype (stages 0-1:
  // written back to the flat gradients unless reduced there in place; stages 2-3: the owned
  // part added to the gradient shard).
  void ApplyReduced(int64_t lo, int64_t n, const void* values);
  void AddToShard(int64_t flat_lo, int64_t n, const void* values);

  // Per step.
  int64_t step = 0;
  int micro = 0;
  double loss_sum = 0;
  double norm_sq = 0;
  bool overflow = false;
  StepResult result;

  Status GradNorm();
  Status Overflow();
  Status OptimizerStep();
  Status Execute(int index, const Instruction& in);

  // Memory profile (parts.memory_profile): peak resident bytes of the model states.
  void SampleMemory();
  std::vector<std::pair<int64_t, int64_t>> persistent_ranges;  // stage 3: flat (offset, count)
  std::map<std::string, size_t> peak_by_role;
  size_t peak_model_states = 0;

  // DS_PROFILE_OPS=1: milliseconds per instruction kind.
  bool profiling = false;
  std::map<std::string, double> profile;
};

std::vector<char> StepRunner::Impl::Staging(size_t bytes, bool zeroed) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(spare.size()); ++i)
    if (spare[i].capacity() >= bytes && (best < 0 || spare[i].capacity() < spare[best].capacity())) best = i;
  if (best < 0) return std::vector<char>(bytes);  // value-initialized: zero
  std::vector<char> v = std::move(spare[best]);
  spare.erase(spare.begin() + best);
  v.resize(bytes);
  if (zeroed) std::memset(v.data(), 0, bytes);
  return v;
}

void StepRunner::Impl::Recycle(Pending* job) {
  constexpr size_t kMaxSpare = 8;
  for (std::vector<char>* v : {&job->in, &job->out}) {
    if (v->capacity() == 0) continue;
    spare.push_back(std::move(*v));
    if (spare.size() > kMaxSpare) {  // drop the smallest
      auto smallest = std::min_element(spare.begin(), spare.end(), [](const auto& a, const auto& b) {
        return a.capacity() < b.capacity();
      });
      spare.erase(smallest);
    }
  }
}

Status StepRunner::Impl::Issue(int index, const Instruction& in) {
  Pending job;
  if (p.device && stage == 3) {
    if (in.kind() == Instruction::ALL_GATHER && overflow) return OkStatus();
    return IssueUnitsOnDevice(index, in);
  }
  if (p.device) {
    if (dp == 1) {  // one rank: the device holds the result already; stage 2 moves it to the shard
      if (stage < 2 || in.kind() == Instruction::ALL_GATHER) return OkStatus();
      const int64_t lo = in.ranges(0).offset(), n = in.ranges(0).count();
      DS_RETURN_IF_ERROR(p.device->AccumulateIntoShard(lo, p.device->GradAt(lo), n));
      return p.device->ZeroGradRange(lo, n);
    }
    if (in.kind() == Instruction::ALL_GATHER && overflow) return OkStatus();
    if (p.comm->device_buffers() && ct == t) {
      DS_RETURN_IF_ERROR(PrepareOnDevice(in, &job));
      return Track(index, in, std::move(job));
    }
    DS_RETURN_IF_ERROR(StageThroughHost(in, &job));
  }
  switch (in.kind()) {
    case Instruction::ALL_REDUCE:
      if (dp == 1 && stage < 2) return OkStatus();
      DS_RETURN_IF_ERROR(PrepareReduce(in, &job));
      break;
    case Instruction::REDUCE_SCATTER:
      DS_RETURN_IF_ERROR(stage == 3 ? PrepareUnitReduceScatter(in, &job) : PrepareReduce(in, &job));
      break;
    case Instruction::GATHER_PARAMS:
      DS_RETURN_IF_ERROR(PrepareGather({in.units().begin(), in.units().end()}, &job));
      break;
    case Instruction::ALL_GATHER:
      if (overflow) return OkStatus();  // the step was skipped: parameters did not change
      if (stage == 3) DS_RETURN_IF_ERROR(PrepareGather({in.units().begin(), in.units().end()}, &job));
      else DS_RETURN_IF_ERROR(PrepareShardAllGather(in, &job));
      break;
    default:
      return InternalError("not a collective: " + Instruction::Kind_Name(in.kind()));
  }
  return Track(index, in, std::move(job));
}

Status StepRunner::Impl::Track(int index, const Instruction& in, Pending job) {
  if (!job.handle) {
    if (job.finish) job.finish(job);
    Status back = job.to_device ? job.to_device(job) : OkStatus();
    Recycle(&job);
    return back;
  }
  pending.emplace(index, std::move(job));
  return in.async() ? OkStatus() : WaitFor(index);
}

Status StepRunner::Impl::WaitFor(int index) {
  auto [first, last] = pending.equal_range(index);
  Status status;
  for (auto it = first; it != last; ++it) {
    Pending& job = it->second;
    Status s = job.handle->Wait();
    if (s.ok() && job.finish) job.finish(job);
    if (s.ok() && job.to_device) s = job.to_device(job);
    if (status.ok()) status = s;
    Recycle(&job);
  }
  pending.erase(first, last);
  return status;
}

Status StepRunner::Impl::WaitAll() {
  Status status;
  while (!pending.empty()) {
    Status s = WaitFor(pending.begin()->first);
    if (status.ok()) status = s;
  }
  return status;
}

void StepRunner::Impl::AddToShard(int64_t flat_lo, int64_t n, const void* values) {
  if (n <= 0) return;
  AccumulateInto(p.params->grad_shard(), t, p.params->ShardPos(flat_lo), values, ct, n);
}

void StepRunner::Impl::ApplyReduced(int64_t lo, int64_t n, const void* values) {
  if (stage < 2) {
    void* g = p.params->FlatGradPtr(lo);
    if (g != values) Convert(values, ct, g, t, n);
    return;
  }
  for (const ShardSegment& s : p.params->segments()) {
    const int64_t a = std::max(lo, s.flat_begin), b = std::min(lo + n, s.flat_begin + s.count);
    if (a < b) AddToShard(a, b - a, static_cast<const char*>(values) + (a - lo) * csize);
  }
}

// Stages 0-2: one bucket range, all-reduced, or reduce-scattered over the ranks' partitions.
Status StepRunner::Impl::PrepareReduce(const Instruction& in, Pending* job) {
  if (in.ranges_size() != 1)
    return InternalError("stage " + std::to_string(stage) + " bucket with " +
                         std::to_string(in.ranges_size()) + " ranges");
  const int64_t lo = in.ranges(0).offset(), n = in.ranges(0).count();
  void* g = p.params->FlatGradPtr(lo);  // one bucket: contiguous
  void* data = g;  // in place when the comm dtype is the model dtype
  if (ct != t) {
    job->in = Staging(n * csize, false);
    Convert(g, t, job->in.data(), ct, n);
    data = job->in.data();
  }
  const bool release = stage >= 2;
  if (in.kind() == Instruction::ALL_REDUCE) {
    job->handle = host->AllReduceAsync(parallel::BufferView(data, n, ct), parallel::ReduceOp::kSum);
    job->finish = [this, lo, n, data, release](Pending&) {
      ApplyReduced(lo, n, data);
      if (release) p.params->ReleaseGrads(lo, n);
    };
    return OkStatus();
  }
  const auto& rc = in.collective().rank_counts();
  if (rc.size() != dp) return InternalError("reduce-scatter without per-rank counts");
  std::vector<int64_t> counts(rc.begin(), rc.end());
  int64_t sum = 0, before = 0;
  for (int k = 0; k < dp; ++k) {
    if (k < rank) before += counts[k];
    sum += counts[k];
  }
  if (sum != n) return InternalError("reduce-scatter counts do not add up to the bucket");
  job->out = Staging(std::max<int64_t>(1, counts[rank]) * csize, false);
  const int64_t my_lo = lo + before, my_n = counts[rank];
  job->handle = host->ReduceScatterVAsync(parallel::BufferView(data, n, ct),
                                            parallel::BufferView(job->out.data(), my_n, ct), counts,
                                            parallel::ReduceOp::kSum);
  job->finish = [this, lo, n, my_lo, my_n, release](Pending& j) {
    ApplyReduced(my_lo, my_n, j.out.data());
    if (release) p.params->ReleaseGrads(lo, n);
  };
  return OkStatus();
}

// Stage 3: each unit splits evenly (chunk elements per rank, the tail zero), so rank k's
// part of the bucket is its chunks of the units, in order.
Status StepRunner::Impl::PrepareUnitReduceScatter(const Instruction& in, Pending* job) {
  const auto& units = plan->partition().units();
  int64_t per_rank = 0;
  for (int u : in.units()) per_rank += units[u].chunk();
  job->in = Staging(per_rank * dp * csize, true);  // chunk padding must be zero
  for (int k = 0; k < dp; ++k) {
    char* dst = job->in.data() + k * per_rank * csize;
    for (int u : in.units()) {
      auto [begin, end] = OwnedOfUnit(units[u], k);
      if (end > begin) Convert(p.params->FlatGradPtr(begin), t, dst, ct, end - begin);
      dst += units[u].chunk() * csize;
    }
  }
  job->out = Staging(per_rank * csize, false);
  job->handle = host->ReduceScatterAsync(parallel::BufferView(job->in.data(), per_rank * dp, ct),
                                           parallel::BufferView(job->out.data(), per_rank, ct),
                                           parallel::ReduceOp::kSum);
  std::vector<int> list(in.units().begin(), in.units().end());
  job->finish = [this, list](Pending& j) {
    const auto& all = plan->partition().units();
    void* shard = p.params->grad_shard();
    const char* v = j.out.data();
    for (int u : list) {
      AccumulateInto(shard, t, all[u].shard_offset(), v, ct, all[u].chunk());
      v += all[u].chunk() * csize;
      p.params->ReleaseGrads(all[u].offset(), all[u].count());
    }
  };
  return OkStatus();
}

// Stage 3: every rank's chunks of `units` from the parameter shards into the flat parameters.
Status StepRunner::Impl::PrepareGather(const std::vector<int>& list, Pending* job) {
  const auto& units = plan->partition().units();
  int64_t per_rank = 0;
  for (int u : list) per_rank += units[u].chunk();
  job->in = Staging(per_rank * tsize, false);
  job->out = Staging(per_rank * dp * tsize, false);
  const char* shard = static_cast<const char*>(p.params->param_shard());
  char* dst = job->in.data();
  for (int u : list) {
    std::memcpy(dst, shard + units[u].shard_offset() * tsize, units[u].chunk() * tsize);
    dst += units[u].chunk() * tsize;
  }
  job->handle = host->AllGatherAsync(parallel::BufferView(job->in.data(), per_rank, t),
                                       parallel::BufferView(job->out.data(), per_rank * dp, t));
  job->finish = [this, list, per_rank](Pending& j) {
    const auto& all = plan->partition().units();
    p.params->MarkModelChanged();
    char* model = static_cast<char*>(p.params->model());
    for (int k = 0; k < dp; ++k) {
      const char* src = j.out.data() + k * per_rank * tsize;
      for (int u : list) {
        auto [begin, end] = OwnedOfUnit(all[u], k);
        if (end > begin) std::memcpy(model + begin * tsize, src, (end - begin) * tsize);
        src += all[u].chunk() * tsize;
      }
    }
  };
  return OkStatus();
}

// Stages 1-2: range k of the instruction is rank k's slice of its updated shard; the model
// copy (mixed precision) or the fp32 master (fp32) is gathered whole.
Status StepRunner::Impl::PrepareShardAllGather(const Instruction& in, Pending* job) {
  if (dp == 1) return OkStatus();
  if (in.ranges_size() != dp) return InternalError("shard all-gather without one range per rank");
  const int64_t len = in.ranges(0).count(), total = p.params->total_elements();
  const bool master = !p.params->mixed();
  const DType dt = master ? DType::kF32 : t;
  const size_t size = DTypeSize(dt);
  char* src = master ? reinterpret_cast<char*>(p.params->master()) : static_cast<char*>(p.params->model());
  job->in = Staging(len * size, true);
  job->out = Staging(len * dp * size, false);
  const int64_t mine_lo = in.ranges(rank).offset();
  const int64_t mine_n = std::max<int64_t>(0, std::min(len, total - mine_lo));
  if (mine_n > 0) std::memcpy(job->in.data(), src + mine_lo * size, mine_n * size);
  job->handle = host->AllGatherAsync(parallel::BufferView(job->in.data(), len, dt),
                                       parallel::BufferView(job->out.data(), len * dp, dt));
  std::vector<int64_t> offsets;
  for (const proto::ParamRange& r : in.ranges()) offsets.push_back(r.offset());
  job->finish = [this, offsets, len, total, src, size](Pending& j) {
    p.params->MarkModelChanged();
    for (int k = 0; k < dp; ++k) {
      const int64_t n = std::max<int64_t>(0, std::min(len, total - offsets[k]));
      if (n > 0) std::memcpy(src + offsets[k] * size, j.out.data() + k * len * size, n * size);
    }
  };
  return OkStatus();
}

// Note [ZeRO-3 on a device]
// Units live in the gather arena (DeviceStates::ParamAt) while gathered and in the parameter
// shard (ParamShardAt, at the unit's shard_offset, `chunk` elements) always. A gather packs
// this rank's chunks of the instruction's units into device staging, all-gathers them and
// unpacks rank k's chunk of each unit into the arena; a reduce-scatter packs rank k's part of
// each unit's gradients (zero-padded to the chunk) at k's place, reduce-scatters, adds this
// rank's part into the gradient shard and zeroes the units' gradients. RELEASE_PARAMS leaves
// the arena as it is: the plan's placement gives the place to the next unit only after it.
// One rank copies instead of communicating. Every collective on device buffers is ordered after
// the compute stream as it is when the instruction issues it (OrderAfterStream: the event the
// plan's instruction places), so the backward queued after it overlaps the communication.
Status StepRunner::Impl::IssueUnitsOnDevice(int index, const Instruction& in) {
  DeviceStates* d = p.device;
  DeviceMemory* mem = d->memory();
  const auto& all = plan->partition().units();
  std::vector<int> list(in.units().begin(), in.units().end());
  int64_t per_rank = 0;
  std::vector<int64_t> at;  // each unit's place in a rank's part of the staging
  for (int u : list) {
    at.push_back(per_rank);
    per_rank += all[u].chunk();
  }
  Pending job;
  switch (in.kind()) {
    case Instruction::GATHER_PARAMS:
    case Instruction::ALL_GATHER: {
      if (dp == 1) {
        for (int u : list)
          DS_RETURN_IF_ERROR(mem->Copy(d->ParamAt(all[u].offset()), d->ParamShardAt(all[u].shard_offset()),
                                       all[u].count() * tsize));
        return OkStatus();
      }
      DS_ASSIGN_OR_RETURN(job.dev_in, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, per_rank) * tsize));
      DS_ASSIGN_OR_RETURN(job.dev_out, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, per_rank * dp) * tsize));
      char* packed = static_cast<char*>(job.dev_in.data());
      for (size_t i = 0; i < list.size(); ++i)
        DS_RETURN_IF_ERROR(mem->Copy(packed + at[i] * tsize, d->ParamShardAt(all[list[i]].shard_offset()),
                                     all[list[i]].chunk() * tsize));
      DS_RETURN_IF_ERROR(p.comm->OrderAfterStream(mem->native_stream()));
      job.handle = p.comm->AllGatherAsync(parallel::BufferView(job.dev_in.data(), per_rank, t),
                                          parallel::BufferView(job.dev_out.data(), per_rank * dp, t));
      job.to_device = [this, d, mem, list, at, per_rank](Pending& j) -> Status {
        const auto& units = plan->partition().units();
        const char* out = static_cast<const char*>(j.dev_out.data());
        for (int k = 0; k < dp; ++k)
          for (size_t i = 0; i < list.size(); ++i) {
            auto [begin, end] = OwnedOfUnit(units[list[i]], k);
            if (end > begin)
              DS_RETURN_IF_ERROR(
                  mem->Copy(d->ParamAt(begin), out + (k * per_rank + at[i]) * tsize, (end - begin) * tsize));
          }
        return OkStatus();
      };
      return Track(index, in, std::move(job));
    }
    case Instruction::REDUCE_SCATTER: {
      if (dp == 1) {
        for (int u : list) {
          DS_RETURN_IF_ERROR(
              d->AccumulateAtShardPos(all[u].shard_offset(), d->GradAt(all[u].offset()), all[u].count()));
          DS_RETURN_IF_ERROR(d->ZeroGradRange(all[u].offset(), all[u].count()));
        }
        return OkStatus();
      }
      DS_ASSIGN_OR_RETURN(job.dev_in, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, per_rank * dp) * tsize));
      DS_ASSIGN_OR_RETURN(job.dev_out, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, per_rank) * tsize));
      char* packed = static_cast<char*>(job.dev_in.data());
      DS_RETURN_IF_ERROR(mem->Zero(packed, per_rank * dp * tsize));  // chunk padding must be zero
      for (int k = 0; k < dp; ++k)
        for (size_t i = 0; i < list.size(); ++i) {
          auto [begin, end] = OwnedOfUnit(all[list[i]], k);
          if (end > begin)
            DS_RETURN_IF_ERROR(
                mem->Copy(packed + (k * per_rank + at[i]) * tsize, d->GradAt(begin), (end - begin) * tsize));
        }
      DS_RETURN_IF_ERROR(p.comm->OrderAfterStream(mem->native_stream()));
      job.handle = p.comm->ReduceScatterAsync(parallel::BufferView(job.dev_in.data(), per_rank * dp, t),
                                              parallel::BufferView(job.dev_out.data(), per_rank, t),
                                              parallel::ReduceOp::kSum);
      job.to_device = [this, d, list, at](Pending& j) -> Status {
        const auto& units = plan->partition().units();
        const char* out = static_cast<const char*>(j.dev_out.data());
        for (size_t i = 0; i < list.size(); ++i) {
          const proto::PartitionUnit& u = units[list[i]];
          DS_RETURN_IF_ERROR(d->AccumulateAtShardPos(u.shard_offset(), out + at[i] * tsize, u.chunk()));
          DS_RETURN_IF_ERROR(d->ZeroGradRange(u.offset(), u.count()));
        }
        return OkStatus();
      };
      return Track(index, in, std::move(job));
    }
    default:
      return UnimplementedError("device states: " + Instruction::Kind_Name(in.kind()) + " at ZeRO stage 3");
  }
}

std::pair<int64_t, int64_t> StepRunner::Impl::OwnedPart(int64_t lo, int64_t n) const {
  for (const ShardSegment& s : p.params->segments()) {
    const int64_t a = std::max(lo, s.flat_begin), b = std::min(lo + n, s.flat_begin + s.count);
    if (a < b) return {a, b};
  }
  return {lo, lo};
}

// Device states: a bucket's gradients go to the host gradients before the reduction; then
// stages 0-1 bring its reduced part (all of it, or this rank's reduce-scatter part) back,
// stage 2 the updated range of the host's gradient shard (and zero the device's bucket). The
// updated partition goes to the host flat parameters before the shard all-gather and the
// gathered whole comes back.
Status StepRunner::Impl::StageThroughHost(const Instruction& in, Pending* job) {
  DeviceStates* d = p.device;
  switch (in.kind()) {
    case Instruction::ALL_REDUCE:
    case Instruction::REDUCE_SCATTER: {
      if (in.ranges_size() != 1) return InternalError("device states: a bucket with several ranges");
      const int64_t lo = in.ranges(0).offset(), n = in.ranges(0).count();
      DS_RETURN_IF_ERROR(d->GradsToHost(lo, n));
      if (stage >= 2) {
        const auto [a, b] = OwnedPart(lo, n);
        job->to_device = [d, a = a, b = b, lo, n](Pending&) -> Status {
          DS_RETURN_IF_ERROR(d->ShardFromHost(a, b - a));
          return d->ZeroGradRange(lo, n);
        };
        return OkStatus();
      }
      int64_t back_lo = lo, back_n = n;
      if (in.kind() == Instruction::REDUCE_SCATTER && in.collective().rank_counts_size() == dp) {
        back_n = in.collective().rank_counts(rank);
        for (int k = 0; k < rank; ++k) back_lo += in.collective().rank_counts(k);
      }
      job->to_device = [d, back_lo, back_n](Pending&) { return d->GradsFromHost(back_lo, back_n); };
      return OkStatus();
    }
    case Instruction::ALL_GATHER: {
      if (in.ranges_size() != dp) return InternalError("shard all-gather without one range per rank");
      const int64_t total = p.params->total_elements();
      const int64_t lo = in.ranges(rank).offset();
      DS_RETURN_IF_ERROR(d->ParamsToHost(lo, std::max<int64_t>(0, std::min(in.ranges(rank).count(), total - lo))));
      job->to_device = [d, total](Pending&) { return d->ParamsFromHost(0, total); };
      return OkStatus();
    }
    default:
      return UnimplementedError("device states: " + Instruction::Kind_Name(in.kind()) + " does not run yet");
  }
}

Status StepRunner::Impl::PrepareOnDevice(const Instruction& in, Pending* job) {
  DeviceStates* d = p.device;
  DeviceMemory* mem = d->memory();
  char* params = static_cast<char*>(d->params());
  switch (in.kind()) {
    case Instruction::ALL_REDUCE: {  // in place; stage 2 then adds the owned part to the shard
      if (in.ranges_size() != 1) return InternalError("device states: a bucket with several ranges");
      const int64_t lo = in.ranges(0).offset(), n = in.ranges(0).count();
      DS_RETURN_IF_ERROR(p.comm->OrderAfterStream(mem->native_stream()));
      job->handle = p.comm->AllReduceAsync(parallel::BufferView(d->GradAt(lo), n, t), parallel::ReduceOp::kSum);
      if (stage >= 2) {
        const auto [a, b] = OwnedPart(lo, n);
        job->to_device = [d, a = a, b = b, lo, n](Pending&) -> Status {
          DS_RETURN_IF_ERROR(d->AccumulateIntoShard(a, d->GradAt(a), b - a));
          return d->ZeroGradRange(lo, n);
        };
      }
      return OkStatus();
    }
    case Instruction::REDUCE_SCATTER: {  // this rank's part to staging, then into place (or the shard)
      if (in.ranges_size() != 1) return InternalError("device states: a bucket with several ranges");
      const auto& rc = in.collective().rank_counts();
      if (rc.size() != dp) return InternalError("reduce-scatter without per-rank counts");
      const int64_t lo = in.ranges(0).offset(), n = in.ranges(0).count();
      std::vector<int64_t> counts(rc.begin(), rc.end());
      int64_t my_lo = lo;
      for (int k = 0; k < rank; ++k) my_lo += counts[k];
      const int64_t my_n = counts[rank];
      DS_ASSIGN_OR_RETURN(job->dev_out, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, my_n) * tsize));
      DS_RETURN_IF_ERROR(p.comm->OrderAfterStream(mem->native_stream()));
      job->handle = p.comm->ReduceScatterVAsync(parallel::BufferView(d->GradAt(lo), n, t),
                                                parallel::BufferView(job->dev_out.data(), my_n, t), counts,
                                                parallel::ReduceOp::kSum);
      if (stage >= 2) {
        job->to_device = [d, my_lo, my_n, lo, n](Pending& j) -> Status {
          DS_RETURN_IF_ERROR(d->AccumulateIntoShard(my_lo, j.dev_out.data(), my_n));
          return d->ZeroGradRange(lo, n);
        };
        return OkStatus();
      }
      char* dst = static_cast<char*>(d->GradAt(my_lo));
      job->to_device = [this, mem, dst, my_n](Pending& j) { return mem->Copy(dst, j.dev_out.data(), my_n * tsize); };
      return OkStatus();
    }
    case Instruction::ALL_GATHER: {  // stage 1: the updated partition from staging to every rank
      if (in.ranges_size() != dp) return InternalError("shard all-gather without one range per rank");
      const int64_t len = in.ranges(0).count(), total = p.params->total_elements();
      const int64_t mine_lo = in.ranges(rank).offset();
      const int64_t mine_n = std::max<int64_t>(0, std::min(len, total - mine_lo));
      DS_ASSIGN_OR_RETURN(job->dev_in, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, len) * tsize));
      DS_ASSIGN_OR_RETURN(job->dev_out, DeviceBuffer::Allocate(mem, std::max<int64_t>(1, len * dp) * tsize));
      if (mine_n > 0) DS_RETURN_IF_ERROR(mem->Copy(job->dev_in.data(), params + mine_lo * tsize, mine_n * tsize));
      DS_RETURN_IF_ERROR(p.comm->OrderAfterStream(mem->native_stream()));
      job->handle = p.comm->AllGatherAsync(parallel::BufferView(job->dev_in.data(), len, t),
                                           parallel::BufferView(job->dev_out.data(), len * dp, t));
      std::vector<int64_t> offsets;
      for (const proto::ParamRange& r : in.ranges()) offsets.push_back(r.offset());
      job->to_device = [this, mem, params, offsets, len, total](Pending& j) -> Status {
        const char* out = static_cast<const char*>(j.dev_out.data());
        for (int k = 0; k < dp; ++k) {
          const int64_t n = std::max<int64_t>(0, std::min(len, total - offsets[k]));
          if (n > 0) DS_RETURN_IF_ERROR(mem->Copy(params + offsets[k] * tsize, out + k * len * tsize, n * tsize));
        }
        return OkStatus();
      };
      return OkStatus();
    }
    default:
      return UnimplementedError("device states: " + Instruction::Kind_Name(in.kind()) + " does not run yet");
  }
}

// Squared norm of the reduced gradients, each element counted on exactly one rank.
Status StepRunner::Impl::GradNorm() {
  double sum = 0;
  if (p.device) {
    DS_ASSIGN_OR_RETURN(SquaredNormResult r, p.device->GradSquaredSum(norm_share));
    sum = r.sum_sq;
  } else if (stage >= 2) {
    sum = SquaredSum(p.params->grad_shard(), t, 0, p.params->shard_elements());
  } else if (stage == 1) {
    for (const ShardSegment& s : p.params->segments())
      sum += GradSquaredSum(*p.params, s.flat_begin, s.flat_begin + s.count);
  } else {
    // Stage 0: every rank holds every reduced gradient; each sums an equal share.
    const int64_t total = p.params->total_elements();
    const int64_t chunk = (total + dp - 1) / dp;
    const int64_t begin = std::min(total, rank * chunk), end = std::min(total, begin + chunk);
    sum = GradSquaredSum(*p.params, begin, end);
  }
  float buf = static_cast<float>(sum);
  if (dp > 1)
    DS_RETURN_IF_ERROR(host->AllReduce(parallel::BufferView(&buf, 1), parallel::ReduceOp::kSum));
  norm_sq = buf;
  result.grad_norm = std::sqrt(norm_sq) / p.scaler->scale();
  return OkStatus();
}

Status StepRunner::Impl::Overflow() {
  float flag = std::isfinite(norm_sq) ? 0.0f : 1.0f;
  if (dp > 1)
    DS_RETURN_IF_ERROR(host->AllReduce(parallel::BufferView(&flag, 1), parallel::ReduceOp::kMax));
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
  if (p.device) return p.device->Step(static_cast<float>(result.lr), static_cast<float>(clip / p.scaler->scale()));
  p.optimizer->Step(static_cast<float>(result.lr), static_cast<float>(clip / p.scaler->scale()));
  return OkStatus();
}

Status StepRunner::Impl::Execute(int index, const Instruction& in) {
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
    case Instruction::GATHER_PARAMS:
    case Instruction::ALL_GATHER:
      return Issue(index, in);
    case Instruction::RELEASE_PARAMS:
      if (p.device) return OkStatus();  // the gather arena's place passes on (Note [ZeRO-3 on a device])
      for (int u : in.units()) {
        const proto::PartitionUnit& unit = plan->partition().units(u);
        p.params->ReleaseModel(unit.offset(), unit.count());
      }
      return OkStatus();
    case Instruction::GRAD_NORM_REDUCE:
      return GradNorm();
    case Instruction::OVERFLOW_REDUCE:
      return Overflow();
    case Instruction::OPTIMIZER_STEP:
      return OptimizerStep();
    case Instruction::ZERO_GRADS:
      // Stage 2 through the host accumulates the host's gradient shard too.
      if (p.device && stage == 2 && dp > 1 && !(p.comm->device_buffers() && ct == t)) p.params->ZeroGrads();
      if (p.device) return p.device->ZeroGrads();
      p.params->ZeroGrads();
      return OkStatus();
    default:
      return UnimplementedError("step runner: instruction kind " +
                                proto::Instruction::Kind_Name(in.kind()) + " is not run yet");
  }
}

void StepRunner::Impl::SampleMemory() {
  // Model states as the plan counts them: parameters (stage 3: shard and persistent units),
  // gradients (full or shard), fp32 master and optimizer state. Gathered units and unreduced
  // gradient buckets are transient and reported apart, as the plan does.
  size_t total = 0;
  auto add = [&](const std::string& role, size_t bytes, bool model_state) {
    peak_by_role[role] = std::max(peak_by_role[role], bytes);
    if (model_state) total += bytes;
  };
  for (const auto& [role, bytes] : p.params->ResidentBytes(persistent_ranges))
    add(role, bytes, role != "gathered" && role != "grad buckets");
  add("optimizer", p.optimizer->ResidentBytes(), true);
  size_t staging = 0;
  for (const auto& [index, job] : pending) staging += job.in.capacity() + job.out.capacity();
  for (const std::vector<char>& v : spare) staging += v.capacity();
  peak_by_role["comm staging"] = std::max(peak_by_role["comm staging"], staging);
  peak_model_states = std::max(peak_model_states, total);
}

StatusOr<std::unique_ptr<StepRunner>> StepRunner::Create(const proto::Plan* plan, int rank,
                                                         const StepParts& parts) {
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->rank = rank;
  impl->p = parts;
  impl->dp = std::max(1, plan->topology().dp());
  impl->host = parts.host_comm ? parts.host_comm : parts.comm;
  impl->stage = plan->settings().zero_stage();
  impl->t = parts.params->model_dtype();
  impl->tsize = DTypeSize(impl->t);
  impl->ct = CommDType(plan->settings().comm_dtype());
  if (impl->stage == 3)
    for (const proto::PartitionUnit& u : plan->partition().units())
      if (u.persistent()) impl->persistent_ranges.push_back({u.offset(), u.count()});
  const char* profile = std::getenv("DS_PROFILE_OPS");
  impl->profiling = profile && profile[0] == '1';
  impl->csize = DTypeSize(impl->ct);
  for (const proto::RankPlan& r : plan->ranks())
    if (r.rank() == rank) impl->mine = &r;
  if (!impl->mine) return InvalidArgumentError("the plan has no instructions for rank " + std::to_string(rank));
  if (impl->dp != parts.comm->size())
    return InvalidArgumentError("the plan is for dp " + std::to_string(impl->dp) +
                                " but the communicator has " + std::to_string(parts.comm->size()) + " ranks");
  if (impl->stage >= 2 && !parts.params->grads_partitioned())
    return InvalidArgumentError("ZeRO stage " + std::to_string(impl->stage) +
                                " needs a ParamStore sharded with LayoutFor(plan, rank)");
  if (impl->stage == 3 && !parts.params->params_partitioned())
    return InvalidArgumentError("ZeRO stage 3 needs partitioned parameters (LayoutFor)");
  if (impl->host->device_buffers() || impl->host->size() != parts.comm->size())
    return InvalidArgumentError("collectives on host memory (norms, the loss, staged buckets, checkpoints) need a "
                                "host communicator of the same ranks (Gloo) beside the device one");
  if (parts.comm->device_buffers() && !parts.device)
    return InvalidArgumentError("the data-parallel communicator works on device buffers (NCCL) but the model "
                                "states are on the host (offload_optimizer): use a host communicator (Gloo)");
  if (parts.device) {
    if (impl->stage == 3 && impl->dp > 1 && !parts.comm->device_buffers())
      return UnimplementedError("ZeRO stage 3 with the model states on the device gathers and reduces on device "
                                "buffers: it needs NCCL (libds_nccl.so), or offload_optimizer");
    if (impl->stage == 3 && impl->ct != impl->t)
      return UnimplementedError("ZeRO stage 3 with the model states on the device reduces in the model dtype: "
                                "drop communication_data_type");
    // The norm share as on the host: stage 2 its gradient shard, stage 1 its partition, stage 0
    // an equal part of the whole.
    std::vector<std::pair<int64_t, int64_t>> share;
    if (impl->stage >= 2) {
      DS_ASSIGN_OR_RETURN(impl->norm_share,
                          parts.device->AddNormShare({{0, parts.params->shard_elements()}}, /*in_shard=*/true));
    } else if (impl->stage == 1) {
      for (const ShardSegment& s : parts.params->segments()) share.push_back({s.flat_begin, s.count});
    } else {
      const int64_t total = parts.params->total_elements(), dp = impl->dp;
      const int64_t chunk = (total + dp - 1) / dp;
      const int64_t begin = std::min(total, rank * chunk), end = std::min(total, begin + chunk);
      share.push_back({begin, end - begin});
    }
    if (impl->stage < 2) {
      DS_ASSIGN_OR_RETURN(impl->norm_share, parts.device->AddNormShare(share));
    }
  }
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
  using Clock = std::chrono::steady_clock;
  for (int index = 0; index < instructions.size(); ++index) {
    const Instruction& in = instructions[index];
    const Clock::time_point t0 = m.profiling ? Clock::now() : Clock::time_point();
    Status s;
    for (int w : in.wait_for())
      if (s.ok()) s = m.WaitFor(w);
    // Gradients still on their way from a device (the executor's copy stream) land in the
    // ParamStore before anything reads or zeroes them there.
    const bool reads_grads = in.kind() != Instruction::LOAD_MICROBATCH && in.kind() != Instruction::FORWARD &&
                             in.kind() != Instruction::BACKWARD;
    if (s.ok() && reads_grads) s = m.p.executor->FinishGradients();
    if (s.ok() && in.kind() == Instruction::OPTIMIZER_STEP && !norm_done) {
      // Clipping off: the plan has no norm reduction, but fp16 overflow and the metrics need it.
      s = m.GradNorm();
      if (s.ok()) s = m.Overflow();
    }
    if (in.kind() == Instruction::GRAD_NORM_REDUCE || in.kind() == Instruction::OVERFLOW_REDUCE)
      norm_done = true;
    if (s.ok()) s = m.Execute(index, in);
    if (m.profiling && m.p.device && s.ok()) s = m.p.device->memory()->Synchronize();  // device time
    if (m.profiling)
      m.profile[Instruction::Kind_Name(in.kind())] +=
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (m.p.memory_profile) m.SampleMemory();
    if (!s.ok()) {
      m.WaitAll().IgnoreError();  // no operation may outlive its staging
      return s.WithPrefix("rank " + std::to_string(m.rank) + " instruction " + std::to_string(index) + " " +
                          proto::Instruction::Kind_Name(in.kind()));
    }
  }
  const Clock::time_point tail = m.profiling ? Clock::now() : Clock::time_point();
  DS_RETURN_IF_ERROR(m.p.executor->FinishGradients());
  DS_RETURN_IF_ERROR(m.WaitAll());
  const int64_t gas = m.plan->settings().gradient_accumulation_steps();
  float loss = static_cast<float>(m.loss_sum / gas);
  if (m.dp > 1)
    DS_RETURN_IF_ERROR(m.host->AllReduce(parallel::BufferView(&loss, 1), parallel::ReduceOp::kSum));
  m.result.loss = loss / m.dp;
  m.result.skipped = m.overflow;
  DS_RETURN_IF_ERROR(m.p.scaler->Update(m.overflow));
  if (m.profiling)
    m.profile["(step end: waits, loss all-reduce)"] +=
        std::chrono::duration<double, std::milli>(Clock::now() - tail).count();
  return m.result;
}

const std::map<std::string, double>& StepRunner::InstructionProfile() const { return impl_->profile; }

Status StepRunner::GatherAllParams() {
  Impl& m = *impl_;
  if (m.stage != 3) return OkStatus();
  std::vector<int> all;
  for (int u = 0; u < m.plan->partition().units_size(); ++u)
    if (!m.plan->partition().units(u).persistent()) all.push_back(u);
  Impl::Pending job;
  DS_RETURN_IF_ERROR(m.PrepareGather(all, &job));
  DS_RETURN_IF_ERROR(job.handle->Wait());
  job.finish(job);
  return OkStatus();
}

void StepRunner::ReleaseGatheredParams() {
  Impl& m = *impl_;
  if (m.stage != 3) return;
  for (const proto::PartitionUnit& u : m.plan->partition().units())
    if (!u.persistent()) m.p.params->ReleaseModel(u.offset(), u.count());
}

std::string StepRunner::MemoryReport() const {
  const Impl& m = *impl_;
  auto mib = [](size_t b) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", b / 1048576.0);
    return std::string(text);
  };
  std::string s;
  if (m.p.device)  // the host ParamStore below holds only the copies checkpoints use
    s = "model states on " + m.p.device->memory()->name() + ": " + mib(m.p.device->bytes()) + " MiB allocated; host ";
  s += "model states peak " + mib(m.peak_model_states) + " MiB (";
  bool first = true;
  for (const auto& [role, bytes] : m.peak_by_role) {
    s += (first ? "" : ", ") + role + " " + mib(bytes);
    first = false;
  }
  return s + "), planned " + mib(m.mine->memory().model_state_bytes()) + " MiB";
}

}  // namespace ds
