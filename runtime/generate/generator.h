// Generator: batched autoregressive generation with a KV cache over a model's parameters, the
// library path the task evaluation, ds-generate and (later) RLHF's rollouts call.
//
// The rank's InferencePlan (runtime/planner/inference_plan.h) runs as two executors over the same
// ParamStore and the same caches: prefill (the prompts left-padded to the longest, P tokens) and
// one decode step (1 token per sequence). Left padding puts step t of every sequence at cache slot
// P + t; token (b, t) is at position t - pad_b, and the kv_attention ops mask the pad slots, so a
// padded sequence computes what it would alone. Sequences that stop (a stop token) are held
// while the others go on; their later outputs are not recorded.
// With tensor parallelism each tp rank holds its heads and vocabulary rows (a tp-partitioned
// ParamStore) and runs its plan's stream: forward ranges with sum all-reduces on the tp group
// between them, and the logits all-gathered, so every rank samples the same tokens. Every tp
// rank must call the same methods with the same arguments.
//
//   DS_ASSIGN_OR_RETURN(auto gen, Generator::Create(model, &params, {/*max_batch=*/8, 256}));
//   GenerateRequest r;  r.prompts = {{1, 2, 3}, {4}};  r.max_new_tokens = 20;
//   DS_ASSIGN_OR_RETURN(GenerateResult out, gen->Generate(r));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"
#include "runtime/exec/executor.h"
#include "runtime/generate/sampler.h"
#include "runtime/planner/inference_plan.h"
#include "zero/param_store.h"

namespace ds::generate {

struct GeneratorOptions {
  int64_t max_batch = 8;  // sequences per call
  int64_t max_len = 0;    // cache slots per sequence (prompt + new tokens); 0: max_seq_len
  // Tensor parallelism: this rank's place in `tp` ranks and their group (borrowed).
  int tp = 1, tp_rank = 0;
  parallel::Communicator* tp_comm = nullptr;
  // The hybrid engine without pinned parameters (ZeRO-3, DeepSpeed's pin_parameters false):
  // every forward runs its blocks gather_blocks at a time, calling gather(first, last) before
  // and release(first, last) after (blocks -1: the embeddings, to num_blocks: the head). With
  // collectives in them the ranks must run the same forwards: any_live(this rank has live
  // sequences) returns whether any rank has, and a rank whose sequences all ended keeps decoding
  // (its outputs not recorded) until none has. 0: none of this.
  int gather_blocks = 0;
  std::function<Status(int, int)> gather, release;
  std::function<StatusOr<bool>(bool)> any_live;
};

struct GenerateRequest {
  std::vector<std::vector<int32_t>> prompts;  // token ids, each non-empty
  int64_t max_new_tokens = 16;
  std::vector<int32_t> stop_tokens;  // a sequence ends after emitting one
  int32_t pad_token = 0;             // what left padding feeds (masked)
  SamplingOptions sampling;
  // Prompt b draws as sequence first_sequence + b (sampler.h): a caller that splits its prompts
  // into batches keeps each prompt's own stream.
  int64_t first_sequence = 0;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // per prompt: the new tokens (a stop token last)
  int64_t prefill_tokens = 0;                // prompt tokens (pads left out)
  int64_t decode_tokens = 0;                 // tokens generated after the first
  double prefill_ms = 0, decode_ms = 0;
};

class Generator {
 public:
  // InvalidArgument when the model cannot be cached (decode_graph.h) or the options are out of
  // range. `params` (the model's, laid out from `model`) is borrowed and read at every call.
  static StatusOr<std::unique_ptr<Generator>> Create(const Graph& model, zero::ParamStore* params,
                                                     const GeneratorOptions& options);

  // InvalidArgument, before any compute, for an empty or too long prompt (prompt +
  // max_new_tokens beyond max_len), too many prompts or bad sampling options.
  StatusOr<GenerateResult> Generate(const GenerateRequest& request);

  // The steps Generate takes, for tests and callers that choose tokens themselves: Prefill
  // fills the caches from the prompts; Decode appends one token per sequence; Logits(b) is
  // sequence b's next-token logits [vocab] after either.
  Status Prefill(const std::vector<std::vector<int32_t>>& prompts, int32_t pad_token);
  Status Decode(const std::vector<int32_t>& tokens);
  const float* Logits(int64_t b) const;
  // The executor of the last Prefill or Decode (its activations: the routers' choices).
  const exec::Executor& executor() const { return *last_; }

  int64_t vocab() const { return plan_.decode.vocab; }
  int64_t max_len() const { return plan_.decode.max_len; }
  int64_t max_batch() const { return max_batch_; }
  const planner::DecodeGraphInfo& info() const { return plan_.decode; }
  const planner::InferencePlan& plan() const { return plan_; }

 private:
  Generator(planner::InferencePlan plan, zero::ParamStore* params, int64_t max_batch,
            parallel::Communicator* tp_comm);
  // Nodes [begin, end) of `ex`, gather_blocks blocks at a time with their gather and release.
  Status ForwardInGroups(exec::Executor* ex, int begin, int end);
  // An executor for (batch, seq) over the caches and this shape's positions buffer.
  StatusOr<exec::Executor*> ExecutorFor(int64_t batch, int64_t seq);
  Status Run(exec::Executor* ex, const std::vector<int32_t>& ids, int64_t seq);
  // The plan's stream on `ex` for `tokens` = batch x seq tokens.
  Status RunStream(exec::Executor* ex, int64_t tokens);

  planner::InferencePlan plan_;
  GeneratorOptions options_;
  zero::ParamStore* params_;
  parallel::Communicator* tp_comm_;
  std::vector<float> gathered_, logits_;  // tp > 1: [tp][batch][vocab / tp], [batch][vocab]
  int64_t max_batch_;
  std::vector<std::vector<float>> caches_;  // per layer: k, v, each [max_batch, Hkv, max_len, D]
  int32_t start_ = 0;                       // the slot of the next token
  std::vector<int32_t> pad_;                // [max_batch]
  int64_t batch_ = 0;                       // sequences of the current generation
  struct Shaped {
    std::vector<int32_t> positions;  // [batch, seq]
    std::unique_ptr<exec::Executor> ex;
  };
  std::map<std::pair<int64_t, int64_t>, Shaped> executors_;  // by (batch, seq)
  exec::Executor* last_ = nullptr;                           // the one that ran last
};

}  // namespace ds::generate
