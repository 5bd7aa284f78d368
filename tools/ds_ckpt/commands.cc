#include "tools/ds_ckpt/commands.h"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/crc32c.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/hf_names.h"
#include "runtime/ckpt/hf_shards.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/config/job_config.h"
#include "tools/ds_ckpt/hf_config.h"
#include "tools/ds_ckpt/hf_job_export.h"

namespace ds::tools {
namespace {

using ckpt::LoadedCheckpoint;

StatusOr<ckpt::HfOptions> ToHfOptions(const ConvertOptions& o) {
  ckpt::HfOptions hf;
  hf.n_head = o.n_head;
  hf.n_kv_head = o.n_kv_head;
  if (!ParseDType(o.dtype, &hf.dtype) || !IsFloat(hf.dtype)) {
    return InvalidArgumentError("--dtype must be f32, bf16 or f16, got '" + o.dtype + "'");
  }
  return hf;
}

std::string HumanBytes(uint64_t n) {
  char buf[32];
  if (n < 1024) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", n);
  } else if (n < (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", n / 1024.0);
  } else if (n < (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", n / 1048576.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", n / 1073741824.0);
  }
  return buf;
}

std::string TensorLine(const std::string& name, const TensorSpec& spec) {
  return "  " + name + "  " + DTypeName(spec.dtype) + " " + ShapeToString(spec.shape) + "  " +
         HumanBytes(spec.nbytes());
}

std::string DescribeSafetensors(const ckpt::SafetensorsFile& f) {
  std::string out = "safetensors: " + f.path() + " (" + HumanBytes(f.file_bytes()) + ")\n";
  for (const auto& [k, v] : f.metadata()) out += "metadata: " + k + " = " + v + "\n";
  out += "tensors: " + std::to_string(f.tensors().size()) + "\n";
  for (const ckpt::SafetensorsEntry& e : f.tensors()) out += TensorLine(e.name, e.spec) + "\n";
  out += "checksums: none stored in a bare safetensors file (header validated)\n";
  return out;
}

std::string DescribeCheckpoint(const LoadedCheckpoint& ck) {
  const ckpt::Manifest& m = ck.manifest();
  std::string out = "checkpoint: " + ck.dir() + "\nstep: " + std::to_string(ck.step()) + "\n";
  for (const auto& [k, v] : m.info) out += "info: " + k + " = " + v + "\n";
  uint64_t total = 0;
  out += "files:\n";
  for (const ckpt::FileRecord& f : m.files) {
    out += "  " + f.name + "  " + HumanBytes(f.bytes) + "  crc32c " + Crc32cHex(f.crc32c) + "\n";
    total += f.bytes;
  }
  out += "tensors: " + std::to_string(m.tensors.size()) + "\n";
  for (const ckpt::TensorRecord& t : m.tensors) {
    out += TensorLine(t.file + ":" + t.name, t.spec) + "  crc32c " + Crc32cHex(t.crc32c);
    if (t.shard) {
      out += "  shard of " + ShapeToString(t.shard->global_shape) + " at " +
             ShapeToString(t.shard->offset);
    }
    out += "\n";
  }
  out += "state:";
  for (const auto& [k, v] : ck.state()) out += " " + k;
  out += "\ntotal: " + HumanBytes(total) + "\nchecksums: all verified\n";
  return out;
}

}  // namespace

Status RunImport(const ConvertOptions& o) {
  DS_ASSIGN_OR_RETURN(ckpt::HfOptions hf, ToHfOptions(o));
  return ckpt::ImportHf(o.family, o.input, o.output, hf);
}

// A sharded checkpoint (ZeRO or tensor-parallel rank files) is consolidated first, next to the
// output, and exported from there.
Status ExportWeights(const ConvertOptions& o, const ckpt::HfOptions& hf) {
  if (ckpt::IsDirectory(o.input)) {
    DS_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader, ckpt::CheckpointReader::Open(o.input));
    if (reader.sharded()) {
      const std::string whole = o.output + ".consolidated.tmp";
      Status s = RunConsolidate({o.input, whole});
      if (s.ok()) s = ckpt::ExportHf(o.family, whole, o.output, hf);
      std::remove(whole.c_str());
      return s;
    }
  }
  return ckpt::ExportHf(o.family, o.input, o.output, hf);
}

