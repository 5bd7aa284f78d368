// Turns a job's `model` section into a validated Graph: a graph file, a Hugging Face folder
// (model.hf: its config.json through runtime/hf), or the built-in GPT-2 / Llama generator
// settings.
#pragma once

#include "runtime/config/job_config.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/model_builder.h"

namespace ds::plan {

// model.hf's spec: config.json's architecture with the job's head, pad mask, dropout (when
// given) and sequence length (RoPE models run past max_position_embeddings; learned positions
// cannot, which is refused).
StatusOr<ModelSpec> HfModelSpec(const config::JobConfig& config);

// The generator's spec of a `model: {family: ...}` job (gpt2 or llama).
StatusOr<ModelSpec> GeneratedModelSpec(const config::JobConfig& config);

StatusOr<Graph> LoadModelGraph(const config::JobConfig& config);

}  // namespace ds::plan
