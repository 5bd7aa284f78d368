#include "tools/ds_ckpt/commands.h"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <vector>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/crc32c.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/hf_names.h"
#include "runtime/ckpt/safetensors.h"

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
    out +=
        "  " + f.name + "  " + HumanBytes(f.bytes) + "  crc32c " + ckpt::Crc32cHex(f.crc32c) + "\n";
    total += f.bytes;
  }
  out += "tensors: " + std::to_string(m.tensors.size()) + "\n";
  for (const ckpt::TensorRecord& t : m.tensors) {
    out += TensorLine(t.file + ":" + t.name, t.spec) + "  crc32c " + ckpt::Crc32cHex(t.crc32c);
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

Status RunExport(const ConvertOptions& o) {
  DS_ASSIGN_OR_RETURN(ckpt::HfOptions hf, ToHfOptions(o));
  return ckpt::ExportHf(o.family, o.input, o.output, hf);
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
// ds-runtime writes consolidated checkpoints: under ZeRO, the ranks gather their optimizer
// shards at save time and rank 0 writes whole tensors (runtime/worker/trainer_checkpoint.cc).
// Consolidation is therefore what zero_to_fp32 gives DeepSpeed users: the fp32 weights of a
// checkpoint as one safetensors file, verified on the way. Manifest entries that describe
// shards ("shard" records) would need tiling into global tensors; none of our writers emit
// them yet, so such a checkpoint is refused rather than half-merged.
Status RunConsolidate(const ConsolidateOptions& o) {
  DS_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ckpt::LoadCheckpoint(o.input));
  for (const auto& entry : ck.manifest().tensors)
    if (entry.shard)
      return UnimplementedError(ck.dir() + ": tensor " + entry.name +
                                " is a shard; merging sharded tensors is not supported yet");
  std::vector<OwnedTensor> owned;
  std::vector<ckpt::NamedTensor> out;
  owned.reserve(ck.model().size());
  for (const ckpt::NamedTensor& t : ck.model()) {
    DS_ASSIGN_OR_RETURN(OwnedTensor f, ckpt::CopyTensorAs(t.tensor, DType::kF32));
    owned.push_back(std::move(f));
    out.push_back({t.name, owned.back().view()});
  }
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", std::to_string(ck.step())}};
  auto family = ck.info().find("family");
  if (family != ck.info().end()) meta["family"] = family->second;
  DS_ASSIGN_OR_RETURN(ckpt::SafetensorsWriteResult r, ckpt::WriteSafetensors(o.output, out, meta));
  std::printf("consolidated %s (step %lld): %zu fp32 tensors, %.1f MiB -> %s\n", ck.dir().c_str(),
              static_cast<long long>(ck.step()), out.size(), r.file_bytes / double(1 << 20),
              o.output.c_str());
  return OkStatus();
}

}  // namespace ds::tools
