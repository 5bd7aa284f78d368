// A Hugging Face model directory (config.json, model.safetensors) as our graph and parameters:
// GPT-2 (GPT2LMHeadModel) and Llama (LlamaForCausalLM, grouped-query attention included), what
// ds-generate --hf and the generation benchmarks load. The config's shape becomes a ModelSpec
// (runtime/graph/model_builder.h), the weights come through the importer (runtime/ckpt/
// hf_names.h). Anything the graph would compute differently is refused naming the config key
// (another activation, rope_scaling, attention biases in Llama, ...).
//
//   DS_ASSIGN_OR_RETURN(HfModel m, LoadHfModel("gpt2-dir"));
//   DS_ASSIGN_OR_RETURN(auto gen, Generator::Create(m.graph, m.params.get(), {1, 0}));
#pragma once

#include <memory>
#include <string>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/model_builder.h"
#include "zero/param_store.h"

namespace ds::generate {

struct HfModel {
  ModelSpec spec;
  Graph graph;
  std::unique_ptr<zero::ParamStore> params;  // fp32, every parameter set
};

// ModelSpec from a config.json's text; `where` names it in errors.
StatusOr<ModelSpec> SpecFromHfConfig(const std::string& json, const std::string& where);

// `dir`/config.json and `dir`/model.safetensors (one file; a sharded checkpoint is refused by
// name). NotFound / InvalidArgument / DataLoss naming the file and the key or tensor.
StatusOr<HfModel> LoadHfModel(const std::string& dir);

}  // namespace ds::generate
