// ds-generate: generation from a trained checkpoint (--config JOB) or a Hugging Face directory
// (--hf DIR) with the KV cache, greedy or sampled, printing completions as text or JSONL with
// prefill and decode tokens per second.
//
//   ds-generate --config configs/examples/addition.yaml --prompt_ids 3,1,4,11,1,5,9,12
//   ds-generate --hf gpt2-dir --prompt_ids 464,2068 --max_new_tokens 32 --temperature 0.8 --top_p
//   0.9
#include <cstdio>

#include <CLI/CLI.hpp>

#include "runtime/base/logging.h"
#include "tools/ds_generate/generate_command.h"

int main(int argc, char** argv) {
  ds::tools::GenerateFlags f;
  CLI::App app{"ds-generate: generate with a KV cache from a checkpoint or a Hugging Face model"};
  app.add_option("--hf", f.hf, "Hugging Face model directory (config.json, model.safetensors)");
  app.add_option("--config", f.config, "job config: its checkpoint (checkpoint.load, else latest)");
  app.add_option("--checkpoint", f.checkpoint,
                 "with --config: a checkpoint step directory or root");
  app.add_option("--tokenizer", f.tokenizer,
                 "tokenizer.json or SentencePiece .model (default: the --hf directory's)");
  app.add_option("--prompt", f.prompts, "a text prompt (a tokenizer, or a byte-level model)");
  app.add_option("--prompt_ids", f.prompt_ids, "a prompt as token ids, \"1,2,3\"; repeatable");
  app.add_option("--prompts", f.prompts_file, "JSONL: {\"prompt\": text} or {\"ids\": [...]}");
  app.add_option("--max_new_tokens", f.max_new_tokens, "tokens to generate (default 16)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max_len", f.max_len, "cache slots per sequence (default max_seq_len)");
  app.add_option("--batch", f.batch, "sequences per batch (default 8)")->check(CLI::PositiveNumber);
  app.add_option("--stop_ids", f.stop_ids, "token ids that end a sequence, \"a,b\"");
  bool sample = false;
  app.add_flag("--sample", sample, "draw instead of greedy (implied by the options below)");
  auto* t = app.add_option("--temperature", f.sampling.temperature, "softmax temperature");
  auto* k = app.add_option("--top_k", f.sampling.top_k, "keep the k most likely tokens (0: off)");
  auto* p = app.add_option("--top_p", f.sampling.top_p, "keep the nucleus of this mass (1: off)");
  app.add_option("--min_tokens_to_keep", f.sampling.min_tokens_to_keep, "top-k / top-p floor");
  app.add_option("--repetition_penalty", f.sampling.repetition_penalty, "CTRL's penalty (1: off)");
  app.add_option("--seed", f.sampling.seed, "the draws' seed (the same text on every run)");
  app.add_flag("--jsonl", f.jsonl, "one JSON object per prompt, then a summary");
  app.add_option("--threads", f.threads, "OpenMP threads (default: all)");
  CLI11_PARSE(app, argc, argv);
  f.sampling.greedy = !(sample || t->count() || k->count() || p->count());
  ds::Status s = ds::tools::RunGenerate(f, stdout);
  if (!s.ok()) {
    std::fprintf(stderr, "ds-generate: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
