// Trainer's in-memory copies (fault_tolerance.in_memory_interval): this rank's model states as one
// byte string at a step boundary, and back. See Note [In-memory copies].
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/worker/memory_copy_format.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer.h"

namespace ds::worker {

// Note [In-memory copies]
// A copy holds what this rank's buffers hold, byte for byte: the fp32 master (its shard, or all
// of it where every rank holds it), each optimizer state's shard, stage 3's persistent units of
// the 16-bit model copy (its own master does not give them back and no step gathers them), and
// the step, the optimizer's step, the loss scaler and the data loader's position (the random
// streams are functions of the seed and the step). At stages 1-2 in mixed precision the other
// ranks' parts of the 16-bit copy are their masters rounded: the restored ranks run the step's
// all-gather of them (StepRunner::GatherUpdatedParams) instead of carrying them, a third of a
// copy under Adam. Put back into the same plan (the header names the plan's hash, the rank and
// the world size) it gives the rank the state it had, bit for bit, reading no other rank's copy
// and no file. When an elastic job lost a node, every new rank cuts its part out of all the old
// ranks' copies instead, from the segments their headers name (Trainer::RestoreResharded). The
// config refuses copies of NVMe-swapped states, whose bytes are not in memory. The layout:
// memory_copy_format.h.
namespace {

using Section = CopySection;

// Whether the restored rank rebuilds the 16-bit parameters its master does not give back with
// the step's own all-gather (stages 1-2, mixed precision: they are the other ranks' masters,
// rounded, so the copy need not hold them: a third of a copy under Adam) rather than from the
// copy (stage 3's persistent units, which no step gathers).
bool ModelFromGather(const zero::ParamStore& params) {
  const bool model_separate = params.model() != static_cast<const void*>(params.master_data());
  return model_separate && params.master_sharded() && !params.params_partitioned();
}

// The model part `rank` runs apart from data parallelism: its tensor slice and pipeline stage
// (sequence-parallel ranks are data-parallel ranks of one flat space; expert parallelism is not
// cut, RestoreResharded).
std::string ModelPart(const proto::Plan& plan, int rank) {
  for (const proto::RankPlan& r : plan.ranks()) {
    if (r.rank() != rank) continue;
    const proto::RankCut& c = r.cut();
    return "tp " + std::to_string(std::max(1, c.tp())) + ":" + std::to_string(c.tp_rank()) +
           " pp " + std::to_string(std::max(1, c.pp())) + ":" + std::to_string(c.stage());
  }
  return "";
}

// The byte ranges of this rank's buffers a copy holds, in a fixed order.
std::vector<Section> CopySections(zero::ParamStore& params, zero::Optimizer& optimizer,
                                  const proto::Plan& plan) {
  std::vector<Section> out;
  const int64_t master =
      params.master_sharded() ? params.shard_elements() : params.total_elements();
  out.push_back({"master", reinterpret_cast<char*>(params.master_data()),
                 master * static_cast<int64_t>(sizeof(float))});
  for (const zero::Optimizer::StateBuffer& b : optimizer.state())
    out.push_back({"optimizer/" + b.name, reinterpret_cast<char*>(b.data),
                   params.shard_elements() * static_cast<int64_t>(sizeof(float))});
  const bool model_separate = params.model() != static_cast<void*>(params.master_data());
  if (!model_separate || !params.master_sharded() || ModelFromGather(params)) return out;
  const int64_t width = static_cast<int64_t>(DTypeSize(params.model_dtype()));
  char* model = static_cast<char*>(params.model());
  for (const proto::PartitionUnit& u : plan.partition().units())
    if (u.persistent())
      out.push_back(
          {"model/" + std::to_string(u.offset()), model + u.offset() * width, u.count() * width});
  return out;
}

// A copy of this rank at this plan: whose it is, then section by section.
Status CheckOwnCopy(const ParsedCopy& p, const std::vector<Section>& want, int rank, int world,
                    const std::string& plan) {
  const std::string what = "in-memory copy of rank " + std::to_string(rank);
  const CopyHeader& h = p.header;
  if (h.rank != rank || h.world != world || h.plan != plan)
    return FailedPreconditionError(what + ": made by rank " + std::to_string(h.rank) + " of " +
                                   std::to_string(h.world) + " under plan " + h.plan +
                                   ", this is rank " + std::to_string(rank) + " of " +
                                   std::to_string(world) + " under " + plan);
  if (p.sections.size() != want.size())
    return DataLossError(what + ": " + std::to_string(p.sections.size()) +
                         " sections, this rank has " + std::to_string(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    if (p.sections[i].name != want[i].name || p.sections[i].bytes != want[i].bytes)
      return DataLossError(what + ": section " + std::to_string(i) + " is not " + want[i].name +
                           " of " + std::to_string(want[i].bytes) + " bytes");
  return OkStatus();
}

}  // namespace

// The copy's header at the current step (after Download when the states live on a device).
Status Trainer::MakeCopyHeader(CopyHeader* h) {
  if (swapper_)
    return FailedPreconditionError("an in-memory copy of NVMe-swapped states: not supported");
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  h->rank = world_rank_;
  h->world = world_host_comm_->size();
  h->step = step_;
  h->optimizer_step = optimizer_->step();
  h->plan = plan::HashHex(plan_->hash());
  h->scaler = scaler_->SaveState();
  h->data = train_data_ ? train_data_->state().ToJson() : "";
  h->total = params_->total_elements();
  h->layout = ParameterLayoutHash(*params_);
  h->master_whole = !params_->master_sharded();
  h->part = ModelPart(*plan_, world_rank_);
  h->segments = params_->segments();
  return OkStatus();
}

// Both restores' end: the copy's scaler and data position loaded (kept to roll back), the ranks'
// vote, then `from` (one source per section of `mine`) into the buffers and the step set.
Status Trainer::ApplyCopy(Status verified, const CopyHeader& h,
                          const std::vector<CopySection>& mine,
                          const std::vector<const char*>& from, const std::string& peer_error) {
  data::DataLoaderState data;
  if (verified.ok() && !h.data.empty()) {
    auto ds = data::DataLoaderState::FromJson(h.data);
    verified = ds.status().WithPrefix("in-memory copy's data state");
    if (ds.ok()) data = *ds;
  }
  const std::string old_scaler = scaler_->SaveState();
  const data::DataLoaderState old_data =
      train_data_ ? train_data_->state() : data::DataLoaderState();
  if (verified.ok()) verified = scaler_->LoadState(h.scaler);
  if (verified.ok() && train_data_) verified = train_data_->SetState(data);
  if (!verified.ok()) DS_LOG_ERROR("memory", "rank {}: {}", world_rank_, verified.ToString());
  DS_ASSIGN_OR_RETURN(bool failed, AnyRank(world_host_comm_, !verified.ok()));
  if (failed) {
    scaler_->LoadState(old_scaler).IgnoreError();
    if (train_data_) train_data_->SetState(old_data).IgnoreError();
    return verified.ok() ? DataLossError(peer_error) : verified;
  }
  for (size_t i = 0; i < mine.size(); ++i)
    std::memcpy(mine[i].data, from[i], static_cast<size_t>(mine[i].bytes));
  params_->SyncModelFromMaster();
  runner_->ReleaseGatheredParams();
  params_->ZeroGrads();
  step_ = h.step;
  optimizer_->set_step(h.optimizer_step);
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Upload());
  // The other ranks' parts of the 16-bit parameters, as the step's last all-gather gives them.
  if (ModelFromGather(*params_)) DS_RETURN_IF_ERROR(runner_->GatherUpdatedParams());
  return OkStatus();
}

Status Trainer::SnapshotState(std::string* out) {
  CopyHeader h;
  DS_RETURN_IF_ERROR(MakeCopyHeader(&h));
  WriteCopy(h, CopySections(*params_, *optimizer_, *plan_), out);
  if (device_states_) device_states_->ReleaseHostCopies();
  return OkStatus();
}

Status Trainer::SnapshotTo(int fd, uint32_t* crc) {
  CopyHeader h;
  DS_RETURN_IF_ERROR(MakeCopyHeader(&h));
  Status written = WriteCopyTo(h, CopySections(*params_, *optimizer_, *plan_), fd, crc);
  if (device_states_) device_states_->ReleaseHostCopies();
  return written;
}

// Every rank checks its copy, then all vote: one bad or missing copy and no rank changes anything.
Status Trainer::RestoreState(const StatusOr<std::string>& copy) {
  const std::vector<Section> sections = CopySections(*params_, *optimizer_, *plan_);
  const std::string what = "in-memory copy of rank " + std::to_string(world_rank_);
  StatusOr<ParsedCopy> parsed = copy.status();
  if (copy.ok()) parsed = ParseCopy(*copy, what);
  Status verified = parsed.status();
  if (verified.ok())
    verified = CheckOwnCopy(*parsed, sections, world_rank_, world_host_comm_->size(),
                            plan::HashHex(plan_->hash()));
  std::vector<const char*> from;
  if (verified.ok())
    for (const Section& p : parsed->sections) from.push_back(p.data);
  return ApplyCopy(verified, verified.ok() ? parsed->header : CopyHeader(), sections, from,
                   "another rank's in-memory copy is missing or unusable (its log says why)");
}

namespace {

// Copies flat elements [begin, begin + count) of an old rank's fp32 section (`whole`: indexed by
// flat element; else its segments, in shard space) to `dst`; returns how many it held.
int64_t CopyFlat(const CopyHeader& old, bool whole, const char* src, int64_t begin, int64_t count,
                 char* dst) {
  constexpr int64_t w = sizeof(float);
  if (whole) {
    std::memcpy(dst, src + begin * w, static_cast<size_t>(count * w));
    return count;
  }
  int64_t n = 0;
  for (const zero::ShardSegment& o : old.segments) {
    const int64_t lo = std::max(begin, o.flat_begin);
    const int64_t hi = std::min(begin + count, o.flat_begin + o.count);
    if (lo >= hi) continue;
    std::memcpy(dst + (lo - begin) * w, src + (o.shard_offset + lo - o.flat_begin) * w,
                static_cast<size_t>((hi - lo) * w));
    n += hi - lo;
  }
  return n;
}

const CopySection* FindSection(const ParsedCopy& p, const std::string& name) {
  for (const CopySection& s : p.sections)
    if (s.name == name) return &s;
  return nullptr;
}

// Stage 3's persistent units ("model/OFFSET"): every copy of the model part holds them whole.
bool WholeInEveryCopy(const std::string& section) { return section.rfind("model/", 0) == 0; }

// What this rank owns of one old copy (of its model part) into `scratch`; `covered` counts the
// elements (bytes, for whole sections) taken per section, `whole_done` the sections complete.
Status CutOne(const ParsedCopy& old, const std::string& what, const std::vector<CopySection>& mine,
              const zero::ParamStore& params, std::vector<std::string>* scratch,
              std::vector<int64_t>* covered, std::vector<bool>* whole_done) {
  const CopyHeader& h = old.header;
  // Stage 0: the old rank owned every element (one segment from 0), like a whole master.
  const bool owned_all = h.segments.size() == 1 && h.segments[0].flat_begin == 0 &&
                         h.segments[0].shard_offset == 0 && h.segments[0].count == h.total;
  for (size_t i = 0; i < mine.size(); ++i) {
    const CopySection& m = mine[i];
    const CopySection* src = FindSection(old, m.name);
    if (!src) return DataLossError(what + ": no section " + m.name);
    char* dst = (*scratch)[i].data();
    if (WholeInEveryCopy(m.name)) {
      if ((*whole_done)[i] || src->bytes != m.bytes) continue;
      std::memcpy(dst, src->data, static_cast<size_t>(m.bytes));
      (*covered)[i] = m.bytes, (*whole_done)[i] = true;
      continue;
    }
    const bool src_whole = owned_all || (m.name == "master" && h.master_whole);
    if (src_whole && (*whole_done)[i]) continue;
    if (m.name == "master" && !params.master_sharded()) {  // this rank keeps all of it
      (*covered)[i] += CopyFlat(h, src_whole, src->data, 0, params.total_elements(), dst);
    } else {
      for (const zero::ShardSegment& g : params.segments())
        (*covered)[i] += CopyFlat(h, src_whole, src->data, g.flat_begin, g.count,
                                  dst + g.shard_offset * int64_t{sizeof(float)});
    }
    (*whole_done)[i] = (*whole_done)[i] || src_whole;
  }
  return OkStatus();
}

// This rank's sections cut out of the old ranks' copies of its model part (`part`: the same
// tensor slice and pipeline stage), into `scratch` (one string per section of `mine`); the first
// such copy's header into `first`. Every element must come from exactly the old copies that own
// it: the counts are checked.
Status CutCopies(const std::vector<CopySection>& mine, const zero::ParamStore& params,
                 const std::string& part, int old_world, const Trainer::CopyFetch& fetch,
                 std::vector<std::string>* scratch, CopyHeader* first) {
  int64_t owned = 0;
  for (const zero::ShardSegment& g : params.segments()) owned += g.count;
  std::vector<int64_t> covered(mine.size(), 0);
  std::vector<bool> whole_done(mine.size(), false);  // a whole section was copied already
  bool any = false;
  int64_t step = -1;  // old rank 0's: every copy must be of it
  for (int r = 0; r < old_world; ++r) {
    const std::string what = "in-memory copy of old rank " + std::to_string(r);
    DS_ASSIGN_OR_RETURN(std::string blob, fetch(r));
    DS_ASSIGN_OR_RETURN(ParsedCopy old, ParseCopy(blob, what));
    const CopyHeader& h = old.header;
    if (r == 0) step = h.step;
    if (h.rank != r || h.world != old_world || h.step != step)
      return FailedPreconditionError(what + ": rank " + std::to_string(h.rank) + " of " +
                                     std::to_string(h.world) + " at step " +
                                     std::to_string(h.step) + ", not of this cut");
    if (h.part != part) continue;  // another tensor slice or pipeline stage
    if (!any) *first = h, any = true;
    if (h.total != params.total_elements() || h.layout != ParameterLayoutHash(params))
      return FailedPreconditionError(what + ": another parameter layout (" +
                                     std::to_string(h.total) + " elements)");
    DS_RETURN_IF_ERROR(CutOne(old, what, mine, params, scratch, &covered, &whole_done));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    const bool whole = WholeInEveryCopy(mine[i].name);
    const int64_t want = whole ? mine[i].bytes
                         : mine[i].name == "master" && !params.master_sharded()
                             ? params.total_elements()
                             : owned;
    if (covered[i] != want)
      return DataLossError("the old ranks' copies of " + part + " hold " +
                           std::to_string(covered[i]) + " of the " + std::to_string(want) + " " +
                           (whole ? "bytes" : "elements") + " of this rank's " + mine[i].name);
  }
  return OkStatus();
}

}  // namespace

// An elastic job changed size: this rank's part is cut out of the old copies of its tensor slice
// and pipeline stage (each such group of ranks shares one flat space, split over its dp ranks)
// into scratch buffers, the ranks vote, and only then are the buffers written. ZeRO 0-3, with
// tensor and pipeline parallelism of the same degrees; not expert parallelism, whose experts'
// groups change with dp.
Status Trainer::RestoreResharded(int old_world, const CopyFetch& fetch) {
  const std::vector<Section> mine = CopySections(*params_, *optimizer_, *plan_);
  std::vector<std::string> scratch;
  for (const Section& m : mine) scratch.emplace_back(static_cast<size_t>(m.bytes), '\0');
  CopyHeader first;
  Status verified;
  if (plan_->topology().ep() > 1)
    verified = FailedPreconditionError(
        "cutting in-memory copies for another world size under expert parallelism: not supported "
        "(the experts' data-parallel groups change with the world)");
  if (verified.ok())
    verified = CutCopies(mine, *params_, ModelPart(*plan_, world_rank_), old_world, fetch, &scratch,
                         &first);
  std::vector<const char*> from;
  for (const std::string& b : scratch) from.push_back(b.data());
  return ApplyCopy(verified, first, mine, from,
                   "another rank could not cut its part of the copies (its log says why)");
}

Status Trainer::InitializeFromCopy(const StatusOr<std::string>& copy) {
  if (frozen_) DS_RETURN_IF_ERROR(InitializeWeights());
  return RestoreState(copy);
}

int64_t Trainer::CopyBytes() const {
  int64_t total = 0;
  for (const Section& s : CopySections(*params_, *optimizer_, *plan_)) total += s.bytes;
  return total;
}

}  // namespace ds::worker
