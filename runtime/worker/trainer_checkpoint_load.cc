// Trainer::LoadCheckpoint: a checkpoint (consolidated or per-rank shards, of any world size,
// tp, pp and ZeRO stage) read into this rank's buffers. See Note [Loading at any topology].
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/json.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/data/data_loader.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer.h"

namespace ds::worker {
namespace {

using FlatRanges = std::vector<std::pair<int64_t, int64_t>>;

// The parts of parameter `s` that the flat ranges `ranges` cut, parameter-local, in order.
// Not merged: each part stays inside one range (one segment, contiguous in shard space).
FlatRanges LocalRanges(const zero::ParamSlot& s, const FlatRanges& ranges) {
  FlatRanges out;
  for (const auto& [b, e] : ranges) {
    const int64_t lo = std::max(b, s.offset), hi = std::min(e, s.offset + s.numel);
    if (lo < hi) out.push_back({lo - s.offset, hi - s.offset});
  }
  std::sort(out.begin(), out.end());
  return out;
}

void StoreModel(void* model, DType dtype, int64_t at, const float* src, int64_t n) {
  switch (dtype) {
    case DType::kBF16:
      ConvertF32ToBf16(src, static_cast<uint16_t*>(model) + at, n);
      break;
    case DType::kF16:
      ConvertF32ToF16(src, static_cast<uint16_t*>(model) + at, n);
      break;
    default:
      std::memcpy(static_cast<float*>(model) + at, src, n * sizeof(float));
  }
}

// The flat ranges this rank loads. owned: the optimizer state's segments; master: the fp32
// master's (all of it unless sharded); model: the separate model copy's ranges it keeps (an
// unsharded master converts into the model copy in full, SyncModelFromMaster, so none then).
struct KeptFlat {
  FlatRanges owned, master, model;
};

KeptFlat RangesToLoad(const zero::ParamStore& params, const proto::Plan& plan) {
  KeptFlat k;
  for (const zero::ShardSegment& g : params.segments())
    k.owned.push_back({g.flat_begin, g.flat_begin + g.count});
  if (params.master_sharded())
    k.master = k.owned;
  else
    k.master.push_back({0, params.total_elements()});
  const bool model_separate = params.model() != static_cast<void*>(params.master_data());
  if (model_separate && params.master_sharded()) {
    if (params.params_partitioned()) {
      for (const proto::PartitionUnit& u : plan.partition().units())
        if (u.persistent()) k.model.push_back({u.offset(), u.offset() + u.count()});
    } else {
      k.model.push_back({0, params.total_elements()});
    }
  }
  return k;
}

// Phase 1 (verify) and phase 2 (commit) over every range this rank keeps, parameter by
// parameter: the master's and each optimizer state's parts straight into their buffers, the
// model copy's through a scratch. With tensor parallelism, local elements are read as the
// pieces of the full parameter they are (parallel::LocalToFull).
class RangeLoader {
 public:
  RangeLoader(ckpt::CheckpointReader* reader, zero::ParamStore* params,
              std::vector<zero::Optimizer::StateBuffer> buffers,
              const parallel::TpLocalGraph* sliced, KeptFlat kept)
      : reader_(reader),
        params_(params),
        buffers_(std::move(buffers)),
        sliced_(sliced),
        kept_(std::move(kept)) {
    for (const auto& [name, shape] : reader->params()) shapes_[name] = &shape;
  }

