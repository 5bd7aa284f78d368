// ZeRO shard files and CheckpointReader. See zero_shards.h and README.md.
#include "runtime/ckpt/zero_shards.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/base/crc32c.h"
#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"

namespace ds::ckpt {
namespace {

constexpr char kShardPrefix[] = "zero_shard_rank_";
constexpr char kShardSuffix[] = ".safetensors";
constexpr char kShardFormat[] = "ds-zero-shard";

std::string Range(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

// "<state>/<param>#<begin>" -> parts; false for anything else.
bool ParseSliceName(const std::string& name, std::string* state, std::string* param,
                    int64_t* begin) {
  const size_t slash = name.find('/');
  const size_t hash = name.rfind('#');
  if (slash == std::string::npos || hash == std::string::npos || hash <= slash + 1 || slash == 0 ||
      hash + 1 == name.size() || name.size() - hash > 19) {
    return false;
  }
  int64_t v = 0;
  for (size_t i = hash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *state = name.substr(0, slash);
  *param = name.substr(slash + 1, hash - slash - 1);
  *begin = v;
  return true;
}

bool IsSafetensors(const std::string& name) {
  return name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

// Copies n elements starting at element `at` of a float tensor's bytes into fp32.
void CopyAsF32(const SafetensorsEntry& e, int64_t at, int64_t n, float* dst) {
  const auto* half = static_cast<const uint16_t*>(e.data) + at;
  switch (e.spec.dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(e.data) + at, n * 4);
      break;
    case DType::kBF16:
      ConvertBf16ToF32(half, dst, n);
      break;
    case DType::kF16:
      ConvertF16ToF32(half, dst, n);
      break;
    default:
      break;  // Verify rejects non-float slices
  }
}

// What a manifest record holds: a slice of parameter `param` of state `state` (master,
// optimizer moments, frozen), from flat element `begin`, the parameter of shape `shape`.
struct RecordName {
  std::string state, param;
  int64_t begin = 0;
  Shape shape;
};

// Names record `t` (`where` prefixes errors); false for a record the index skips (a copy of
// the master beside rank files, files we do not read).
StatusOr<bool> NameRecord(const TensorRecord& t, const std::string& where, bool sharded,
                          RecordName* n) {
  n->shape = t.spec.shape;
  int rank = 0;
  if (ParseZeroShardFileName(t.file, &rank)) {
    if (!t.shard || !t.shard->flat() || !ParseSliceName(t.name, &n->state, &n->param, &n->begin) ||
        n->begin != t.shard->flat_offset) {
      return DataLossError(where + ": not a flat slice \"<state>/<param>#<begin>\"");
    }
    n->shape = t.shard->global_shape;
    return true;
  }
  if (t.shard)
    return UnimplementedError(where + ": box shards (tensor parallelism) are not supported");
  if (t.file == kFrozenFile) {
    n->state = kFrozenState;
  } else if (sharded) {
    return false;  // model.safetensors beside rank files: a copy of the "master" slices
  } else if (t.file == kModelFile) {
    n->state = kMasterState;
  } else if (t.file == kOptimizerFile) {
    const size_t slash = t.name.find('/');
    if (slash == std::string::npos || slash == 0)
      return DataLossError(where + ": optimizer tensors are named <state>/<param>");
    n->state = t.name.substr(0, slash);
    n->param = t.name.substr(slash + 1);
    return true;
  } else {
    return false;
  }
  n->param = t.name;
  return true;
}

}  // namespace

std::string ZeroShardFileName(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%05d%s", kShardPrefix, rank, kShardSuffix);
  return buf;
}

bool ParseZeroShardFileName(const std::string& name, int* rank) {
  const size_t p = std::strlen(kShardPrefix), s = std::strlen(kShardSuffix);
  if (name.size() != p + 5 + s || name.compare(0, p, kShardPrefix) != 0 ||
      name.compare(p + 5, s, kShardSuffix) != 0) {
    return false;
  }
  int v = 0;
  for (size_t i = p; i < p + 5; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *rank = v;
  return true;
}

std::string SliceName(const std::string& state, const std::string& param, int64_t begin) {
  return state + "/" + param + "#" + std::to_string(begin);
}

TensorRecord SliceRecord(int rank, const SliceDesc& d, uint32_t crc) {
  TensorRecord t;
  t.name = SliceName(d.state, d.param, d.begin);
  t.file = ZeroShardFileName(rank);
  t.spec =
      d.rows > 1 ? TensorSpec{{d.rows, d.count}, DType::kF32} : TensorSpec{{d.count}, DType::kF32};
  t.crc32c = crc;
  t.shard = ShardRecord{d.param_shape, {}, d.begin, d.rows > 1 ? d.row_stride : 0};
  return t;
}

StatusOr<SafetensorsWriteResult> WriteZeroShardFile(const std::string& dir,
                                                    const ZeroShardMeta& meta,
                                                    const std::vector<SliceDesc>& slices,
                                                    const std::vector<const float*>& data) {
  if (slices.size() != data.size()) return InvalidArgumentError("one data pointer per slice");
  std::vector<NamedTensor> tensors;
  tensors.reserve(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const SliceDesc& d = slices[i];
    const Shape shape = d.rows > 1 ? Shape{d.rows, d.count} : Shape{d.count};
    tensors.push_back({SliceName(d.state, d.param, d.begin),
                       Tensor(const_cast<float*>(data[i]), shape, DType::kF32)});
  }
  const std::map<std::string, std::string> metadata = {
      {"format", kShardFormat},
      {"rank", std::to_string(meta.rank)},
      {"world_size", std::to_string(meta.world_size)},
      {"zero_stage", std::to_string(meta.zero_stage)},
      {"step", std::to_string(meta.step)}};
  return WriteSafetensors(JoinPath(dir, ZeroShardFileName(meta.rank)), tensors, metadata);
}

// ---------------------------------------------------------------------------------------
// CheckpointReader

StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& root_or_step_dir) {
  CheckpointReader r;
  DS_ASSIGN_OR_RETURN(r.dir_, ResolveCheckpointDir(root_or_step_dir));
  const std::string manifest_path = JoinPath(r.dir_, kManifestFile);
  DS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path));
  StatusOr<Manifest> manifest = ParseManifest(text);
  if (!manifest.ok()) return manifest.status().WithPrefix(manifest_path);
  r.manifest_ = std::move(manifest).value();
  for (const FileRecord& f : r.manifest_.files) {
    if (f.name != kStateFile) continue;
    const std::string path = JoinPath(r.dir_, f.name);
    DS_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
    if (contents.size() != f.bytes || Crc32c(contents.data(), contents.size()) != f.crc32c) {
      return DataLossError(path + ": size or checksum differs from the manifest");
    }
    auto members = ParseJsonObjectRaw(contents);
    if (!members.ok()) return DataLossError(path + ": " + members.status().message());
    for (auto& [k, v] : *members) r.state_[k] = std::move(v);
  }
  DS_RETURN_IF_ERROR(r.BuildIndex());
  return r;
}

Status CheckpointReader::CheckRankFiles() {
  std::set<int> ranks;
  for (const FileRecord& f : manifest_.files) {
    int rank = 0;
    if (ParseZeroShardFileName(f.name, &rank)) ranks.insert(rank);
  }
  sharded_ = !ranks.empty();
  if (!sharded_) return OkStatus();
  auto ws = manifest_.info.find("world_size");
  if (ws == manifest_.info.end() || std::atoi(ws->second.c_str()) <= 0) {
    return DataLossError(JoinPath(dir_, kManifestFile) +
                         ": rank shard files but no info world_size");
  }
  world_size_ = std::atoi(ws->second.c_str());
  for (int k = 0; k < world_size_; ++k) {
    if (!ranks.count(k)) {
      return DataLossError(JoinPath(dir_, ZeroShardFileName(k)) +
                           ": not in the manifest (world size " + std::to_string(world_size_) +
                           ")");
    }
  }
  if (*ranks.rbegin() >= world_size_) {
    return DataLossError(JoinPath(dir_, ZeroShardFileName(*ranks.rbegin())) +
                         ": rank beyond the manifest's world size " + std::to_string(world_size_));
  }
  return OkStatus();
}

Status CheckpointReader::BuildIndex() {
  DS_RETURN_IF_ERROR(CheckRankFiles());
  std::map<std::string, size_t> param_at;
  for (size_t i = 0; i < manifest_.tensors.size(); ++i) {
    const TensorRecord& t = manifest_.tensors[i];
    const std::string where = JoinPath(dir_, t.file) + ": tensor " + t.name;
    RecordName n;
    DS_ASSIGN_OR_RETURN(const bool indexed, NameRecord(t, where, sharded_, &n));
    if (!indexed) continue;
    auto [it, fresh] = param_at.emplace(n.param, params_.size());
    if (fresh) params_.emplace_back(n.param, n.shape);
    if (params_[it->second].second != n.shape) {
      return DataLossError(where + ": parameter " + n.param + " has shape " +
                           ShapeToString(n.shape) + " here but " +
                           ShapeToString(params_[it->second].second) + " elsewhere");
    }
    // A strided record: one reference per row.
    const int64_t rows = t.shard && t.shard->row_stride > 0 ? t.spec.shape[0] : 1;
    const int64_t count = t.spec.numel() / std::max<int64_t>(rows, 1);
    for (int64_t row = 0; row < rows; ++row)
      index_[{n.state, n.param}].push_back(
          {i, n.begin + row * (rows > 1 ? t.shard->row_stride : 0), count, row * count});
  }
  return CheckTiling(param_at);
}

Status CheckpointReader::CheckTiling(const std::map<std::string, size_t>& param_at) {
  for (auto& [key, slices] : index_) {
    std::sort(slices.begin(), slices.end(),
              [](const SliceRef& a, const SliceRef& b) { return a.begin < b.begin; });
    const int64_t numel = NumElements(params_[param_at.at(key.second)].second);
    const std::string what = key.first + "/" + key.second;
    int64_t next = 0;
    for (size_t j = 0; j < slices.size(); ++j) {
      const SliceRef& s = slices[j];
      const TensorRecord& t = manifest_.tensors[s.record];
      if (s.begin < next) {
        const TensorRecord& prev = manifest_.tensors[slices[j - 1].record];
        return DataLossError(JoinPath(dir_, t.file) + ": " + what + " elements " +
                             Range(s.begin, s.begin + s.count) + " overlap " + prev.name + " in " +
                             JoinPath(dir_, prev.file));
      }
      if (s.begin > next) {
        return DataLossError(dir_ + ": " + what + " elements " + Range(next, s.begin) +
                             " are in no file (gap before " + t.name + " in " + t.file + ")");
      }
      next = s.begin + s.count;
    }
    if (next != numel) {
      return DataLossError(dir_ + ": " + what + " elements " + Range(next, numel) +
                           " are in no file");
    }
  }
  return OkStatus();
}

const std::vector<SliceRef>* CheckpointReader::Slices(const std::string& state,
                                                      const std::string& param) const {
  auto it = index_.find({state, param});
  return it == index_.end() ? nullptr : &it->second;
}

StatusOr<const SafetensorsFile*> CheckpointReader::Map(const std::string& name) {
  if (auto it = files_.find(name); it != files_.end()) return &it->second;
  const std::string path = JoinPath(dir_, name);
  const FileRecord* rec = nullptr;
  for (const FileRecord& f : manifest_.files) {
    if (f.name == name) rec = &f;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return DataLossError(path + ": missing (listed in the manifest)");
    return ErrnoToStatus(errno, "stat(" + path + ")");
  }
  if (rec == nullptr || static_cast<uint64_t>(st.st_size) != rec->bytes) {
    return DataLossError(path + ": size " + std::to_string(st.st_size) + " bytes, manifest says " +
                         std::to_string(rec ? rec->bytes : 0));
  }
  DS_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(path));
  int rank = 0;
  if (ParseZeroShardFileName(name, &rank)) {
    const auto& meta = sf.metadata();
    auto get = [&](const char* k) {
      auto it = meta.find(k);
      return it == meta.end() ? std::string("(none)") : it->second;
    };
    if (get("format") != kShardFormat || get("rank") != std::to_string(rank) ||
        get("world_size") != std::to_string(world_size_) ||
        get("step") != std::to_string(manifest_.step)) {
      return DataLossError(path + ": metadata inconsistent with the manifest (rank " + get("rank") +
                           ", world_size " + get("world_size") + ", step " + get("step") +
                           "; expected rank " + std::to_string(rank) + ", world_size " +
                           std::to_string(world_size_) + ", step " +
                           std::to_string(manifest_.step) + ")");
    }
  }
  return &files_.emplace(name, std::move(sf)).first->second;
}

