// A Hugging Face folder's weights written from our parameters by the family's tensor map
// (runtime/hf/hf_tensor_map.h HfOutputs): each file tensor assembled from the parameters it is
// made of (q/k/v split back, Phi 3's gate_up fused, GPT-2's Conv1D transposed, GPT-NeoX's qkv
// interleaved per head), converted to the requested dtype, and written in shards as
// save_pretrained(max_shard_size) lays them out (hf_shards.h), streamed: memory holds the
// tensor being written and the parameters it reads, never the model.
//
//   DS_ASSIGN_OR_RETURN(int shards, ExportHfFolder("out", map, DType::kBF16, 5e9, read));
#pragma once

#include <functional>
#include <string>

#include "runtime/base/status.h"
#include "runtime/hf/hf_tensor_map.h"

namespace ds::ckpt {

// Reads our parameter `name` (shape `shape`) whole as fp32 into dst.
using ParamRead = std::function<Status(const std::string& name, const Shape& shape, float* dst)>;

// Returns the number of shards written. `read` sees each parameter once per file tensor that
// needs it (q, k and v each read the fused parameter; the last one read is kept).
StatusOr<int> ExportHfFolder(const std::string& dir, const hf::HfTensorMap& map, DType dtype,
                             int64_t max_shard_bytes, const ParamRead& read);

}  // namespace ds::ckpt