  Status Visit(bool commit) {
    for (size_t i = 0; i < params_->slots().size(); ++i) {
      const zero::ParamSlot& s = params_->slots()[i];
      DS_RETURN_IF_ERROR(CheckShape(i));
      for (const auto& [lo, hi] : LocalRanges(s, kept_.master))
        DS_RETURN_IF_ERROR(
            Read(commit, ckpt::kMasterState, i, lo, hi, params_->MasterAt(s.offset + lo)));
      for (const auto& [lo, hi] : LocalRanges(s, kept_.owned))
        for (const zero::Optimizer::StateBuffer& b : buffers_)
          DS_RETURN_IF_ERROR(
              Read(commit, b.name, i, lo, hi, b.data + params_->ShardPos(s.offset + lo)));
      for (const auto& [lo, hi] : LocalRanges(s, kept_.model)) {
        scratch_.resize(hi - lo);
        DS_RETURN_IF_ERROR(Read(commit, ckpt::kMasterState, i, lo, hi, scratch_.data()));
        if (commit)
          StoreModel(params_->model(), params_->model_dtype(), s.offset + lo, scratch_.data(),
                     hi - lo);
      }
    }
    return OkStatus();
  }

 private:
  // Slot i's parameter is in the checkpoint with the whole parameter's shape.
  Status CheckShape(size_t i) const {
    const zero::ParamSlot& s = params_->slots()[i];
    auto found = shapes_.find(s.name);
    const Shape want =
        sliced_ ? Shape(sliced_->shards[i].full_shape.begin(), sliced_->shards[i].full_shape.end())
                : s.shape;
    if (found == shapes_.end())
      return DataLossError(reader_->dir() + ": parameter \"" + s.name + "\" is missing");
    if (*found->second != want)
      return DataLossError(reader_->dir() + ": parameter \"" + s.name + "\" has shape " +
                           ShapeToString(*found->second) + ", the model expects " +
                           ShapeToString(want));
    return OkStatus();
  }

  // Reads (or verifies) local elements [lo, hi) of slot i's `state` into `dst`.
  Status Read(bool commit, const std::string& state, size_t i, int64_t lo, int64_t hi, float* dst) {
    const std::string& name = params_->slots()[i].name;
    if (!sliced_)
      return commit ? reader_->Read(state, name, lo, hi, dst)
                    : reader_->Verify(state, name, lo, hi);
    for (const parallel::FlatPiece& p : parallel::LocalToFull(sliced_->shards[i], lo, hi)) {
      const int64_t b = p.full, e = p.full + p.count;
      DS_RETURN_IF_ERROR(commit ? reader_->Read(state, name, b, e, dst + (p.local - lo))
                                : reader_->Verify(state, name, b, e));
    }
    return OkStatus();
  }

