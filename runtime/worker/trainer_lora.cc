// LoRA in the trainer: the store of the frozen base weights (what layouts allow it), their
// initialization beside the adapters', their place in checkpoints (frozen.safetensors, whole,
// written by rank 0 in either layout), and the two exports: the adapters alone as PEFT saves
// them (adapter_model.safetensors + adapter_config.json) and the model with the adapters merged
// into its weights (what DeepSpeed-Chat's save_hf_format writes after fusing).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "proto/plan.pb.h"
#include "runtime/base/json.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/graph/lora.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

Status Trainer::BuildFrozen() {
  if (config_.model.lora.enabled && device_memory_)  // no CUDA column_add, no device frozen store
    return InvalidArgumentError(
        config_.source +
        ": model.lora with device.type cuda: LoRA's column_add has no CUDA kernel "
        "and its frozen weights live in host memory; train it with "
        "device.type cpu");
  // The planner refuses the layouts that would cut the frozen weights (MakePlan).
  if (graph_.Frozen().empty()) return OkStatus();
  frozen_ = std::make_unique<zero::ParamStore>(graph_, DType::kF32, false, TensorRole::kFrozen);
  if (world_rank_ == 0)
    DS_LOG_INFO("worker",
                "LoRA: {:.3f}M trainable parameters ({:.3f}% of {:.2f}M); {:.2f}M frozen base "
                "weights, fp32 on every rank ({:.1f} MiB), with no gradient or optimizer state",
                params_->num_parameters() / 1e6,
                100.0 * params_->num_parameters() /
                    double(params_->num_parameters() + frozen_->num_parameters()),
                (params_->num_parameters() + frozen_->num_parameters()) / 1e6,
                frozen_->num_parameters() / 1e6, frozen_->total_elements() * 4.0 / (1 << 20));
  return OkStatus();
}

void Trainer::AddFrozen(ckpt::CheckpointContents* c) const {
  if (!frozen_) return;
  for (const zero::ParamSlot& s : frozen_->slots())
    c->frozen.push_back({s.name, frozen_->ModelView(s)});
}

// The checkpoint's frozen weights (frozen.safetensors), or, from a checkpoint of the model
// trained whole, its master weights of the same names.
Status Trainer::VisitFrozen(ckpt::CheckpointReader* reader, bool commit) {
  if (!frozen_) return OkStatus();
  std::map<std::string, const Shape*> shapes;
  for (const auto& [name, shape] : reader->params()) shapes[name] = &shape;
  for (const zero::ParamSlot& s : frozen_->slots()) {
    auto found = shapes.find(s.name);
    if (found == shapes.end())
      return DataLossError(reader->dir() + ": frozen weight \"" + s.name + "\" is missing");
    if (*found->second != s.shape)
      return DataLossError(reader->dir() + ": frozen weight \"" + s.name + "\" has shape " +
                           ShapeToString(*found->second) + ", the model expects " +
                           ShapeToString(s.shape));
    const char* state =
        reader->Slices(ckpt::kFrozenState, s.name) ? ckpt::kFrozenState : ckpt::kMasterState;
    DS_RETURN_IF_ERROR(commit
                           ? reader->Read(state, s.name, 0, s.numel, frozen_->MasterView(s).f32())
                           : reader->Verify(state, s.name, 0, s.numel));
  }
  return OkStatus();
}

StatusOr<std::vector<float>> Trainer::FullMaster() {
  const int64_t n =
      params_->master_sharded() ? params_->shard_elements() : params_->total_elements();
  return MasterLayoutToFull(std::vector<float>(params_->master_data(), params_->master_data() + n));
}

