// A PPO rollout's rows (ppo_step.h): each prompt left-padded to the batch's prompt width, its
// answer, padding; the targets, the answers' masks and last tokens, each row's left pads, and the
// batch source that serves them to a Trainer micro-batch by micro-batch with its per-token inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/tensor.h"
#include "runtime/data/batch_source.h"
#include "runtime/exec/executor.h"
#include "runtime/graph/graph.h"
#include "runtime/rlhf/ppo_math.h"

namespace ds::rlhf {

// A rollout's rows for one trainer: ids and targets [N, T] and per-token inputs [N, T], served
// micro-batch by micro-batch, and each row's left pads (pad_mask models).
class RolloutSource final : public data::BatchSource {
 public:
  RolloutSource(int64_t micro, int64_t seq) : micro_(micro), seq_(seq) {}
  std::vector<int32_t> ids, targets;
  std::map<std::string, std::pair<Tensor, std::vector<float>>> inputs;  // buffer, rows
  std::pair<Tensor, std::vector<int32_t>> pads;  // buffer (undefined: none), per row
  Status Next(int32_t* in, int32_t* out) override;

 private:
  int64_t micro_, seq_, next_ = 0;
};

// Prompt + answer + padding per row; targets the next token; the answer's log-probability
// positions [prompt - 1, prompt - 1 + n) in the mask; `ends` 1 at each answer's last token.
struct Rows {
  std::vector<int32_t> ids, targets, ends, mask_int;
  std::vector<int32_t> pads;  // left pads per row (prompts shorter than the width)
  PpoBatch batch;
};

// `prompts` left-padded to width `p` with `pad`, their answers after them, seq tokens a row.
Rows Lay(const std::vector<std::vector<int32_t>>& prompts,
         const std::vector<std::vector<int32_t>>& answers, int64_t p, int64_t seq, int32_t pad);

// InvalidArgument when rows are padded and `g` (model `source`) cannot mask the pads.
Status CheckPads(const Graph& g, const std::string& source, const std::vector<int32_t>& pads);

// The executor's left pads, for a pad_mask model's forward (CheckPads held).
void SetPads(exec::Executor* ex, const std::vector<int32_t>& pads);

}  // namespace ds::rlhf