  ckpt::CheckpointReader* reader_;
  zero::ParamStore* params_;
  const std::vector<zero::Optimizer::StateBuffer> buffers_;
  const parallel::TpLocalGraph* sliced_;
  const KeptFlat kept_;
  std::map<std::string, const Shape*> shapes_;
  std::vector<float> scratch_;
};

// The engine, loss-scaler and data states of the checkpoint, parsed (applied after the vote).
struct ResumeStates {
  int64_t step = 0, optimizer_step = 0;
  std::string scaler;
  data::DataLoaderState data;
};

StatusOr<ResumeStates> ParseResumeStates(const ckpt::CheckpointReader& reader) {
  auto state = [&](const char* key) -> StatusOr<std::string> {
    auto it = reader.state().find(key);
    if (it == reader.state().end())
      return DataLossError(reader.dir() + ": state \"" + std::string(key) + "\" is missing");
    return it->second;
  };
  ResumeStates r;
  DS_ASSIGN_OR_RETURN(std::string engine_text, state("engine"));
  auto engine = ParseJson(engine_text);
  if (!engine.ok() || !engine->Find("step") || !engine->Find("optimizer_step"))
    return DataLossError(reader.dir() + ": engine state is malformed");
  r.step = engine->Find("step")->as_int();
  r.optimizer_step = engine->Find("optimizer_step")->as_int();
  DS_ASSIGN_OR_RETURN(r.scaler, state("loss_scaler"));
  DS_ASSIGN_OR_RETURN(std::string data, state("data"));
  auto ds = data::DataLoaderState::FromJson(data);
  if (!ds.ok()) return ds.status().WithPrefix(reader.dir() + ": data state");
  r.data = *ds;
  return r;
}

}  // namespace

// Note [Loading at any topology]
// Every rank reads, for each parameter, only what it keeps: the parts of its own segments of
// the fp32 master and of each optimizer state (read straight into its shard buffers), and
// the parameter values its flat model copy holds (stages 0-2: all of them; stage 3: the
// persistent units), one parameter at a time through a scratch buffer. The reader picks the
// slices from whichever files hold them (CheckpointReader), so the saving world size and
// stage do not matter. Two phases keep a bad checkpoint from being half-used:
//   1. verify: the index (gaps, overlaps, shapes), every slice this rank will read (header,
//      metadata, CRC), and a share of whole files (file i on rank i mod W, so every byte of
//      the checkpoint is checked once), plus the engine, scaler and data states;
//   2. an all-reduce of "failed" decides for all ranks; only then are buffers written.
// A failed load leaves weights and optimizer state untouched on every rank.
Status Trainer::LoadCheckpoint(const std::string& path) {
  StatusOr<ckpt::CheckpointReader> opened = ckpt::CheckpointReader::Open(path);
  Status verified = opened.status();
  ckpt::CheckpointReader* reader = opened.ok() ? &opened.value() : nullptr;
  std::unique_ptr<RangeLoader> loader;
  if (reader)
    loader = std::make_unique<RangeLoader>(reader, params_.get(), optimizer_->state(),
                                           part_->sliced, RangesToLoad(*params_, *plan_));
  auto visit = [&](bool commit) -> Status {
    DS_RETURN_IF_ERROR(loader->Visit(commit));
    return VisitFrozen(reader, commit);
  };
  if (verified.ok()) verified = visit(false);
  // A share of whole files: together the ranks read every byte once.
  if (verified.ok()) {
    const auto& files = reader->manifest().files;
    for (size_t i = world_rank_; i < files.size() && verified.ok(); i += world_host_comm_->size())
      verified = reader->VerifyFile(files[i]);
  }
  ResumeStates resume;
  if (verified.ok()) {
    StatusOr<ResumeStates> parsed = ParseResumeStates(*reader);
    verified = parsed.status();
    if (parsed.ok()) resume = *std::move(parsed);
  }
  // Scaler and data loader validate while they load: keep their old states to roll back.
  const std::string old_scaler = scaler_->SaveState();
  // Without data.train the caller's batch source keeps its own position.
  const data::DataLoaderState old_data = train_data_ ? train_data_->state() : resume.data;
  if (verified.ok()) verified = scaler_->LoadState(resume.scaler).WithPrefix(reader->dir());
  if (verified.ok() && train_data_)
    verified = train_data_->SetState(resume.data).WithPrefix(reader->dir() + ": data state");
  if (!verified.ok()) DS_LOG_ERROR("ckpt", "rank {}: {}", world_rank_, verified.ToString());
  DS_ASSIGN_OR_RETURN(bool failed, AnyRank(world_host_comm_, !verified.ok()));
  if (failed) {
    scaler_->LoadState(old_scaler).IgnoreError();
    if (train_data_) train_data_->SetState(old_data).IgnoreError();
    if (!verified.ok()) return verified;
    return DataLossError(path + ": checkpoint rejected by another rank (its log names the file)");
  }
  // Phase 2: every rank verified its part; reads now come from verified, mapped slices.
  DS_RETURN_IF_ERROR(visit(true));
  params_->SyncModelFromMaster();  // the 16-bit copy of owned elements (shard at stage 3)
  runner_->ReleaseGatheredParams();
  params_->ZeroGrads();
  step_ = resume.step;
  optimizer_->set_step(resume.optimizer_step);
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Upload());
  DS_LOG_INFO("ckpt", "loaded {} (step {}, {})", reader->dir(), step_,
              reader->sharded() ? "from " + reader->manifest().info.at("world_size") + " rank files"
                                : std::string("consolidated"));
  return OkStatus();
}

}  // namespace ds::worker