Status Trainer::LoadAdapter(const std::string& dir) {
  const config::LoraConfig& l = config_.model.lora;
  const std::string config_path = dir + "/adapter_config.json";
  DS_ASSIGN_OR_RETURN(std::string text, ckpt::ReadFileToString(config_path));
  auto json = ParseJson(text);
  if (!json.ok()) return json.status().WithPrefix(config_path);
  auto number = [&](const char* key, double want, const char* ours) -> Status {
    const Json* v = json->Find(key);
    if (v == nullptr || !v->is_number())
      return DataLossError(config_path + ": no number \"" + key + "\"");
    if (v->as_double() != want)
      return InvalidArgumentError(config_path + ": " + key + " is " + v->Dump() + ", the job's " +
                                  ours + " is " + Json::Double(want).Dump());
    return OkStatus();
  };
  DS_RETURN_IF_ERROR(number("r", l.r, l.dschat ? "model.lora.lora_dim" : "model.lora.r"));
  DS_RETURN_IF_ERROR(number("lora_alpha", l.alpha,
                            l.dschat ? "model.lora.lora_scaling" : "model.lora.lora_alpha"));
  const Json* rs = json->Find("use_rslora");
  if (rs != nullptr && rs->is_bool() && rs->as_bool() != l.use_rslora)
    return InvalidArgumentError(config_path + ": use_rslora differs from model.lora.use_rslora");
  const std::string file = dir + "/adapter_model.safetensors";
  DS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile f, ckpt::SafetensorsFile::Open(file));
  // Every tensor checked before anything is overwritten.
  if (f.tensors().size() != params_->slots().size())
    return DataLossError(file + ": " + std::to_string(f.tensors().size()) + " tensors, the job's " +
                         "adapters have " + std::to_string(params_->slots().size()) +
                         " (its target modules differ)");
  for (const zero::ParamSlot& s : params_->slots()) {
    const std::string name = "base_model.model." + s.name;
    auto t = f.Get(name);
    if (!t.ok())
      return DataLossError(file + ": no tensor \"" + name +
                           "\" (the job's target modules differ?)");
    if (t->shape() != s.shape)
      return DataLossError(file + ": \"" + name + "\" is " + ShapeToString(t->shape()) +
                           ", the job's adapter is " + ShapeToString(s.shape));
  }
  DS_RETURN_IF_ERROR(InitializeStreaming(
      [&](int slot, float* dst, int64_t whole, const zero::ParamStore::Ranges&, int64_t) -> Status {
        const std::string name = "base_model.model." + params_->slots()[slot].name;
        DS_ASSIGN_OR_RETURN(OwnedTensor v, f.CopyOut(name, DType::kF32));
        std::memcpy(dst, v.f32(), whole * sizeof(float));
        return OkStatus();
      }));
  if (world_rank_ == 0) DS_LOG_INFO("worker", "LoRA: adapters from {}", dir);
  return OkStatus();
}

namespace {

Status WriteAdapterFiles(const std::string& dir, const std::vector<ckpt::NamedTensor>& tensors,
                         const std::string& config_json) {
  DS_RETURN_IF_ERROR(ckpt::CreateDirs(dir));
  DS_RETURN_IF_ERROR(
      ckpt::WriteSafetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}})
          .status());
  return ckpt::WriteFileAtomic(dir + "/adapter_config.json", config_json);
}

}  // namespace

// PEFT's adapter_config.json for this job's adapters (DeepSpeed-Chat's lora_scaling is PEFT's
// lora_alpha: both scale by it over r).
std::string Trainer::AdapterConfigJson() const {
  const config::LoraConfig& l = config_.model.lora;
  std::set<std::string> modules;  // full paths, as PEFT writes all-linear's: exactly these
  for (const LoraAdapter& a : FindAdapters(graph_)) modules.insert(a.module);
  std::vector<Json> targets;
  for (const std::string& m : modules) targets.push_back(Json::String(m));
  Json j = Json::Object();
  j.Set("peft_type", Json::String("LORA"));
  j.Set("task_type", Json::String("CAUSAL_LM"));
  j.Set("base_model_name_or_path",
        config_.model.hf.empty() ? Json() : Json::String(config_.model.hf));
  j.Set("r", Json::Int(l.r));
  j.Set("lora_alpha", Json::Double(l.alpha));
  j.Set("lora_dropout", Json::Double(l.dropout));
  j.Set("target_modules", Json::Array(std::move(targets)));
  j.Set("bias", Json::String("none"));
  j.Set("fan_in_fan_out", Json::Bool(graph_.family == "gpt2"));  // GPT-2's Conv1D
  j.Set("use_rslora", Json::Bool(l.use_rslora));
  j.Set("use_dora", Json::Bool(false));
  j.Set("init_lora_weights", Json::Bool(true));
  j.Set("inference_mode", Json::Bool(true));
  j.Set("modules_to_save", Json());
  return j.Dump();
}