// With --config the output is a Hugging Face folder: config.json from the job's model (made
// before any weight is written, so a job without one is refused first) beside the weights, in
// shards of --max_shard_size (transformers' default 5GB when not given).
Status RunExport(const ConvertOptions& o) {
  if (o.family.empty() && o.config.empty())
    return InvalidArgumentError("export needs --family (gpt2 or llama), or --config with the job");
  DS_ASSIGN_OR_RETURN(ckpt::HfOptions hf, ToHfOptions(o));
  if (!o.max_shard_size.empty()) {
    DS_ASSIGN_OR_RETURN(hf.max_shard_bytes, ckpt::ParseShardSize(o.max_shard_size));
  }
  std::string config_json;
  if (!o.config.empty()) {
    DS_ASSIGN_OR_RETURN(config::JobConfig job, config::LoadJobConfig(o.config));
    if (!job.model.hf.empty()) return ExportHfJob(o, job);  // the folder's own family
    const std::string family = job.model.family == config::ModelFamily::kGpt2    ? "gpt2"
                               : job.model.family == config::ModelFamily::kLlama ? "llama"
                                                                                 : "";
    if (!family.empty() && family != o.family)
      return InvalidArgumentError("--family " + o.family + ", but " + o.config + " describes a " +
                                  family + " model");
    DS_ASSIGN_OR_RETURN(config_json, HfConfigJson(job, hf.dtype));
    if (job.model.moe.num_experts == 0) return ExportGeneratedJob(o, job, config_json);
    if (hf.max_shard_bytes == 0) hf.max_shard_bytes = 5000000000;
  }
  DS_RETURN_IF_ERROR(ExportWeights(o, hf));
  if (config_json.empty()) return OkStatus();
  return ckpt::WriteFileAtomic(ckpt::JoinPath(o.output, "config.json"), config_json);
}

StatusOr<std::string> InspectCheckpoint(const std::string& path) {
  if (!ckpt::IsDirectory(path)) {
    DS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile f, ckpt::SafetensorsFile::Open(path));
    return DescribeSafetensors(f);
  }
  DS_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ckpt::LoadCheckpoint(path));
  return DescribeCheckpoint(ck);
}

StatusOr<std::string> VerifyCheckpoint(const std::string& path) {
  DS_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ckpt::LoadCheckpoint(path));
  const ckpt::Manifest& m = ck.manifest();
  return "OK: " + ck.dir() + " step " + std::to_string(ck.step()) + ", " +
         std::to_string(m.files.size()) + " files, " + std::to_string(m.tensors.size()) +
         " tensors verified";
}

// Note [consolidate]
// What zero_to_fp32 is to DeepSpeed: the fp32 weights of a checkpoint as one safetensors file
// with the graph's parameter names. The weights are the "master" state: model.safetensors of a
// consolidated checkpoint, or the union of the ranks' "master/<param>#<begin>" slices of a
// sharded one (CheckpointReader tiles them). Every file is verified first (CRC-32C), then the
// output is streamed one parameter at a time, in manifest order (the flat order for sharded
// checkpoints), so memory stays at one parameter whatever the model size.
Status RunConsolidate(const ConsolidateOptions& o) {
  DS_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader, ckpt::CheckpointReader::Open(o.input));
  for (const ckpt::FileRecord& f : reader.manifest().files)
    DS_RETURN_IF_ERROR(reader.VerifyFile(f));
  std::vector<std::pair<std::string, TensorSpec>> specs;
  // The trained weights and the frozen ones (LoRA's base model) beside them.
  std::vector<const char*> state_of;
  for (const auto& [name, shape] : reader.params())
    for (const char* state : {ckpt::kMasterState, ckpt::kFrozenState})
      if (reader.Slices(state, name) != nullptr) {
        specs.push_back({name, {shape, DType::kF32}});
        state_of.push_back(state);
        break;
      }
  if (specs.empty())
    return DataLossError(reader.dir() + ": no weights (no master state) to consolidate");
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"step", std::to_string(reader.step())}};
  auto family = reader.manifest().info.find("family");
  if (family != reader.manifest().info.end()) meta["family"] = family->second;
  DS_ASSIGN_OR_RETURN(auto writer, ckpt::SafetensorsStreamWriter::Create(o.output, specs, meta));
  std::vector<float> scratch;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [name, spec] = specs[i];
    scratch.resize(spec.numel());
    DS_RETURN_IF_ERROR(reader.Read(state_of[i], name, 0, spec.numel(), scratch.data()));
    DS_RETURN_IF_ERROR(writer->Append(scratch.data(), scratch.size() * sizeof(float)));
  }
  DS_ASSIGN_OR_RETURN(ckpt::SafetensorsWriteResult r, writer->Finish());
  std::printf("consolidated %s (step %lld, %s): %zu fp32 tensors, %.1f MiB -> %s\n",
              reader.dir().c_str(), static_cast<long long>(reader.step()),
              reader.sharded()
                  ? ("from " + reader.manifest().info.at("world_size") + " rank files").c_str()
                  : "consolidated",
              specs.size(), r.file_bytes / double(1 << 20), o.output.c_str());
  return OkStatus();
}

}  // namespace ds::tools
