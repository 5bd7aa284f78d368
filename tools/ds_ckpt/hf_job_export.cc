#include "tools/ds_ckpt/hf_job_export.h"

#include <cstdio>
#include <optional>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/hf_export.h"
#include "runtime/ckpt/hf_shards.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/graph/lora.h"
#include "runtime/hf/hf_tensor_map.h"
#include "runtime/plan/model_loader.h"

namespace ds::tools {
namespace {

// What transformers and tokenizers read beside the weights, copied when the folder has them.
constexpr const char* kCompanions[] = {"config.json",
                                       "generation_config.json",
                                       "tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "tokenizer.model",
                                       "vocab.json",
                                       "merges.txt",
                                       "added_tokens.json",
                                       "chat_template.jinja"};

// Our parameters from a checkpoint directory or one of our .safetensors files. A LoRA job's
// (model.lora) base weights come with their adapters merged in, as DeepSpeed-Chat's
// save_hf_format writes them: the frozen weights from the checkpoint's frozen state.
struct Source {
  std::optional<ckpt::CheckpointReader> checkpoint;
  std::optional<ckpt::SafetensorsFile> file;
  std::vector<LoraAdapter> adapters;

  Status Read(const std::string& name, const Shape& shape, float* dst) {
    DS_RETURN_IF_ERROR(ReadPlain(name, shape, dst));
    for (const LoraAdapter& a : adapters) {
      if (a.base != name) continue;
      if (file && !file->Get(a.a).ok()) continue;  // a merged export: nothing left to merge
      std::vector<float> down, up;
      DS_RETURN_IF_ERROR(ReadAny(a.a, &down));
      DS_RETURN_IF_ERROR(ReadAny(a.b, &up));
      const int64_t in = shape[1], r = static_cast<int64_t>(down.size()) / in;
      MergeAdapter(down.data(), up.data(), r, in, static_cast<int64_t>(up.size()) / r, a.scale,
                   dst + a.begin * in);
    }
    return OkStatus();
  }

  // A whole tensor of unknown shape (an adapter's), as fp32.
  Status ReadAny(const std::string& name, std::vector<float>* out) {
    Shape shape;
    if (checkpoint) {
      for (const auto& [n, s] : checkpoint->params())
        if (n == name) shape = s;
    } else {
      DS_ASSIGN_OR_RETURN(Tensor t, file->Get(name));
      shape = t.shape();
    }
    if (shape.empty()) return DataLossError(name + ": the LoRA adapter is not in the input");
    out->resize(NumElements(shape));
    return ReadPlain(name, shape, out->data());
  }

  Status ReadPlain(const std::string& name, const Shape& shape, float* dst) {
    if (checkpoint) {
      const char* state =
          checkpoint->Slices(ckpt::kFrozenState, name) ? ckpt::kFrozenState : ckpt::kMasterState;
      return checkpoint->Read(state, name, 0, NumElements(shape), dst);
    }
    DS_ASSIGN_OR_RETURN(Tensor t, file->Get(name));
    if (t.shape() != shape)
      return InvalidArgumentError(file->path() + ": tensor " + name + " has shape " +
                                  ShapeToString(t.shape()) + ", the model's is " +
                                  ShapeToString(shape));
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = LoadFloat(t.data(), t.dtype(), i);
    return OkStatus();
  }
};

StatusOr<Source> OpenSource(const std::string& input) {
  Source s;
  if (ckpt::IsDirectory(input)) {
    DS_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader, ckpt::CheckpointReader::Open(input));
    for (const ckpt::FileRecord& f : reader.manifest().files)
      DS_RETURN_IF_ERROR(reader.VerifyFile(f));
    s.checkpoint.emplace(std::move(reader));
  } else {
    DS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile f, ckpt::SafetensorsFile::Open(input));
    s.file.emplace(std::move(f));
  }
  return s;
}

}  // namespace

namespace {

// The weights of `spec`'s model, read from o.input, written into the folder o.output by the
// family's map: the number of shards.
StatusOr<int> ExportFolder(const ConvertOptions& o, const config::JobConfig& job,
                           const ModelSpec& spec, DType* dtype) {
  if (!ParseDType(o.dtype, dtype) || !IsFloat(*dtype))
    return InvalidArgumentError("--dtype must be f32, bf16 or f16, got '" + o.dtype + "'");
  int64_t max_shard = 5000000000;
  if (!o.max_shard_size.empty()) {
    DS_ASSIGN_OR_RETURN(max_shard, ckpt::ParseShardSize(o.max_shard_size));
  }
  DS_ASSIGN_OR_RETURN(Graph graph, BuildModelGraph(spec));
  DS_ASSIGN_OR_RETURN(hf::HfTensorMap map, hf::MapHfTensors(spec, graph));
  DS_ASSIGN_OR_RETURN(Source source, OpenSource(o.input));
  if (job.model.lora.enabled) {
    DS_ASSIGN_OR_RETURN(Graph adapted, plan::WithLora(job, spec, graph));
    source.adapters = FindAdapters(adapted);
  }
  return ckpt::ExportHfFolder(o.output, map, *dtype, max_shard,
                              [&](const std::string& name, const Shape& shape, float* dst) {
                                return source.Read(name, shape, dst);
                              });
}

}  // namespace

Status ExportHfJob(const ConvertOptions& o, const config::JobConfig& job) {
  DS_ASSIGN_OR_RETURN(ModelSpec spec, plan::HfModelSpec(job));
  DType dtype = DType::kF32;
  DS_ASSIGN_OR_RETURN(int shards, ExportFolder(o, job, spec, &dtype));
  int copied = 0;
  for (const char* name : kCompanions) {
    const std::string from = ckpt::JoinPath(job.model.hf, name);
    StatusOr<std::string> text = ckpt::ReadFileToString(from);
    if (!text.ok()) continue;  // the folder has no such file
    DS_RETURN_IF_ERROR(ckpt::WriteFileAtomic(ckpt::JoinPath(o.output, name), *text));
    ++copied;
  }
  std::printf("exported %s (%s) to %s: %d shard%s (%s), %d files of %s copied\n", o.input.c_str(),
              spec.family.c_str(), o.output.c_str(), shards, shards == 1 ? "" : "s",
              DTypeName(dtype), copied, job.model.hf.c_str());
  return OkStatus();
}

Status ExportGeneratedJob(const ConvertOptions& o, const config::JobConfig& job,
                          const std::string& config_json) {
  DS_ASSIGN_OR_RETURN(ModelSpec spec, plan::GeneratedModelSpec(job));
  DType dtype = DType::kF32;
  DS_ASSIGN_OR_RETURN(int shards, ExportFolder(o, job, spec, &dtype));
  DS_RETURN_IF_ERROR(ckpt::WriteFileAtomic(ckpt::JoinPath(o.output, "config.json"), config_json));
  std::printf("exported %s (%s) to %s: %d shard%s (%s) and config.json\n", o.input.c_str(),
              spec.family.c_str(), o.output.c_str(), shards, shards == 1 ? "" : "s",
              DTypeName(dtype));
  return OkStatus();
}

}  // namespace ds::tools
