// A Hugging Face checkpoint's config.json as the runtime's ModelSpec: the architecture of
// gpt2, llama (every rope_scaling type Llama 3.x uses), mistral, qwen2, qwen3, phi3, gemma,
// gemma2, opt and gpt_neox (facts: models-and-data.md sections 1-3). Anything the graph would
// compute differently from transformers is refused naming the file and the key (a longrope
// or mrope RoPE, a hidden_act of another kind, dropout where the runtime has none, an unknown
// layer type, ...), before any rank allocates.
//
//   DS_ASSIGN_OR_RETURN(ModelSpec spec, hf::LoadHfSpec("Qwen2.5-0.5B"));
//   DS_ASSIGN_OR_RETURN(Graph g, BuildModelGraph(spec));
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/model_builder.h"

namespace ds::hf {

// The model_type values read (config.json's "model_type").
const std::vector<std::string>& SupportedModelTypes();

// ModelSpec from a config.json's text; `where` (the file) names it in errors.
StatusOr<ModelSpec> SpecFromHfConfig(const std::string& json, const std::string& where);

// Reads `dir`/config.json.
StatusOr<ModelSpec> LoadHfSpec(const std::string& dir);

}  // namespace ds::hf
