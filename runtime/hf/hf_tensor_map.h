// Which tensors of a Hugging Face checkpoint make each parameter of the graph a ModelSpec
// builds, for every family hf_config.h reads (names: models-and-data.md sections 1-3): a
// tensor as it is; transposed (GPT-2's Conv1D); q, k and v concatenated by rows into our fused
// attn.qkv (Llama, Qwen, OPT, ...); a row range of a fused tensor (Phi 3's gate_up_proj); or
// GPT-NeoX's per-head interleaved query_key_value regrouped as [q heads, k heads, v heads].
// The same map runs backwards for export (ds-ckpt export). Pure names and shapes: the readers
// that move bytes are in runtime/ckpt/hf_params.h.
//
//   DS_ASSIGN_OR_RETURN(HfTensorMap map, MapHfTensors(spec, graph));
//   for (const HfParam& p : map.params) ...  // every parameter, in the graph's order
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/model_builder.h"

namespace ds::hf {

struct HfSource {
  enum class Kind : uint8_t {
    kCopy,             // names[0] as it is
    kTranspose,        // names[0] is [in, out] (Conv1D), ours [out, in]
    kConcatRows,       // names in row order
    kRowSlice,         // rows [begin, end) of names[0]
    kHeadInterleaved,  // names[0] is [heads, 3, head_dim, ...]; ours [3, heads, head_dim, ...]
    kInitialized       // no checkpoint tensor: the value head DeepSpeed-Chat adds keeps its
                       // initialization
  };
  Kind kind = Kind::kCopy;
  std::vector<std::string> names;
  int64_t begin = 0, end = 0;  // kRowSlice
  int64_t heads = 0;           // kHeadInterleaved
  std::vector<int64_t> rows;   // kConcatRows: each name's rows
};

struct HfParam {
  std::string ours;  // the graph parameter
  Shape shape;       // its shape
  HfSource source;
};

struct HfTensorMap {
  std::vector<HfParam> params;  // every graph parameter, in the graph's order
  // Tensors a file may hold that no parameter reads: buffers of older exports, a tied head.
  std::vector<std::string> ignored;
  // Prefixes a file may leave out ("transformer." in bare GPT-2 files, "model." in OPTModel's):
  // a name missing from the file is looked up without them.
  std::vector<std::string> optional_prefixes;
};

// The map for `graph`, built from `spec` (BuildModelGraph): its weights, trained or frozen, in
// declaration order; LoRA's adapters (runtime/graph/lora.h) have none. InvalidArgument for a
// parameter no rule covers (a graph of another family, MoE experts), naming it.
StatusOr<HfTensorMap> MapHfTensors(const ModelSpec& spec, const Graph& graph);

// One tensor of an exported folder: the rows [begin, end) of parameters (map.params indices),
// concatenated, in the file's layout: transposed back (GPT-2's Conv1D) or re-interleaved per
// head (GPT-NeoX) when the parameter was read so. The value head is written as
// DeepSpeed-Chat's reward model names it ("v_head.weight").
struct HfOutput {
  struct Piece {
    int param = 0;
    int64_t begin = 0, end = 0;  // rows of the parameter
  };
  std::string name;
  Shape shape;                                  // in the file
  HfSource::Kind kind = HfSource::Kind::kCopy;  // kCopy, kTranspose or kHeadInterleaved
  int64_t heads = 0;
  std::vector<Piece> pieces;
};
// Every tensor the map writes back, sorted by name.
StatusOr<std::vector<HfOutput>> HfOutputs(const HfTensorMap& map);

}  // namespace ds::hf