Status Trainer::ExportAdapter(const std::string& dir) {
  if (!config_.model.lora.enabled)
    return FailedPreconditionError(config_.source + ": no model.lora: no adapter to export");
  DS_ASSIGN_OR_RETURN(std::vector<float> full, FullMaster());
  DS_RETURN_IF_ERROR(RankZeroWrites(dir, [&]() {
    if (!config_.model.lora.freeze_base)
      DS_LOG_WARN("worker",
                  "{}: the base weights trained too (only_optimize_lora false): the adapter "
                  "alone is not the model; export the merged weights for that",
                  dir);
    std::vector<ckpt::NamedTensor> tensors;
    for (const zero::ParamSlot& s : params_->slots())
      if (IsLoraParam(s.name))
        tensors.push_back(
            {"base_model.model." + s.name, Tensor(full.data() + s.offset, s.shape, DType::kF32)});
    return WriteAdapterFiles(dir, tensors, AdapterConfigJson());
  }));
  if (world_rank_ == 0) DS_LOG_INFO("worker", "wrote the LoRA adapter (PEFT's format) to {}", dir);
  return OkStatus();
}

std::map<std::string, std::pair<Shape, std::vector<float>>> Trainer::MergedWeights(
    const std::vector<float>& full) const {
  std::map<std::string, std::pair<Shape, std::vector<float>>> weights;  // by name
  std::map<std::string, const zero::ParamSlot*> trained;
  for (const zero::ParamSlot& s : params_->slots()) {
    trained[s.name] = &s;
    if (!IsLoraParam(s.name))
      weights[s.name] = {s.shape, {full.begin() + s.offset, full.begin() + s.offset + s.numel}};
  }
  if (frozen_)
    for (const zero::ParamSlot& s : frozen_->slots()) {
      const float* v = frozen_->MasterView(s).f32();
      weights[s.name] = {s.shape, {v, v + s.numel}};
    }
  for (const LoraAdapter& a : FindAdapters(graph_)) {
    const zero::ParamSlot& sa = *trained.at(a.a);
    const zero::ParamSlot& sb = *trained.at(a.b);
    auto& [shape, values] = weights.at(a.base);
    MergeAdapter(full.data() + sa.offset, full.data() + sb.offset, sa.shape[0], sa.shape[1],
                 sb.shape[0], a.scale, values.data() + a.begin * shape[1]);
  }
  return weights;
}

Status Trainer::FuseAdapters() {
  if (!config_.model.lora.enabled) return OkStatus();
  DS_ASSIGN_OR_RETURN(std::vector<float> full, FullMaster());
  if (!fused_) {
    DS_ASSIGN_OR_RETURN(fused_graph_, plan::LoadBaseGraph(config_));
    fused_ = std::make_unique<zero::ParamStore>(fused_graph_, DType::kF32);
  }
  const auto weights = MergedWeights(full);
  for (const zero::ParamSlot& s : fused_->slots()) {
    auto it = weights.find(s.name);
    if (it == weights.end() || it->second.first != s.shape)
      return InternalError("LoRA fuse: the base model's " + s.name + " has no merged weight");
    std::copy(it->second.second.begin(), it->second.second.end(), fused_->MasterView(s).f32());
  }
  fused_->MarkModelChanged();
  return OkStatus();
}

// The base model's weights with every adapter folded in (fp32, the base's names): what
// transformers loads as the fine-tuned model.
Status Trainer::ExportMerged(const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::vector<float> full, FullMaster());
  return RankZeroWrites(path, [&]() {
    auto weights = MergedWeights(full);
    std::vector<ckpt::NamedTensor> tensors;
    for (auto& [name, w] : weights)
      tensors.push_back({name, Tensor(w.second.data(), w.first, DType::kF32)});
    return ckpt::WriteSafetensors(path, tensors,
                                  {{"format", "ds-runtime"}, {"family", graph_.family}})
        .status();
  });
}

}  // namespace ds::worker
