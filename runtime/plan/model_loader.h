// Turns a job's `model` section into a validated Graph: a graph file, a Hugging Face folder
// (model.hf: its config.json through runtime/hf), or the built-in GPT-2 / Llama generator
// settings.
#pragma once

#include "runtime/config/job_config.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/lora.h"
#include "runtime/graph/model_builder.h"

namespace ds::plan {

// model.hf's spec: config.json's architecture with the job's head, pad mask, dropout (when
// given) and sequence length (RoPE models run past max_position_embeddings; learned positions
// cannot, which is refused).
StatusOr<ModelSpec> HfModelSpec(const config::JobConfig& config);

// The generator's spec of a `model: {family: ...}` job (gpt2 or llama).
StatusOr<ModelSpec> GeneratedModelSpec(const config::JobConfig& config);

// The job's model: the base graph, with model.lora's adapters when the job has them (their
// targets named by the family's Hugging Face modules, the base weights frozen as asked).
StatusOr<Graph> LoadModelGraph(const config::JobConfig& config);
// The model without the adapters: what the frozen weights and a merged export are named by.
StatusOr<Graph> LoadBaseGraph(const config::JobConfig& config);
// model.lora on `graph` (built from `spec`); the graph unchanged without it.
StatusOr<Graph> WithLora(const config::JobConfig& config, const ModelSpec& spec, Graph graph);
// The rewrite's options from the job's keys (PEFT's scale alpha / r, or rsLoRA's, or
// DeepSpeed-Chat's lora_scaling / lora_dim with its initialization).
LoraOptions LoraOptionsOf(const config::LoraConfig& lora);

}  // namespace ds::plan