Status CheckpointReader::Verify(const std::string& state, const std::string& param, int64_t lo,
                                int64_t hi) {
  const std::vector<SliceRef>* slices = Slices(state, param);
  if (slices == nullptr) {
    return DataLossError(dir_ + ": " + state + "/" + param + " is missing (no file holds it)");
  }
  for (const SliceRef& s : *slices) {
    if (s.begin + s.count <= lo || s.begin >= hi || verified_.count(s.record)) continue;
    const TensorRecord& t = manifest_.tensors[s.record];
    DS_ASSIGN_OR_RETURN(const SafetensorsFile* f, Map(t.file));
    const SafetensorsEntry* e = f->Find(t.name);
    const std::string where = f->path() + ": tensor " + t.name;
    if (e == nullptr) return DataLossError(where + " listed in the manifest is missing");
    if (e->spec.dtype != t.spec.dtype || e->spec.shape != t.spec.shape || !IsFloat(e->spec.dtype)) {
      return DataLossError(where + " is " + DTypeName(e->spec.dtype) + " " +
                           ShapeToString(e->spec.shape) + " in the file, " +
                           DTypeName(t.spec.dtype) + " " + ShapeToString(t.spec.shape) +
                           " in the manifest (a float tensor is needed)");
    }
    const uint32_t crc = Crc32c(e->data, e->nbytes());
    if (crc != t.crc32c) {
      return DataLossError(where + " checksum mismatch (manifest " + Crc32cHex(t.crc32c) +
                           ", file " + Crc32cHex(crc) + ")");
    }
    verified_.insert(s.record);
  }
  return OkStatus();
}

