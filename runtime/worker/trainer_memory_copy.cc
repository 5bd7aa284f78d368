// Trainer's in-memory copies (fault_tolerance.in_memory_interval): this rank's model states as one
// byte string at a step boundary, and back. See Note [In-memory copies].
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/json.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer.h"

namespace ds::worker {

// Note [In-memory copies]
// A copy holds what this rank's buffers hold, byte for byte: the fp32 master (its shard, or all
// of it where every rank holds it), each optimizer state's shard, the parts of the 16-bit model
// copy its own master does not give back (stages 1-2 in mixed precision: the other ranks' parts,
// which the step's last all-gather wrote; stage 3: the persistent units), and the step, the
// optimizer's step, the loss scaler and the data loader's position (the random streams are
// functions of the seed and the step). Put back into the same plan (the header names the plan's
// hash, the rank and the world size) it gives the rank the state it had, bit for bit, reading no
// other rank's copy and no file. Unlike a checkpoint it does not cross layouts; the planner
// refuses it with NVMe-swapped states, whose bytes are not in memory to copy.
//
// Layout: "DSMEMCP1", the header's length (8 bytes, little-endian), the header (JSON: rank,
// world, step, optimizer_step, plan, scaler, data, sections [{name, bytes}]), the sections.
namespace {

constexpr char kMagic[8] = {'D', 'S', 'M', 'E', 'M', 'C', 'P', '1'};

struct Section {
  std::string name;
  char* data;
  int64_t bytes;
};

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
  if (!model_separate || !params.master_sharded()) return out;
  const int64_t width = static_cast<int64_t>(DTypeSize(params.model_dtype()));
  char* model = static_cast<char*>(params.model());
  if (!params.params_partitioned()) {
    out.push_back({"model", model, params.total_elements() * width});
    return out;
  }
  for (const proto::PartitionUnit& u : plan.partition().units())
    if (u.persistent())
      out.push_back(
          {"model/" + std::to_string(u.offset()), model + u.offset() * width, u.count() * width});
  return out;
}

// A copy's header, checked against this rank, and its sections' place in the blob.
struct ParsedCopy {
  int64_t step = 0, optimizer_step = 0;
  std::string scaler;
  data::DataLoaderState data;
  std::vector<std::pair<int64_t, int64_t>> spans;  // (offset in the blob, bytes) per section
};

StatusOr<ParsedCopy> ParseCopy(const std::string& blob, const std::vector<Section>& want, int rank,
                               int world, const std::string& plan) {
  const std::string what = "in-memory copy of rank " + std::to_string(rank);
  uint64_t header_len = 0;
  if (blob.size() < 16 || std::memcmp(blob.data(), kMagic, 8) != 0)
    return DataLossError(what + ": not a copy (" + std::to_string(blob.size()) + " bytes)");
  std::memcpy(&header_len, blob.data() + 8, 8);
  if (header_len > blob.size() - 16) return DataLossError(what + ": header runs past the end");
  DS_ASSIGN_OR_RETURN(Json h, ParseJson(std::string_view(blob.data() + 16, header_len)));
  const Json* sections = h.Find("sections");
  if (!h.Find("rank") || !h.Find("world") || !h.Find("plan") || !sections || !h.Find("step"))
    return DataLossError(what + ": header is malformed");
  if (h.Find("rank")->as_int() != rank || h.Find("world")->as_int() != world ||
      h.Find("plan")->as_string() != plan)
    return FailedPreconditionError(
        what + ": made by rank " + std::to_string(h.Find("rank")->as_int()) + " of " +
        std::to_string(h.Find("world")->as_int()) + " under plan " + h.Find("plan")->as_string() +
        ", this is rank " + std::to_string(rank) + " of " + std::to_string(world) + " under " +
        plan);
  if (sections->items().size() != want.size())
    return DataLossError(what + ": " + std::to_string(sections->items().size()) +
                         " sections, this rank has " + std::to_string(want.size()));
  ParsedCopy p;
  int64_t at = 16 + static_cast<int64_t>(header_len);
  for (size_t i = 0; i < want.size(); ++i) {
    const Json& s = sections->items()[i];
    const int64_t bytes = s.Find("bytes") ? s.Find("bytes")->as_int() : -1;
    if (!s.Find("name") || s.Find("name")->as_string() != want[i].name || bytes != want[i].bytes)
      return DataLossError(what + ": section " + std::to_string(i) + " is not " + want[i].name +
                           " of " + std::to_string(want[i].bytes) + " bytes");
    p.spans.push_back({at, bytes});
    at += bytes;
  }
  if (at != static_cast<int64_t>(blob.size()))
    return DataLossError(what + ": " + std::to_string(blob.size()) + " bytes, the header says " +
                         std::to_string(at));
  p.step = h.Find("step")->as_int();
  p.optimizer_step = h.Find("optimizer_step") ? h.Find("optimizer_step")->as_int() : 0;
  p.scaler = h.Find("scaler") ? h.Find("scaler")->as_string() : "";
  if (const Json* d = h.Find("data"); d && !d->as_string().empty()) {
    auto ds = data::DataLoaderState::FromJson(d->as_string());
    if (!ds.ok()) return ds.status().WithPrefix(what + ": data state");
    p.data = *ds;
  }
  return p;
}

}  // namespace

