// LoadCheckpoint: resolve, map and verify a step directory. See checkpoint.h.
#include <sys/stat.h>

#include <cerrno>
#include <set>

#include "runtime/base/crc32c.h"
#include "runtime/base/json.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"

namespace ds::ckpt {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string Describe(const TensorSpec& s) {
  return std::string(DTypeName(s.dtype)) + " " + ShapeToString(s.shape);
}

// Checks the tensors of one safetensors file against the manifest, both ways.
Status VerifyTensors(const Manifest& m, const std::string& file, const SafetensorsFile& sf,
                     bool verify_checksums) {
  const std::string& path = sf.path();
  std::set<std::string> listed;
  for (const TensorRecord& t : m.tensors) {
    if (t.file != file) continue;
    listed.insert(t.name);
    const SafetensorsEntry* e = sf.Find(t.name);
    if (e == nullptr) {
      return DataLossError(path + ": tensor " + t.name + " listed in the manifest is missing");
    }
    if (e->spec.dtype != t.spec.dtype || e->spec.shape != t.spec.shape) {
      return DataLossError(path + ": tensor " + t.name + " is " + Describe(e->spec) +
                           " in the file but " + Describe(t.spec) + " in the manifest");
    }
    if (!verify_checksums) continue;
    uint32_t crc = Crc32c(e->data, e->nbytes());
    if (crc != t.crc32c) {
      return DataLossError(path + ": tensor " + t.name + " checksum mismatch (manifest " +
                           Crc32cHex(t.crc32c) + ", file " + Crc32cHex(crc) + ")");
    }
  }
  for (const SafetensorsEntry& e : sf.tensors()) {
    if (!listed.count(e.name)) {
      return DataLossError(path + ": tensor " + e.name + " is not listed in the manifest");
    }
  }
  return OkStatus();
}

Status CheckFileCrc(const std::string& path, const FileRecord& f, const void* data, size_t n) {
  uint32_t crc = Crc32c(data, n);
  if (crc != f.crc32c) {
    return DataLossError(path + ": file checksum mismatch (manifest " + Crc32cHex(f.crc32c) +
                         ", file " + Crc32cHex(crc) + ")");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> ResolveCheckpointDir(const std::string& path) {
  if (PathExists(JoinPath(path, kManifestFile))) return path;
  const std::string latest = JoinPath(path, kLatestFile);
  if (PathExists(latest)) {
    DS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(latest));
    std::string name = Trim(text);
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return DataLossError(latest + ": invalid contents '" + name + "'");
    }
    const std::string dir = JoinPath(path, name);
    if (!IsDirectory(dir)) return DataLossError(latest + ": names missing directory " + dir);
    if (!PathExists(JoinPath(dir, kManifestFile))) {
      return DataLossError(JoinPath(dir, kManifestFile) + ": missing (named by " + latest + ")");
    }
    return dir;
  }
  if (!IsDirectory(path)) return NotFoundError(path + ": no such checkpoint directory");
  if (BaseName(path).rfind("step_", 0) == 0) {
    return DataLossError(JoinPath(path, kManifestFile) + ": missing");
  }
  return NotFoundError(path + ": not a checkpoint (no manifest.json) nor a root (no latest)");
}

StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& root_or_step_dir,
                                          const LoadOptions& options) {
  LoadedCheckpoint ck;
  DS_ASSIGN_OR_RETURN(ck.dir_, ResolveCheckpointDir(root_or_step_dir));
  const std::string manifest_path = JoinPath(ck.dir_, kManifestFile);
  DS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path));
  StatusOr<Manifest> manifest = ParseManifest(text);
  if (!manifest.ok()) return manifest.status().WithPrefix(manifest_path);
  ck.manifest_ = std::move(manifest).value();
  const std::string base = BaseName(ck.dir_);
  if (base.rfind("step_", 0) == 0 && base != StepDirName(ck.manifest_.step)) {
    return DataLossError(manifest_path + ": step " + std::to_string(ck.manifest_.step) +
                         " does not match the directory name " + base);
  }

  for (const FileRecord& f : ck.manifest_.files) {
    const std::string path = JoinPath(ck.dir_, f.name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return DataLossError(path + ": missing (listed in the manifest)");
      return ErrnoToStatus(errno, "stat(" + path + ")");
    }
    if (static_cast<uint64_t>(st.st_size) != f.bytes) {
      return DataLossError(path + ": size " + std::to_string(st.st_size) +
                           " bytes, manifest says " + std::to_string(f.bytes));
    }
    if (f.name.size() > 12 && f.name.compare(f.name.size() - 12, 12, ".safetensors") == 0) {
      DS_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(path));
      DS_RETURN_IF_ERROR(VerifyTensors(ck.manifest_, f.name, sf, options.verify_checksums));
      if (options.verify_checksums) {
        DS_RETURN_IF_ERROR(CheckFileCrc(path, f, sf.file_data(), sf.file_bytes()));
      }
      ck.files_.emplace(f.name, std::move(sf));
      continue;
    }
    DS_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
    if (options.verify_checksums) {
      DS_RETURN_IF_ERROR(CheckFileCrc(path, f, contents.data(), contents.size()));
    }
    if (f.name == kStateFile) {
      auto members = ParseJsonObjectRaw(contents);
      if (!members.ok()) return DataLossError(path + ": " + members.status().message());
      for (auto& [k, v] : *members) ck.state_[k] = std::move(v);
    }
  }

  // Views in manifest (save) order; every record was matched against its file above.
  for (const TensorRecord& t : ck.manifest_.tensors) {
    auto it = ck.files_.find(t.file);
    if (it == ck.files_.end()) continue;
    NamedTensor nt{t.name, it->second.Find(t.name)->view()};
    if (t.file == kModelFile) ck.model_.push_back(std::move(nt));
    if (t.file == kOptimizerFile) ck.optimizer_.push_back(std::move(nt));
  }
  DS_LOG_DEBUG("ckpt", "loaded {} (step {}, {} tensors)", ck.dir_, ck.step(),
               ck.manifest_.tensors.size());
  return ck;
}

StatusOr<Tensor> LoadedCheckpoint::ModelTensor(const std::string& name) const {
  for (const NamedTensor& t : model_) {
    if (t.name == name) return t.tensor;
  }
  return NotFoundError(dir_ + ": no model tensor " + name);
}

StatusOr<Tensor> LoadedCheckpoint::OptimizerTensor(const std::string& name) const {
  for (const NamedTensor& t : optimizer_) {
    if (t.name == name) return t.tensor;
  }
  return NotFoundError(dir_ + ": no optimizer tensor " + name);
}

const SafetensorsFile* LoadedCheckpoint::file(const std::string& name) const {
  auto it = files_.find(name);
  return it == files_.end() ? nullptr : &it->second;
}

}  // namespace ds::ckpt
