// Next-token choice from one sequence's logits, as Hugging Face's generate processes them:
// repetition penalty (over the tokens the sequence holds so far), then temperature, top-k and
// top-p (each keeping at least min_tokens_to_keep), then the greedy argmax or a draw. A draw
// takes its uniform number from (seed, step, sequence) alone, so the same seed gives the same
// text on every run and every rank, whatever the batch's other sequences.
//
//   SamplingOptions o;  o.temperature = 0.8f;  o.top_p = 0.9f;  o.seed = 7;
//   int32_t next = Sample(logits, vocab, o, held_tokens, step, sequence);
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/status.h"

namespace ds::generate {

struct SamplingOptions {
  bool greedy = true;               // argmax; false: draw from the processed distribution
  float temperature = 1.0f;         // > 0
  int64_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // (0, 1]; 1: off
  int64_t min_tokens_to_keep = 1;   // top-k and top-p keep at least this many
  float repetition_penalty = 1.0f;  // > 0; 1: off (CTRL's: logit / p if > 0, else logit x p)
  uint64_t seed = 0;
};

// InvalidArgument naming the option that is out of range.
Status CheckSamplingOptions(const SamplingOptions& o);

// The tokens a draw may return and their probabilities (summing to 1), in descending order of
// probability (ties by token id); greedy: the argmax alone.
struct Candidates {
  std::vector<int32_t> tokens;
  std::vector<double> probs;
};
Candidates Process(const float* logits, int64_t vocab, const SamplingOptions& o,
                   const std::vector<int32_t>& held);

// The next token of sequence `sequence` at decode step `step`.
int32_t Sample(const float* logits, int64_t vocab, const SamplingOptions& o,
               const std::vector<int32_t>& held, int64_t step, int64_t sequence);

}  // namespace ds::generate
