// HfWeights: a Hugging Face model's weights as the Hub stores them, mapped read-only: one
// model.safetensors, or model.safetensors.index.json whose weight_map names the shard file of
// every tensor (transformers' save_pretrained with max_shard_size). Nothing is copied: each
// shard is mapped once and the tensors are views into the mappings, valid as long as the
// HfWeights lives. Immutable after Open; safe to read from many threads.
//
//   DS_ASSIGN_OR_RETURN(HfWeights w, HfWeights::Open("Llama-3.2-1B"));
//   for (const NamedTensor& t : w.tensors()) ...   // sorted by name, whatever shard holds it
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/safetensors.h"

namespace ds::ckpt {

class HfWeights {
 public:
  // `path`: a model folder (its model.safetensors, else its model.safetensors.index.json), an
  // index file, or one .safetensors file. Every error names the file and the problem, before
  // any tensor is read: no weights in the folder (NotFound); an index that is not JSON, has no
  // "weight_map" object, or names a shard that is not a plain file name beside it
  // (InvalidArgument); a shard that cannot be opened or is not valid safetensors (its error,
  // with the index and the first tensor mapped to it); a tensor the index maps to a shard that
  // does not hold it, or a shard tensor the index does not list or maps elsewhere (DataLoss).
  static StatusOr<HfWeights> Open(const std::string& path);

  // Every tensor, sorted by name.
  const std::vector<NamedTensor>& tensors() const { return tensors_; }
  // The index's path for a sharded folder, else the file's: what errors about the weights name.
  const std::string& label() const { return label_; }
  size_t shard_count() const { return shards_.size(); }
  // The files, in the order the index names them (the single file when there is no index).
  std::vector<std::string> paths() const;

 private:
  Status AddIndex(const std::string& index_path);
  void AddShard(SafetensorsFile file);

  std::vector<SafetensorsFile> shards_;
  std::vector<NamedTensor> tensors_;
  std::string label_;
};

}  // namespace ds::ckpt
