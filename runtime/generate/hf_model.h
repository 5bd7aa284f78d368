// A Hugging Face model directory (config.json, model.safetensors or its shards) as our graph
// and parameters, for every family runtime/hf reads: what ds-generate --hf and the generation
// benchmarks load. The config becomes a ModelSpec (runtime/hf/hf_config.h), the weights come
// through the family's tensor map (runtime/ckpt/hf_params.h). Anything the graph would compute
// differently is refused naming the config key.
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

StatusOr<HfModel> LoadHfModel(const std::string& dir);

}  // namespace ds::generate
