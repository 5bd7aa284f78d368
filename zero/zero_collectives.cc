#include "zero/zero_collectives.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/device_memory.h"
#include "runtime/core/proto_dtype.h"
#include "runtime/core/tensor.h"
#include "zero/collective_op.h"
#include "zero/device_states.h"
#include "zero/plan/bucket_arena.h"
#include "zero/shard_layout.h"

namespace ds::zero {
namespace {

using internal::Op;
using proto::Instruction;

// values[0, n) (dtype vt) of flat elements [lo, lo + n) into the owned part of the shard.
Status AddOwned(const Op& op, int64_t lo, int64_t n, const char* values, DType vt) {
  for (const ShardSegment& s : op.v->layout().segments()) {
    const int64_t a = std::max(lo, s.flat_begin), b = std::min(lo + n, s.flat_begin + s.count);
    if (a < b)
      DS_RETURN_IF_ERROR(op.v->AddToGradShard(op.v->layout().ShardPos(a),
                                              values + (a - lo) * DTypeSize(vt), vt, b - a));
  }
  return OkStatus();
}

// A bucket's flat range, all-reduced or reduce-scattered over the ranks' parts (rank_counts):
// the result is written back to the flat gradients, or (in_shard) its owned part added into
// the gradient shard and the bucket released. In place when the comm dtype is the model's.
Status ReduceRanges(const Op& op, CollectiveJob* job) {
  if (op.in.ranges_size() != 1) return InternalError("a reduction bucket with several ranges");
  const int64_t lo = op.in.ranges(0).offset(), n = op.in.ranges(0).count();
  StateView* v = op.v;
  char* g = v->Grads(lo);
  if (op.local()) {  // one rank: the gradients are reduced already
    if (!op.in.in_shard()) return OkStatus();
    DS_RETURN_IF_ERROR(AddOwned(op, lo, n, g, op.t()));
    return v->ReleaseGrads(lo, n);
  }
  const DType t = op.t(), ct = op.ct();
  char* data = g;
  if (ct != t) {
    DS_RETURN_IF_ERROR(v->Convert(g, t, op.stage_in, ct, n));
    data = op.stage_in;
  }
  const bool in_shard = op.in.in_shard();
  if (op.in.kind() == Instruction::ALL_REDUCE) {
    job->handle =
        op.comm->AllReduceAsync(parallel::BufferView(data, n, ct), parallel::ReduceOp::kSum);
    job->finish = [=]() -> Status {
      if (!in_shard) return data == g ? OkStatus() : v->Convert(data, ct, g, t, n);
      DS_RETURN_IF_ERROR(AddOwned(op, lo, n, data, ct));
      return v->ReleaseGrads(lo, n);
    };
    return OkStatus();
  }
  const auto& rc = op.in.collective().rank_counts();
  if (rc.size() != op.dp) return InternalError("reduce-scatter without per-rank counts");
  std::vector<int64_t> counts(rc.begin(), rc.end());
  int64_t my_lo = lo, sum = 0;
  for (int k = 0; k < op.dp; ++k) {
    if (k < op.rank) my_lo += counts[k];
    sum += counts[k];
  }
  if (sum != n) return InternalError("reduce-scatter counts do not add up to the bucket");
  const int64_t my_n = counts[op.rank];
  char* out = op.stage_out;
  job->handle = op.comm->ReduceScatterVAsync(parallel::BufferView(data, n, ct),
                                             parallel::BufferView(out, my_n, ct), counts,
                                             parallel::ReduceOp::kSum);
  job->finish = [=]() -> Status {
    if (!in_shard) return v->Convert(out, ct, v->Grads(my_lo), t, my_n);
    DS_RETURN_IF_ERROR(AddOwned(op, my_lo, my_n, out, ct));
    return v->ReleaseGrads(lo, n);
  };
  return OkStatus();
}

// Stage 3: every unit splits evenly (chunk elements per rank, the tail zero), so rank k's part
// of the packed input is its chunks of the units, in order; the result is added into the
// gradient shard and the units' gradients released.
Status ReduceUnits(const Op& op, CollectiveJob* job) {
  StateView* v = op.v;
  std::vector<int> list(op.in.units().begin(), op.in.units().end());
  if (op.local()) {
    for (int u : list) {
      const proto::PartitionUnit& unit = op.unit(u);
      DS_RETURN_IF_ERROR(
          v->AddToGradShard(unit.shard_offset(), v->Grads(unit.offset()), op.t(), unit.count()));
      DS_RETURN_IF_ERROR(v->ReleaseGrads(unit.offset(), unit.count()));
    }
    return OkStatus();
  }
  const DType t = op.t(), ct = op.ct();
  const size_t cs = op.cs();
  std::vector<int64_t> at;  // each unit's place in a rank's part
  int64_t per_rank = 0;
  for (int u : list) {
    at.push_back(per_rank);
    per_rank += op.unit(u).chunk();
  }
  DS_RETURN_IF_ERROR(v->Zero(op.stage_in, per_rank * op.dp * cs));  // chunk padding must be zero
  for (int k = 0; k < op.dp; ++k)
    for (size_t i = 0; i < list.size(); ++i) {
      auto [begin, end] = OwnedOfUnit(op.unit(list[i]), k);
      if (end > begin)
        DS_RETURN_IF_ERROR(v->Convert(v->Grads(begin), t, op.stage_in + (k * per_rank + at[i]) * cs,
                                      ct, end - begin));
    }
  job->handle = op.comm->ReduceScatterAsync(parallel::BufferView(op.stage_in, per_rank * op.dp, ct),
                                            parallel::BufferView(op.stage_out, per_rank, ct),
                                            parallel::ReduceOp::kSum);
  char* out = op.stage_out;
  job->finish = [=]() -> Status {
    for (size_t i = 0; i < list.size(); ++i) {
      const proto::PartitionUnit& u = op.unit(list[i]);
      DS_RETURN_IF_ERROR(v->AddToGradShard(u.shard_offset(), out + at[i] * cs, ct, u.chunk()));
      DS_RETURN_IF_ERROR(v->ReleaseGrads(u.offset(), u.count()));
    }
    return OkStatus();
  };
  return OkStatus();
}

// Stages 1-2: range k of the instruction is group rank k's slice of its updated shard (clipped to
// the unit; the collective moves count / ranks elements per rank); the 16-bit copy (mixed
// precision) or the fp32 master (fp32) is gathered whole.
Status GatherSlices(const Op& op, CollectiveJob* job) {
  if (op.local()) return OkStatus();  // one rank updated everything in place
  if (op.in.ranges_size() != op.dp)
    return InternalError("shard all-gather without one range per rank");
  StateView* v = op.v;
  const DType dt = v->updated_dtype();
  const size_t size = DTypeSize(dt);
  const int64_t len = op.in.collective().count() / op.dp, total = v->layout().total_elements();
  std::vector<int64_t> offsets, counts;
  for (const proto::ParamRange& r : op.in.ranges()) {
    offsets.push_back(r.offset());
    counts.push_back(std::clamp<int64_t>(std::min(r.count(), total - r.offset()), 0, len));
  }
  DS_RETURN_IF_ERROR(v->Zero(op.stage_in, len * size));
  DS_RETURN_IF_ERROR(v->Copy(op.stage_in, v->Updated(offsets[op.rank]), counts[op.rank] * size));
  job->handle = op.comm->AllGatherAsync(parallel::BufferView(op.stage_in, len, dt),
                                        parallel::BufferView(op.stage_out, len * op.dp, dt));
  char* out = op.stage_out;
  job->finish = [=]() -> Status {
    v->ParamsChanged();
    for (int k = 0; k < op.dp; ++k)
      DS_RETURN_IF_ERROR(v->Copy(v->Updated(offsets[k]), out + k * len * size, counts[k] * size));
    return OkStatus();
  };
  return OkStatus();
}

// STAGED collectives: the plan's copies between the device states and their host copies.
Status StagingCopies(DeviceStates* d, const proto::Collective& c, bool to_host) {
  for (const proto::StagingCopy& s : c.staging()) {
    if (s.to_host() != to_host) continue;
    const int64_t lo = s.offset(), n = s.count();
    switch (s.what()) {
      case proto::StagingCopy::GRADS:
        DS_RETURN_IF_ERROR(to_host ? d->GradsToHost(lo, n) : d->GradsFromHost(lo, n));
        break;
      case proto::StagingCopy::PARAMS:
        DS_RETURN_IF_ERROR(to_host ? d->ParamsToHost(lo, n) : d->ParamsFromHost(lo, n));
        break;
      case proto::StagingCopy::GRAD_SHARD:
        DS_RETURN_IF_ERROR(d->ShardFromHost(lo, n));
        break;
      case proto::StagingCopy::ZERO_GRADS:
        DS_RETURN_IF_ERROR(d->ZeroGradRange(lo, n));
        break;
      default:
        return InternalError("an unknown staging copy");
    }
  }
  return OkStatus();
}

}  // namespace

// The staging arena (host or device memory), allocated once.
struct ZeroCollectives::Impl {
  zero::StagingArena arena;
  Buffer host;  // fresh pages: touched only as the buckets first use them
  DeviceBuffer device;
  char* base = nullptr;
  char* At(int id) const { return id < 0 ? nullptr : base + arena.offset.at(id); }
  Buffer secondary;  // hpZ: the secondary partition (host memory; zeroed, so its padding is)
  char* secondary_base = nullptr;
};

ZeroCollectives::ZeroCollectives(const proto::Plan* plan, int rank, const ZeroParts& parts)
    : plan_(plan), rank_(rank), parts_(parts), impl_(std::make_unique<Impl>()) {}
ZeroCollectives::~ZeroCollectives() = default;

// Expert parallelism: the experts' units and buckets run on the rank's edp group, where its
// place is its dp rank / ep; hpZ's secondary gathers on the rank's hpz group (consecutive dp
// ranks: its place is its dp rank mod the group's size); everything else on the dp group.
Status ZeroCollectives::Start(const Instruction& in, StateView* v, parallel::Communicator* comm,
                              char* stage_in, char* stage_out, CollectiveJob* job) {
  const bool expert = IsExpertGroup(in.collective().group());
  const bool secondary = in.kind() == Instruction::GATHER_SECONDARY;
  const int ep = expert ? std::max(1, plan_->topology().ep()) : 1;
  const int dp_rank = DpRankOf(*plan_, rank_);
  int group_rank = dp_rank / ep, group_size = std::max(1, plan_->topology().dp()) / ep;
  if ((expert || secondary) && in.collective().placement() != proto::LOCAL) {
    auto it = parts_.groups.find(in.collective().group());  // hpz may be the whole world
    if (it == parts_.groups.end())
      return InternalError("no communicator for the plan's group " + in.collective().group());
    comm = it->second;
  }
  if (secondary) {
    group_size = plan_->settings().hpz_partition_size();
    group_rank = dp_rank % group_size;
  }
  Op op{*plan_, in,       group_rank, group_size,  v,
        comm,   stage_in, stage_out,  comm_dtype_, impl_->secondary_base,
        dp_rank};
  for (const std::string& g : in.collective().hierarchy()) {
    auto it = parts_.groups.find(g);
    if (it == parts_.groups.end())
      return InternalError("no communicator for the group " + g + " of a quantized reduction");
    op.stages.push_back(it->second);
  }
  const bool reduce =
      in.kind() == Instruction::ALL_REDUCE || in.kind() == Instruction::REDUCE_SCATTER;
  if (reduce && in.quantize().bits() > 0 && !op.local())
    return internal::QuantizedReduceUnits(op, job);
  if (reduce) return in.units_size() > 0 ? ReduceUnits(op, job) : ReduceRanges(op, job);
  return in.units_size() > 0 ? internal::GatherUnits(op, job) : GatherSlices(op, job);
}

StatusOr<std::unique_ptr<ZeroCollectives>> ZeroCollectives::Create(const proto::Plan* plan,
                                                                   int rank,
                                                                   const ZeroParts& parts) {
  std::unique_ptr<ZeroCollectives> z(new ZeroCollectives(plan, rank, parts));
  if (!z->parts_.host_comm) z->parts_.host_comm = parts.comm;
  DS_RETURN_IF_ERROR(z->CheckParts());
  DS_ASSIGN_OR_RETURN(z->comm_dtype_,
                      FromProtoDType(plan->settings().comm_dtype(), "plan comm dtype"));
  z->host_ = MakeHostView(parts.params, parts.optimizer, parts.swapper);
  if (parts.device) {
    DS_ASSIGN_OR_RETURN(z->device_, MakeDeviceView(parts.device, parts.params, *plan, rank));
  }
  const proto::RankPlan* mine = nullptr;
  for (const proto::RankPlan& r : plan->ranks())
    if (r.rank() == rank) mine = &r;
  if (!mine)
    return InvalidArgumentError("the plan has no instructions for rank " + std::to_string(rank));
  DS_RETURN_IF_ERROR(z->CheckPlacements(*mine));
  for (const proto::ProcessGroup& g : plan->groups())
    if (g.kind() == "edp" && std::count(g.ranks().begin(), g.ranks().end(), rank))
      z->edp_group_ = g.name();
  Impl& m = *z->impl_;
  if (const int64_t n = plan->partition().secondary_elements(); n > 0) {
    m.secondary = Buffer::Allocate(n * static_cast<int64_t>(DTypeSize(z->host_->dtype())));
    std::memset(m.secondary.data(), 0, m.secondary.size());
    m.secondary_base = static_cast<char*>(m.secondary.data());
  }
  m.arena = zero::AssignStagingArena(*plan, rank);
  z->staging_bytes_ = m.arena.bytes;
  if (m.arena.device) {
    DS_ASSIGN_OR_RETURN(m.device, DeviceBuffer::Allocate(parts.device->memory(),
                                                         std::max<int64_t>(1, m.arena.bytes)));
    m.base = static_cast<char*>(m.device.data());
  } else {
    m.host = Buffer::Allocate(std::max<int64_t>(1, m.arena.bytes));
    m.base = static_cast<char*>(m.host.data());
  }
  return z;
}

// What the plan places must exist here: device states for DEVICE / STAGED, a device-buffer
// communicator for DEVICE collectives, a host one for HOST / STAGED ones and the scalars.
Status ZeroCollectives::CheckPlacements(const proto::RankPlan& mine) const {
  if (parts_.host_comm->device_buffers())
    return InvalidArgumentError(
        "collectives on host memory (norms, the loss, staged buckets, checkpoints) need a "
        "host communicator of the same ranks (Gloo) beside the device one");
  for (const Instruction& in : mine.instructions()) {
    const proto::Placement where = in.collective().placement();
    if ((in.placement() == proto::DEVICE || in.placement() == proto::STAGED) && !device_)
      return InvalidArgumentError(
          "the plan keeps the model states on the device (states_on_device) but this "
          "rank has none");
    if (where == proto::DEVICE && !parts_.comm->device_buffers())
      return InvalidArgumentError(
          "the plan reduces on device buffers (device_collectives) but the data-parallel "
          "communicator works on host memory");
    if ((where == proto::HOST || where == proto::STAGED) && in.has_collective() &&
        in.kind() != Instruction::LOSS_REDUCE && in.kind() != Instruction::GRAD_NORM_REDUCE &&
        in.kind() != Instruction::OVERFLOW_REDUCE && parts_.comm->device_buffers() && !device_)
      return InvalidArgumentError(
          "the data-parallel communicator works on device buffers (NCCL) but the model "
          "states are on the host (offload_optimizer): use a host communicator (Gloo)");
  }
  return OkStatus();
}

Status ZeroCollectives::Issue(int index, const Instruction& in) {
  const proto::Collective& c = in.collective();
  const proto::Placement where = c.placement();
  CollectiveJob job;
  if (where == proto::STAGED) DS_RETURN_IF_ERROR(StagingCopies(parts_.device, c, /*to_host=*/true));
  StateView* v = where == proto::DEVICE  ? device_.get()
                 : where == proto::LOCAL ? ViewsFor(in).back()
                                         : host_.get();
  parallel::Communicator* comm = where == proto::DEVICE ? parts_.comm : parts_.host_comm;
  if (where == proto::DEVICE) DS_RETURN_IF_ERROR(comm->OrderAfterStream(v->stream()));
  DS_RETURN_IF_ERROR(
      Start(in, v, comm, impl_->At(c.staging_in()), impl_->At(c.staging_out()), &job));
  if (where == proto::STAGED) {
    DeviceStates* d = parts_.device;
    job.finish = [d, &c, f = std::move(job.finish)]() -> Status {
      if (f) DS_RETURN_IF_ERROR(f());
      return StagingCopies(d, c, /*to_host=*/false);
    };
  }
  return queue_.Track(index, in.async(), std::move(job));
}

// The stores must be sharded as the plan partitions them, the groups sized as its dp.
Status ZeroCollectives::CheckParts() const {
  const int dp = std::max(1, plan_->topology().dp());
  if (dp != parts_.comm->size() || parts_.host_comm->size() != parts_.comm->size())
    return InvalidArgumentError("the plan is for dp " + std::to_string(dp) +
                                " but the communicators have " +
                                std::to_string(parts_.comm->size()) + " and " +
                                std::to_string(parts_.host_comm->size()) + " ranks");
  const int stage = plan_->settings().zero_stage();
  if (stage >= 2 && !parts_.params->grads_partitioned())
    return InvalidArgumentError("ZeRO stage " + std::to_string(stage) +
                                " needs a ParamStore sharded with zero::LayoutFor(plan, rank)");
  if (stage == 3 && !parts_.params->params_partitioned())
    return InvalidArgumentError("ZeRO stage 3 needs partitioned parameters (zero::LayoutFor)");
  return OkStatus();
}

Status ZeroCollectives::ReduceGrads(const Instruction& in, parallel::Communicator* comm) {
  const DType t = host_->dtype();
  const size_t ts = DTypeSize(t);
  for (const proto::ParamRange& r : in.ranges()) {
    char* data = in.in_shard() ? static_cast<char*>(parts_.params->grad_shard()) + r.offset() * ts
                               : host_->Grads(r.offset());
    DS_RETURN_IF_ERROR(
        comm->AllReduce(parallel::BufferView(data, r.count(), t), parallel::ReduceOp::kSum));
  }
  return OkStatus();
}

Status ZeroCollectives::ReduceTied(const Instruction& in, parallel::Communicator* comm) {
  const DType t = host_->dtype();
  const size_t ts = DTypeSize(t);
  const int64_t count = in.collective().count();
  std::vector<char>& sum = tied_sum_;
  sum.assign(count * ts, 0);  // all-zero bits: 0 in every float type
  auto at = [&](const proto::ParamRange& r) -> char* {
    return in.in_shard() ? static_cast<char*>(parts_.params->grad_shard()) + r.offset() * ts
                         : host_->Grads(r.offset());
  };
  for (const proto::ParamRange& r : in.ranges()) {
    if (r.at() < 0 || r.at() + r.count() > count)
      return InternalError("the plan places a tied gradient range at " + std::to_string(r.at()) +
                           " of " + std::to_string(count));
    std::memcpy(sum.data() + r.at() * ts, at(r), r.count() * ts);
  }
  DS_RETURN_IF_ERROR(
      comm->AllReduce(parallel::BufferView(sum.data(), count, t), parallel::ReduceOp::kSum));
  for (const proto::ParamRange& r : in.ranges())
    std::memcpy(at(r), sum.data() + r.at() * ts, r.count() * ts);
  return OkStatus();
}

parallel::Communicator* ZeroCollectives::ScalarComm(const Instruction& in) const {
  auto it = parts_.groups.find(in.collective().group());
  return it != parts_.groups.end() ? it->second : parts_.host_comm;
}

Status ZeroCollectives::ReduceLoss(const Instruction& in, LossSums* l) {
  if (in.collective().count() != 4)
    return InvalidArgumentError("the plan's LOSS_REDUCE moves " +
                                std::to_string(in.collective().count()) +
                                " values; the loss, whether the rank has one and the aux loss's "
                                "sum and count are 4 (a plan older than version 6?)");
  float sums[4] = {l->loss, l->has ? 1.0f : 0.0f, l->aux_sum, l->aux_count};
  if (in.collective().placement() != proto::LOCAL)
    DS_RETURN_IF_ERROR(
        ScalarComm(in)->AllReduce(parallel::BufferView(sums, 4), parallel::ReduceOp::kSum));
  l->loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0f;
  l->aux_sum = sums[3] > 0 ? sums[2] / sums[3] : 0.0f;
  return OkStatus();
}

std::string ZeroCollectives::DeviceStatesLine() const {
  if (!parts_.device) return "";
  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.1f", parts_.device->bytes() / 1048576.0);
  return "model states on " + parts_.device->memory()->name() + ": " + mib +
         " MiB allocated; host ";
}

Status ZeroCollectives::AllReduceScalar(const Instruction& in, float* value, bool max) {
  if (in.collective().placement() == proto::LOCAL) return OkStatus();
  return ScalarComm(in)->AllReduce(parallel::BufferView(value, 1),
                                   max ? parallel::ReduceOp::kMax : parallel::ReduceOp::kSum);
}

// The partial sums travel as their 8 bytes (an all-gather moves them exactly) and every rank adds
// them in rank order in double: the total does not depend on how the elements were split over
// the ranks (another partition, or offload_param's 4 KiB chunks, gives the same float).
Status ZeroCollectives::AllReduceSumExact(const Instruction& in, double* value) {
  if (in.collective().placement() == proto::LOCAL) return OkStatus();
  parallel::Communicator* comm = ScalarComm(in);
  const int n = comm->size();
  float mine[2];
  std::memcpy(mine, value, sizeof(double));
  std::vector<float> all(2 * static_cast<size_t>(n));
  DS_RETURN_IF_ERROR(
      comm->AllGather(parallel::BufferView(mine, 2), parallel::BufferView(all.data(), 2 * n)));
  double sum = 0;
  for (int r = 0; r < n; ++r) {
    double part;
    std::memcpy(&part, all.data() + 2 * r, sizeof(double));
    sum += part;
  }
  *value = sum;
  return OkStatus();
}

std::vector<StateView*> ZeroCollectives::ViewsFor(const Instruction& in) const {
  switch (in.placement()) {
    case proto::DEVICE:
      return {device_.get()};
    case proto::STAGED:
      return {host_.get(), device_.get()};
    default:
      return {host_.get()};
  }
}

Status ZeroCollectives::GatherAll() {
  std::vector<int> all(plan_->partition().units_size());
  for (size_t u = 0; u < all.size(); ++u) all[u] = static_cast<int>(u);
  return GatherParamUnits(all);
}

Status ZeroCollectives::GatherParamUnits(const std::vector<int>& units) {
  if (!parts_.params->params_partitioned()) return OkStatus();
  for (bool expert : {false, true}) {
    Instruction in;
    in.set_kind(Instruction::GATHER_PARAMS);
    int64_t per_rank = 0;
    int ranks = 1;
    for (int u : units) {
      const proto::PartitionUnit& unit = plan_->partition().units(u);
      if (unit.persistent() || unit.expert() != expert) continue;
      in.add_units(u);
      per_rank += unit.chunk();
      ranks = UnitRanks(*plan_, unit);
    }
    if (in.units_size() == 0) continue;
    in.mutable_collective()->set_placement(ranks == 1 ? proto::LOCAL : proto::HOST);
    in.mutable_collective()->set_group(expert ? edp_group_ : "");
    const size_t ts = DTypeSize(host_->dtype());
    std::vector<char> stage_in(std::max<int64_t>(1, per_rank) * ts),
        stage_out(std::max<int64_t>(1, per_rank * ranks) * ts);
    CollectiveJob job;
    DS_RETURN_IF_ERROR(
        Start(in, host_.get(), parts_.host_comm, stage_in.data(), stage_out.data(), &job));
    DS_RETURN_IF_ERROR(CollectiveQueue().Track(0, /*async=*/false, std::move(job)));
  }
  return OkStatus();
}

bool ZeroCollectives::IsExpertGroup(const std::string& group) const {
  return !edp_group_.empty() && group == edp_group_;
}

void ZeroCollectives::ReleaseAll() {
  if (!parts_.params->params_partitioned()) return;
  for (const proto::PartitionUnit& u : plan_->partition().units())
    if (!u.persistent()) parts_.params->ReleaseModel(u.offset(), u.count());
}

void ZeroCollectives::ReleaseParamUnits(const std::vector<int>& units) {
  if (!parts_.params->params_partitioned()) return;
  for (int u : units) {
    const proto::PartitionUnit& unit = plan_->partition().units(u);
    if (!unit.persistent()) parts_.params->ReleaseModel(unit.offset(), unit.count());
  }
}

}  // namespace ds::zero
