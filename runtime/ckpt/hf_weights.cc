// See hf_weights.h. The index, as transformers writes it:
//   {"metadata": {"total_size": <bytes>}, "weight_map": {"<tensor>": "<shard file>", ...}}
// The shard files sit beside the index; every tensor appears in exactly one of them.
#include "runtime/ckpt/hf_weights.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"

namespace ds::ckpt {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The shard of each tensor, from the index's weight_map; errors name the index.
StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  DS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  StatusOr<Json> j = ParseJson(text);
  if (!j.ok()) return j.status().WithPrefix(index_path);
  const Json* map = j->Find("weight_map");
  if (map == nullptr || !map->is_object())
    return InvalidArgumentError(index_path + ": no \"weight_map\" object");
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, file] : map->members()) {
    const std::string s = file.is_string() ? file.as_string() : "";
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      return InvalidArgumentError(index_path + ": the weight_map entry of \"" + name +
                                  "\" must be a shard file name beside the index, got " +
                                  file.Dump());
    shard_of[name] = s;
  }
  if (shard_of.empty()) return InvalidArgumentError(index_path + ": the weight_map is empty");
  return shard_of;
}

}  // namespace

StatusOr<HfWeights> HfWeights::Open(const std::string& path) {
  HfWeights w;
  if (IsDirectory(path)) {
    const std::string single = JoinPath(path, "model.safetensors");
    const std::string index = JoinPath(path, "model.safetensors.index.json");
    if (PathExists(single)) return Open(single);
    if (PathExists(index)) return Open(index);
    return NotFoundError(path + ": no model.safetensors or model.safetensors.index.json");
  }
  w.label_ = path;
  if (EndsWith(path, ".json")) {
    DS_RETURN_IF_ERROR(w.AddIndex(path));
  } else {
    DS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
    w.AddShard(std::move(f));
  }
  std::sort(w.tensors_.begin(), w.tensors_.end(),
            [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; });
  return w;
}

void HfWeights::AddShard(SafetensorsFile file) {
  for (const SafetensorsEntry& e : file.tensors()) tensors_.push_back({e.name, e.view()});
  shards_.push_back(std::move(file));
}

Status HfWeights::AddIndex(const std::string& index_path) {
  DS_ASSIGN_OR_RETURN(auto shard_of, ReadWeightMap(index_path));
  std::map<std::string, std::string> first_tensor;  // shard -> a tensor mapped to it
  std::set<std::string> held;                       // names the shards hold
  for (const auto& [name, shard] : shard_of) first_tensor.emplace(shard, name);
  for (const auto& [shard, example] : first_tensor) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::Open(JoinPath(DirName(index_path), shard));
    if (!f.ok())
      return f.status().WithPrefix(index_path + ": shard " + shard + " (of \"" + example + "\")");
    for (const SafetensorsEntry& e : f->tensors()) {
      auto it = shard_of.find(e.name);
      if (it == shard_of.end() || it->second != shard)
        return DataLossError(f->path() + ": tensor \"" + e.name + "\" is " +
                             (it == shard_of.end() ? std::string("not in the weight_map of ")
                                                   : "mapped to " + it->second + " by ") +
                             index_path);
      held.insert(e.name);
    }
    AddShard(std::move(*f));
  }
  for (const auto& [name, shard] : shard_of) {
    if (!held.count(name))
      return DataLossError(index_path + ": tensor \"" + name + "\" is mapped to " + shard +
                           ", which does not hold it");
  }
  return OkStatus();
}

std::vector<std::string> HfWeights::paths() const {
  std::vector<std::string> out;
  for (const SafetensorsFile& f : shards_) out.push_back(f.path());
  return out;
}

}  // namespace ds::ckpt
