// Trainer checkpoints: what a resume needs to continue the exact same run.
//
//   model.safetensors      fp32 master weights, graph parameter names
//   optimizer.safetensors  exp_avg/<name>, exp_avg_sq/<name> (Adam) or momentum_buffer/<name>
//   state.json             engine (step, seed, precision), scheduler, loss_scaler, data, rng
//
// In mixed precision the 16-bit model copy is the rounded master, so it is rebuilt on load
// instead of stored. With ZeRO (stage >= 1, dp > 1) every rank owns a shard of the optimizer
// state: saving all-gathers the shards so rank 0 writes one consolidated checkpoint, and
// loading takes each rank's slice of it, so a checkpoint saved at any world size and stage
// loads at any other (the step plan of the new topology decides the new shards). Gradients are zero between steps and are not saved. Dropout streams
// are a pure function of (seed, step, micro-batch, node): the RNG state is the seed and step.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "parallel/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/json.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/data/data_loader.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/optimizer.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"

namespace ds {
namespace {

using ckpt::Json;

std::string EngineState(int64_t step, int64_t opt_step, uint64_t seed, DType dtype) {
  Json j = Json::Object();
  j.Set("step", Json::Int(step));
  j.Set("optimizer_step", Json::Int(opt_step));
  j.Set("seed", Json::Int(static_cast<int64_t>(seed)));
  j.Set("precision", Json::String(DTypeName(dtype)));
  return j.Dump();
}

// Copies a checkpoint tensor into an fp32 destination of the same shape.
Status CopyInto(const Tensor& src, const Tensor& dst, const std::string& what) {
  if (src.shape() != dst.shape())
    return DataLossError(what + " has shape " + ShapeToString(src.shape()) + ", the model expects " +
                         ShapeToString(dst.shape()));
  const int64_t n = dst.numel();
  switch (src.dtype()) {
    case DType::kF32: std::memcpy(dst.f32(), src.data(), n * 4); break;
    case DType::kBF16: ConvertBf16ToF32(static_cast<const uint16_t*>(src.data()), dst.f32(), n); break;
    case DType::kF16: ConvertF16ToF32(static_cast<const uint16_t*>(src.data()), dst.f32(), n); break;
    default: return DataLossError(what + " has non-float dtype " + std::string(DTypeName(src.dtype())));
  }
  return OkStatus();
}

}  // namespace

Status Trainer::ExportWeights(const std::string& path) const {
  if (params_->master_sharded())
    return FailedPreconditionError("ExportWeights needs the whole master weights; with ZeRO use a "
                                   "checkpoint and ds-ckpt consolidate");
  std::vector<ckpt::NamedTensor> tensors;
  for (const ParamSlot& s : params_->slots()) tensors.push_back({s.name, params_->MasterView(s)});
  auto r = ckpt::WriteSafetensors(path, tensors, {{"format", "ds-runtime"}, {"family", graph_.family}});
  return r.status();
}

// The whole flat state of a buffer in shard space (optimizer state, sharded master): a copy
// when this rank owns everything, else every rank's shard all-gathered and laid out by each
// rank's segments (a collective: every rank must call it).
StatusOr<std::vector<float>> Trainer::GatherState(const float* shard) {
  const int64_t total = params_->total_elements();
  const int64_t n = params_->shard_elements();
  const auto& mine = params_->segments();
  if (mine.size() == 1 && mine[0].flat_begin == 0 && mine[0].count == total && n == total)
    return std::vector<float>(shard, shard + total);
  const int dp = comm_->size();
  std::vector<float> all(static_cast<size_t>(n) * dp);
  DS_RETURN_IF_ERROR(comm_->AllGather(parallel::BufferView(shard, n),
                                      parallel::BufferView(all.data(), n * dp)));
  std::vector<float> full(total, 0.0f);
  for (int k = 0; k < dp; ++k)
    for (const ShardSegment& g : StepRunner::LayoutFor(*plan_, k, total).segments)
      std::copy(all.begin() + k * n + g.shard_offset, all.begin() + k * n + g.shard_offset + g.count,
                full.begin() + g.flat_begin);
  return full;
}

Status Trainer::SaveCheckpoint() {
  // Every rank takes part in gathering sharded state; rank 0 writes.
  std::vector<std::pair<std::string, std::vector<float>>> states;
  for (const Optimizer::StateBuffer& b : optimizer_->state()) {
    DS_ASSIGN_OR_RETURN(std::vector<float> full, GatherState(b.data));
    states.emplace_back(b.name, std::move(full));
  }
  std::vector<float> master;  // the whole fp32 master when it is sharded
  if (params_->master_sharded()) {
    DS_ASSIGN_OR_RETURN(master, GatherState(params_->master_data()));
  }
  if (comm_->rank() != 0) return OkStatus();
  ckpt::CheckpointContents c;
  c.step = step_;
  for (const ParamSlot& s : params_->slots())
    c.model.push_back({s.name, master.empty() ? params_->MasterView(s)
                                              : Tensor(master.data() + s.offset, s.shape, DType::kF32)});
  for (auto& [name, full] : states)
    for (const ParamSlot& s : params_->slots())
      c.optimizer.push_back({name + "/" + s.name, Tensor(full.data() + s.offset, s.shape, DType::kF32)});
  c.state["engine"] = EngineState(step_, optimizer_->step(), config_.seed, params_->model_dtype());
  c.state["scheduler"] = "{\"last_batch_iteration\": " + std::to_string(step_ - 1) + "}";
  c.state["loss_scaler"] = scaler_->SaveState();
  c.state["data"] = train_data_->state().ToJson();
  c.state["rng"] = "{\"seed\": " + std::to_string(config_.seed) + ", \"next_step\": " + std::to_string(step_) + "}";
  c.info["family"] = graph_.family;
  c.info["graph"] = graph_.name;
  c.info["world_size"] = std::to_string(comm_->size());
  c.info["zero_stage"] = std::to_string(config_.zero.stage);
  c.info["precision"] = DTypeName(params_->model_dtype());
  const std::string& root = config_.checkpoint.dir;
  DS_RETURN_IF_ERROR(ckpt::SaveCheckpoint(root, c, config_.checkpoint.keep_last));
  DS_LOG_INFO("ckpt", "saved step {} to {}/{}", step_, root, ckpt::StepDirName(step_));
  return OkStatus();
}

Status Trainer::LoadWeights(const std::string& path) {
  DS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::Open(path));
  std::vector<float> full(params_->total_elements(), 0.0f);
  for (const ParamSlot& s : params_->slots()) {
    auto t = file.Get(s.name);
    if (!t.ok()) return DataLossError(path + ": tensor \"" + s.name + "\" is missing");
    DS_RETURN_IF_ERROR(CopyInto(*t, Tensor(full.data() + s.offset, s.shape, DType::kF32),
                                path + ": tensor \"" + s.name + "\""));
  }
  params_->SetFromFull(full.data());
  runner_->ReleaseGatheredParams();  // stage 3: only the persistent units stay
  if (file.tensors().size() != params_->slots().size())
    DS_LOG_WARN("worker", "{}: {} tensors in the file, the model uses {}; the rest are ignored", path,
                file.tensors().size(), params_->slots().size());
  DS_LOG_INFO("worker", "initialized weights from {}", path);
  return OkStatus();
}

