// See hf_shards.h. Shard names follow transformers: model-%05d-of-%05d.safetensors, counted from
// 1; the index maps every tensor to its shard and records the data bytes of all of them.
#include "runtime/ckpt/hf_shards.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"

namespace ds::ckpt {
namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string ShardName(int i, int n) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i + 1, n);
  return name;
}

bool IsShardName(const std::string& name) {
  int i = 0, n = 0;
  char rest[16] = {};
  return std::sscanf(name.c_str(), "model-%5d-of-%5d.%15s", &i, &n, rest) == 3 &&
         std::string(rest) == "safetensors";
}

// Groups tensor indices into shards of at most `max` data bytes (a larger tensor alone).
std::vector<std::vector<size_t>> Split(const std::vector<std::pair<std::string, TensorSpec>>& specs,
                                       int64_t max) {
  std::vector<std::vector<size_t>> shards(1);
  int64_t size = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t bytes =
        specs[i].second.numel() * static_cast<int64_t>(DTypeSize(specs[i].second.dtype));
    if (!shards.back().empty() && size + bytes > max) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(i);
    size += bytes;
  }
  return shards;
}

// Removes the weights of an earlier export that `keep` does not name.
Status RemoveStale(const std::string& dir, const std::set<std::string>& keep) {
  DS_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  for (const std::string& name : names) {
    const bool weights = name == kSingle || name == kIndex || IsShardName(name);
    if (weights && !keep.count(name)) DS_RETURN_IF_ERROR(RemoveTree(JoinPath(dir, name)));
  }
  return OkStatus();
}

}  // namespace

StatusOr<int64_t> ParseShardSize(const std::string& text) {
  static const std::pair<const char*, int64_t> kUnits[] = {{"GIB", int64_t{1} << 30},
                                                           {"MIB", int64_t{1} << 20},
                                                           {"KIB", int64_t{1} << 10},
                                                           {"GB", 1000000000},
                                                           {"MB", 1000000},
                                                           {"KB", 1000},
                                                           {"B", 1},
                                                           {"", 1}};
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& [unit, scale] : kUnits) {
    const size_t n = std::string(unit).size();
    if (upper.size() <= n || upper.compare(upper.size() - n, n, unit) != 0) continue;
    const std::string number = upper.substr(0, upper.size() - n);
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end == number.c_str() || *end != '\0' || !(v > 0)) break;
    return static_cast<int64_t>(v * static_cast<double>(scale));
  }
  return InvalidArgumentError("max_shard_size \"" + text +
                              "\": expected a positive size such as 5GB, 500MB, 2GiB or bytes");
}

namespace {

// One shard file: its tensors' bytes from `fill`, streamed (written to a temporary name and
// renamed when complete).
Status WriteShard(const std::string& path,
                  const std::vector<std::pair<std::string, TensorSpec>>& specs,
                  const std::vector<size_t>& members,
                  const std::map<std::string, std::string>& metadata, const TensorFill& fill) {
  std::vector<std::pair<std::string, TensorSpec>> part;
  for (size_t i : members) part.push_back(specs[i]);
  DS_ASSIGN_OR_RETURN(auto writer, SafetensorsStreamWriter::Create(path, part, metadata));
  std::vector<char> bytes;
  for (size_t i : members) {
    bytes.resize(specs[i].second.numel() * DTypeSize(specs[i].second.dtype));
    DS_RETURN_IF_ERROR(fill(i, bytes.data()));
    DS_RETURN_IF_ERROR(writer->Append(bytes.data(), bytes.size()));
  }
  return writer->Finish().status();
}

}  // namespace

StatusOr<int> WriteHfFolderStreaming(const std::string& dir,
                                     const std::vector<std::pair<std::string, TensorSpec>>& specs,
                                     int64_t max_shard_bytes,
                                     const std::map<std::string, std::string>& metadata,
                                     const TensorFill& fill) {
  if (max_shard_bytes <= 0) return InvalidArgumentError("max_shard_size must be > 0");
  DS_RETURN_IF_ERROR(CreateDirs(dir));
  const std::vector<std::vector<size_t>> shards = Split(specs, max_shard_bytes);
  const int n = static_cast<int>(shards.size());
  if (n == 1) {
    DS_RETURN_IF_ERROR(WriteShard(JoinPath(dir, kSingle), specs, shards[0], metadata, fill));
    DS_RETURN_IF_ERROR(RemoveStale(dir, {kSingle}));
    return 1;
  }
  std::set<std::string> written = {kIndex};
  Json map = Json::Object();
  int64_t total = 0;
  for (int s = 0; s < n; ++s) {
    for (size_t i : shards[s]) {
      map.Set(specs[i].first, Json::String(ShardName(s, n)));
      total += specs[i].second.numel() * static_cast<int64_t>(DTypeSize(specs[i].second.dtype));
    }
    DS_RETURN_IF_ERROR(
        WriteShard(JoinPath(dir, ShardName(s, n)), specs, shards[s], metadata, fill));
    written.insert(ShardName(s, n));
  }
  Json index = Json::Object(), meta = Json::Object();
  meta.Set("total_size", Json::Int(total));
  index.Set("metadata", std::move(meta));
  index.Set("weight_map", std::move(map));
  DS_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kIndex), index.Dump(2) + "\n"));
  DS_RETURN_IF_ERROR(RemoveStale(dir, written));
  return n;
}

StatusOr<int> WriteHfFolder(const std::string& dir, const std::vector<NamedTensor>& tensors,
                            int64_t max_shard_bytes,
                            const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, TensorSpec>> specs;
  for (const NamedTensor& t : tensors) specs.push_back({t.name, t.tensor.spec()});
  return WriteHfFolderStreaming(dir, specs, max_shard_bytes, metadata, [&](size_t i, void* dst) {
    std::memcpy(dst, tensors[i].tensor.data(), tensors[i].tensor.nbytes());
    return OkStatus();
  });
}

}  // namespace ds::ckpt
