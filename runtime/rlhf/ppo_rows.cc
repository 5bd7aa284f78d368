#include "runtime/rlhf/ppo_rows.h"

#include <algorithm>

namespace ds::rlhf {

Status RolloutSource::Next(int32_t* in, int32_t* out) {
  const int64_t n = micro_ * seq_, at = next_ * n;
  if (at + n > static_cast<int64_t>(ids.size()))
    return InternalError("rlhf: the rollout has no micro-batch " + std::to_string(next_));
  std::copy_n(ids.begin() + at, n, in);
  std::copy_n(targets.begin() + at, n, out);
  for (auto& [name, input] : inputs) std::copy_n(input.second.begin() + at, n, input.first.f32());
  if (pads.first.defined())
    std::copy_n(pads.second.begin() + next_ * micro_, micro_, pads.first.i32());
  ++next_;
  return OkStatus();
}

Rows Lay(const std::vector<std::vector<int32_t>>& prompts,
         const std::vector<std::vector<int32_t>>& answers, int64_t p, int64_t seq, int32_t pad) {
  const int64_t n = static_cast<int64_t>(prompts.size());
  Rows r;
  r.ids.assign(n * seq, pad);
  r.targets.assign(n * seq, pad);
  r.ends.assign(n * seq, 0);
  r.mask_int.assign(n * seq, 0);
  r.pads.assign(n, 0);
  r.batch = {n, seq, p - 1, std::vector<float>(n * seq, 0.f)};
  for (int64_t b = 0; b < n; ++b) {
    int32_t* row = r.ids.data() + b * seq;
    r.pads[b] = static_cast<int32_t>(p - prompts[b].size());
    std::copy(prompts[b].begin(), prompts[b].end(), row + r.pads[b]);
    const int64_t k = std::min<int64_t>(answers[b].size(), seq - p);
    std::copy_n(answers[b].begin(), k, row + p);
    for (int64_t t = 0; t + 1 < seq; ++t) r.targets[b * seq + t] = row[t + 1];
    for (int64_t t = p - 1; t < p - 1 + k; ++t) {
      r.batch.mask[b * seq + t] = 1.f;
      r.mask_int[b * seq + t] = 1;
    }
    r.ends[b * seq + p + k - 1] = 1;
  }
  return r;
}

Status CheckPads(const Graph& g, const std::string& source, const std::vector<int32_t>& pads) {
  if (g.FindTensor(kLeftPads) >= 0) return OkStatus();
  for (size_t b = 0; b < pads.size(); ++b)
    if (pads[b] > 0)
      return InvalidArgumentError(source + ": prompt " + std::to_string(b) + " is left-padded by " +
                                  std::to_string(pads[b]) +
                                  " and the model has no pad mask (model.pad_mask "
                                  "true: prompts of several lengths)");
  return OkStatus();
}

void SetPads(exec::Executor* ex, const std::vector<int32_t>& pads) {
  const int t = ex->graph().FindTensor(kLeftPads);
  if (t >= 0) std::copy(pads.begin(), pads.end(), ex->TensorData(t, false).i32());
}

}  // namespace ds::rlhf