bool HasLatestCheckpoint(const std::string& root) {
  return access((root + "/" + ckpt::kLatestFile).c_str(), R_OK) == 0;
}

Status Trainer::LoadCheckpoint(const std::string& path) {
  DS_ASSIGN_OR_RETURN(ckpt::LoadedCheckpoint ck, ckpt::LoadCheckpoint(path));
  const std::string where = ck.dir();
  std::vector<float> weights(params_->total_elements(), 0.0f);
  for (const ParamSlot& s : params_->slots()) {
    auto t = ck.ModelTensor(s.name);
    if (!t.ok()) return DataLossError(where + ": model tensor \"" + s.name + "\" is missing");
    DS_RETURN_IF_ERROR(CopyInto(*t, Tensor(weights.data() + s.offset, s.shape, DType::kF32),
                                where + ": tensor \"" + s.name + "\""));
  }
  // Each rank keeps its segments of the consolidated state, in its shard space.
  std::vector<float> full;
  for (const Optimizer::StateBuffer& b : optimizer_->state()) {
    for (const ParamSlot& s : params_->slots()) {
      bool loaded = false;
      for (const ShardSegment& g : params_->segments()) {
        const int64_t lo = std::max(g.flat_begin, s.offset);
        const int64_t hi = std::min(g.flat_begin + g.count, s.offset + s.numel);
        if (lo >= hi) continue;
        const std::string name = b.name + "/" + s.name;
        if (!loaded) {
          auto t = ck.OptimizerTensor(name);
          if (!t.ok()) return DataLossError(where + ": optimizer tensor \"" + name + "\" is missing");
          full.resize(s.numel);
          DS_RETURN_IF_ERROR(CopyInto(*t, Tensor(full.data(), s.shape, DType::kF32),
                                      where + ": optimizer tensor \"" + name + "\""));
          loaded = true;
        }
        std::copy(full.begin() + (lo - s.offset), full.begin() + (hi - s.offset),
                  b.data + g.shard_offset + (lo - g.flat_begin));
      }
    }
  }
  auto state = [&](const char* key) -> StatusOr<std::string> {
    auto it = ck.state().find(key);
    if (it == ck.state().end()) return DataLossError(where + ": state \"" + std::string(key) + "\" is missing");
    return it->second;
  };
  DS_ASSIGN_OR_RETURN(std::string engine_text, state("engine"));
  auto engine = ckpt::ParseJson(engine_text);
  if (!engine.ok() || !engine->Find("step") || !engine->Find("optimizer_step"))
    return DataLossError(where + ": engine state is malformed");
  step_ = engine->Find("step")->as_int();
  optimizer_->set_step(engine->Find("optimizer_step")->as_int());
  DS_ASSIGN_OR_RETURN(std::string scaler, state("loss_scaler"));
  DS_RETURN_IF_ERROR(scaler_->LoadState(scaler).WithPrefix(where));
  DS_ASSIGN_OR_RETURN(std::string data, state("data"));
  auto ds = DataLoaderState::FromJson(data);
  if (!ds.ok()) return ds.status().WithPrefix(where + ": data state");
  DS_RETURN_IF_ERROR(train_data_->SetState(*ds).WithPrefix(where + ": data state"));
  params_->SetFromFull(weights.data());
  params_->ZeroGrads();
  DS_LOG_INFO("ckpt", "loaded {} (step {})", where, step_);
  return OkStatus();
}

}  // namespace ds