Status CheckpointReader::Read(const std::string& state, const std::string& param, int64_t lo,
                              int64_t hi, float* dst) {
  DS_RETURN_IF_ERROR(Verify(state, param, lo, hi));
  for (const SliceRef& s : *Slices(state, param)) {
    const int64_t a = std::max(lo, s.begin), b = std::min(hi, s.begin + s.count);
    if (a >= b) continue;
    const TensorRecord& t = manifest_.tensors[s.record];
    CopyAsF32(*files_.at(t.file).Find(t.name), s.at + (a - s.begin), b - a, dst + (a - lo));
  }
  return OkStatus();
}

Status CheckpointReader::VerifyFile(const FileRecord& f) {
  const std::string path = JoinPath(dir_, f.name);
  if (!IsSafetensors(f.name)) {
    DS_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
    if (contents.size() != f.bytes) {
      return DataLossError(path + ": size " + std::to_string(contents.size()) +
                           " bytes, manifest says " + std::to_string(f.bytes));
    }
    const uint32_t crc = Crc32c(contents.data(), contents.size());
    if (crc != f.crc32c) {
      return DataLossError(path + ": file checksum mismatch (manifest " + Crc32cHex(f.crc32c) +
                           ", file " + Crc32cHex(crc) + ")");
    }
    return OkStatus();
  }
  DS_ASSIGN_OR_RETURN(const SafetensorsFile* sf, Map(f.name));
  std::set<std::string> listed;
  for (const TensorRecord& t : manifest_.tensors) {
    if (t.file != f.name) continue;
    listed.insert(t.name);
    const SafetensorsEntry* e = sf->Find(t.name);
    if (e == nullptr || e->spec.dtype != t.spec.dtype || e->spec.shape != t.spec.shape) {
      return DataLossError(path + ": tensor " + t.name +
                           " is missing or differs from the manifest");
    }
  }
  for (const SafetensorsEntry& e : sf->tensors()) {
    if (!listed.count(e.name)) {
      return DataLossError(path + ": tensor " + e.name + " is not listed in the manifest");
    }
  }
  const uint32_t crc = Crc32c(sf->file_data(), sf->file_bytes());
  if (crc != f.crc32c) {
    return DataLossError(path + ": file checksum mismatch (manifest " + Crc32cHex(f.crc32c) +
                         ", file " + Crc32cHex(crc) + ")");
  }
  return OkStatus();
}

}  // namespace ds::ckpt
