#include "tools/ds_ckpt/commands.h"

#include <cinttypes>
#include <cstdio>
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
// EXTENSION POINT for the ZeRO checkpoint issue: ZeRO-sharded saves will write per-rank
// tensor files whose manifest entries carry "shard" {global_shape, offset} records
// (runtime/ckpt/manifest.h). Consolidation loads the checkpoint, groups records by name,
// checks that the shards tile each global shape exactly once, copies each box into a
// full tensor, and writes one safetensors file (optionally through ExportHf). Until then
// this refuses rather than pretending to work.
Status RunConsolidate(const ConsolidateOptions& o) {
  return UnimplementedError(
      "consolidate is not implemented yet: merging ZeRO-sharded checkpoints into full "
      "tensors arrives with ZeRO checkpointing (input " +
      o.input + ")");
}

}  // namespace ds::tools