Status Trainer::SnapshotState(std::string* out) {
  if (swapper_)
    return FailedPreconditionError("an in-memory copy of NVMe-swapped states: not supported");
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  const std::vector<Section> sections = CopySections(*params_, *optimizer_, *plan_);
  Json h = Json::Object();
  h.Set("rank", Json::Int(world_rank_));
  h.Set("world", Json::Int(world_host_comm_->size()));
  h.Set("step", Json::Int(step_));
  h.Set("optimizer_step", Json::Int(optimizer_->step()));
  h.Set("plan", Json::String(plan::HashHex(plan_->hash())));
  h.Set("scaler", Json::String(scaler_->SaveState()));
  h.Set("data", Json::String(train_data_ ? train_data_->state().ToJson() : ""));
  Json list = Json::Array();
  int64_t total = 0;
  for (const Section& s : sections) {
    Json e = Json::Object();
    e.Set("name", Json::String(s.name));
    e.Set("bytes", Json::Int(s.bytes));
    list.Append(std::move(e));
    total += s.bytes;
  }
  h.Set("sections", std::move(list));
  const std::string header = h.Dump();
  const uint64_t header_len = header.size();
  out->resize(16 + header.size() + static_cast<size_t>(total));
  char* p = out->data();
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, &header_len, 8);
  std::memcpy(p + 16, header.data(), header.size());
  p += 16 + header.size();
  for (const Section& s : sections) {
    std::memcpy(p, s.data, static_cast<size_t>(s.bytes));
    p += s.bytes;
  }
  if (device_states_) device_states_->ReleaseHostCopies();
  return OkStatus();
}

// Every rank checks its copy, then all vote: one bad or missing copy and no rank changes anything.
Status Trainer::RestoreState(const StatusOr<std::string>& copy) {
  const std::vector<Section> sections = CopySections(*params_, *optimizer_, *plan_);
  StatusOr<ParsedCopy> parsed = copy.status();
  if (copy.ok())
    parsed = ParseCopy(*copy, sections, world_rank_, world_host_comm_->size(),
                       plan::HashHex(plan_->hash()));
  Status verified = parsed.status();
  const std::string old_scaler = scaler_->SaveState();
  const data::DataLoaderState old_data =
      train_data_ ? train_data_->state() : data::DataLoaderState();
  if (verified.ok()) verified = scaler_->LoadState(parsed->scaler);
  if (verified.ok() && train_data_) verified = train_data_->SetState(parsed->data);
  if (!verified.ok()) DS_LOG_ERROR("memory", "rank {}: {}", world_rank_, verified.ToString());
  DS_ASSIGN_OR_RETURN(bool failed, AnyRank(world_host_comm_, !verified.ok()));
  if (failed) {
    scaler_->LoadState(old_scaler).IgnoreError();
    if (train_data_) train_data_->SetState(old_data).IgnoreError();
    if (!verified.ok()) return verified;
    return DataLossError("another rank's in-memory copy is missing or unusable (its log says why)");
  }
  for (size_t i = 0; i < sections.size(); ++i)
    std::memcpy(sections[i].data, copy->data() + parsed->spans[i].first,
                static_cast<size_t>(parsed->spans[i].second));
  params_->SyncModelFromMaster();
  runner_->ReleaseGatheredParams();
  params_->ZeroGrads();
  step_ = parsed->step;
  optimizer_->set_step(parsed->optimizer_step);
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Upload());
  return OkStatus();
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
