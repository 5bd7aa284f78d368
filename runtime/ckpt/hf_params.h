// Graph parameters read straight from a Hugging Face folder (HfWeights: one file or shards) by
// the family's tensor map (runtime/hf/hf_tensor_map.h), as fp32, converting f32 / bf16 / f16
// on the fly. Any flat element range of a parameter can be read alone, so a rank reads the
// bytes of its own ZeRO partition or slice and nothing else; no whole-model buffer is made.
//
//   DS_ASSIGN_OR_RETURN(HfParamReader r, HfParamReader::Create(&weights, map));  // checks all
//   DS_RETURN_IF_ERROR(r.Read(i, 0, numel, dst));
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/hf_weights.h"
#include "runtime/hf/hf_tensor_map.h"

namespace ds::ckpt {

class HfParamReader {
 public:
  // Checks, before anything is read, that every source tensor of every parameter is in the
  // folder with the shape and a float dtype the map needs, and that the folder holds no tensor
  // the map neither reads nor knows (each error names the folder's file and the tensor).
  // `weights` must outlive the reader.
  static StatusOr<HfParamReader> Create(const HfWeights* weights, hf::HfTensorMap map);

  const hf::HfTensorMap& map() const { return map_; }
  // Elements [begin, end) of parameter `index` (map().params order), flattened row-major in
  // our layout, into dst[0, end - begin) as fp32. A kInitialized parameter has nothing to read
  // (FailedPrecondition): the caller initializes it.
  Status Read(size_t index, int64_t begin, int64_t end, float* dst) const;
  // The mapped bytes Read(index, begin, end, ...) will touch, as (address, length) spans in the
  // order it touches them: exact for a contiguous source, each source tensor's row span
  // otherwise (a transposed tensor whole). For SpanPrefetcher: the disk streams what this rank
  // reads, in the order it reads it.
  void Spans(size_t index, int64_t begin, int64_t end,
             std::vector<std::pair<const void*, size_t>>* out) const;

 private:
  HfParamReader(const HfWeights* w, hf::HfTensorMap map) : weights_(w), map_(std::move(map)) {}
  // The file's tensor `name` (or its name without an optional prefix).
  const Tensor* Find(const std::string& name) const;
  Status CheckParam(const hf::HfParam& p) const;

  const HfWeights* weights_;
  hf::HfTensorMap map_;
  std::map<std::string, const NamedTensor*> by_name_;
};

// Opens `dir`'s weights and checks them against `graph` (built from `spec`) as Create does,
// reading no tensor: what ds-launch and ds-worker run for model.hf before anything is allocated.
Status CheckHfWeights(const std::string& dir, const ModelSpec& spec, const Graph& graph);

}  // namespace ds::ckpt
