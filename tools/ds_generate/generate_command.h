// ds-generate's work, apart from its flag parsing (main.cc): load a model (a Hugging Face
// directory, or a job config's checkpoint through the Trainer), run the prompts through the
// Generator (runtime/generate/generator.h) in batches, and print the completions as text or
// JSONL with prefill and decode tokens per second.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/generate/sampler.h"

namespace ds::tools {

struct GenerateFlags {
  std::string hf;          // a Hugging Face model directory (config.json, model.safetensors)
  std::string config;      // or a job config: its checkpoint (checkpoint.load, else the latest)
  std::string checkpoint;  // with --config: this checkpoint (a step directory or a root)
  std::string tokenizer;   // a tokenizer.json (default: --hf's own, if it has one)
  std::vector<std::string> prompts;     // text: the tokenizer's, or bytes for byte-level models
  std::vector<std::string> prompt_ids;  // "1,2,3": token ids
  std::string prompts_file;             // JSONL: {"prompt": "..."} or {"ids": [...]} per line
  int64_t max_new_tokens = 16;
  int64_t max_len = 0;  // 0: the model's max_seq_len
  int64_t batch = 8;    // sequences per Generate call
  std::string stop_ids;
  generate::SamplingOptions sampling;  // greedy unless main.cc sees a sampling flag
  bool jsonl = false;
  int threads = 0;  // 0: OpenMP's default
};

// InvalidArgument naming the flag, file or line; the model's own errors as they come.
Status RunGenerate(const GenerateFlags& flags, std::FILE* out);

}  // namespace ds::tools
