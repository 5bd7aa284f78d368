// Writing a Hugging Face folder's weights as transformers' save_pretrained(max_shard_size=...)
// lays them out, the counterpart of HfWeights (hf_weights.h): one model.safetensors when they
// fit one shard, else model-00001-of-0000N.safetensors ... and model.safetensors.index.json.
//
//   DS_ASSIGN_OR_RETURN(int64_t max, ParseShardSize("5GB"));
//   DS_ASSIGN_OR_RETURN(int shards, WriteHfFolder("out", tensors, max, {{"format", "pt"}}));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/safetensors.h"

namespace ds::ckpt {

// transformers' spelling of a size: "5GB" (10^9 bytes), "500MB", "20KB", "2GiB" (2^30), "MiB",
// "KiB", or a plain number of bytes. InvalidArgument naming the text otherwise, or for <= 0.
StatusOr<int64_t> ParseShardSize(const std::string& text);

// Writes `tensors` into folder `dir` (made if missing), in the given order: a new shard starts
// when the next tensor would take the current one past max_shard_bytes of data (a larger
// tensor gets a shard of its own), each shard written atomically (WriteSafetensors) with
// `metadata`, the index ({"metadata": {"total_size": data bytes}, "weight_map": ...}) last,
// atomically too. Weights of an earlier export in `dir` that this one does not replace
// (model.safetensors, the index, model-*-of-*.safetensors) are removed, so the folder never
// mixes two exports. Returns the number of shards.
StatusOr<int> WriteHfFolder(const std::string& dir, const std::vector<NamedTensor>& tensors,
                            int64_t max_shard_bytes,
                            const std::map<std::string, std::string>& metadata);

// The same for tensors made one at a time: `fill(i, dst)` writes tensor i's bytes (its spec's
// dtype, row-major) into dst when its shard is written, and each shard streams to a temporary
// name renamed when complete, so memory holds one tensor whatever the model's size.
using TensorFill = std::function<Status(size_t index, void* dst)>;
StatusOr<int> WriteHfFolderStreaming(const std::string& dir,
                                     const std::vector<std::pair<std::string, TensorSpec>>& specs,
                                     int64_t max_shard_bytes,
                                     const std::map<std::string, std::string>& metadata,
                                     const TensorFill& fill);

}  // namespace ds::ckpt
