#include "runtime/rlhf/chat_eval.h"

#include <algorithm>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor.h"
#include "runtime/generate/generator.h"

namespace ds::rlhf {

StatusOr<std::vector<float>> Scores(exec::Executor& rm, const std::vector<int32_t>& ids,
                                    const std::vector<int32_t>& ends, int64_t seq) {
  std::copy(ids.begin(), ids.end(), rm.ids());
  std::copy(ends.begin(), ends.end(), rm.targets());
  DS_RETURN_IF_ERROR(rm.Forward(0));
  const float* v = rm.TensorData(rm.graph().FindTensor("values"), false).f32();
  std::vector<float> out;
  for (size_t r = 0; r * seq < ids.size(); ++r)
    for (int64_t t = 0; t < seq; ++t)
      if (ends[r * seq + t]) out.push_back(v[r * seq + t]);
  return out;
}

StatusOr<PairEval> EvaluatePairs(worker::Trainer& rm,
                                 const std::vector<std::vector<TokenExample>>& pairs) {
  const int64_t k = 16;  // pairs per forward
  if (pairs.size() < static_cast<size_t>(k))
    return InvalidArgumentError("rlhf: " + std::to_string(pairs.size()) +
                                " held-out pairs; at least 16 are needed");
  const int64_t seq = pairs[0][0].ids.size();
  DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> ex, rm.MakeInferenceExecutor(2 * k, seq));
  PairEval e;
  int64_t n = 0;
  for (size_t first = 0; first + k <= pairs.size(); first += k) {
    std::vector<int32_t> ids(2 * k * seq), ends(2 * k * seq);
    for (int64_t i = 0; i < k; ++i)
      for (int s = 0; s < 2; ++s) {
        const TokenExample& r = pairs[first + i][s];
        std::copy(r.ids.begin(), r.ids.end(), ids.begin() + (s * k + i) * seq);
        std::copy(r.targets.begin(), r.targets.end(), ends.begin() + (s * k + i) * seq);
      }
    DS_ASSIGN_OR_RETURN(std::vector<float> v, Scores(*ex, ids, ends, seq));
    for (int64_t i = 0; i < k; ++i, ++n) {
      e.accuracy += v[i] > v[k + i];
      e.chosen_mean += v[i];
      e.rejected_mean += v[k + i];
    }
  }
  e.accuracy /= n, e.chosen_mean /= n, e.rejected_mean /= n;
  return e;
}

StatusOr<AnswerEval> EvaluateAnswers(worker::Trainer& actor, worker::Trainer* rm,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& chosen,
                                     const std::vector<int32_t>& stop, int64_t answer_len,
                                     int32_t pad) {
  const int64_t b = 16, p = prompts.at(0).size(), seq = p + answer_len;
  DS_RETURN_IF_ERROR(actor.GatherParams());
  if (rm) DS_RETURN_IF_ERROR(rm->GatherParams());
  auto gen = actor.MakeGenerator(b, seq);
  StatusOr<std::unique_ptr<exec::Executor>> ex = std::unique_ptr<exec::Executor>();
  if (rm) ex = rm->MakeInferenceExecutor(b, seq);
  AnswerEval e;
  Status s = gen.ok() ? ex.status() : gen.status();
  for (size_t first = 0; s.ok() && first + b <= prompts.size(); first += b) {
    generate::GenerateRequest r;
    r.prompts.assign(prompts.begin() + first, prompts.begin() + first + b);
    r.max_new_tokens = answer_len;
    r.stop_tokens = stop;
    auto out = (*gen)->Generate(r);
    if (!(s = out.status()).ok()) break;
    std::vector<int32_t> ids(b * seq, pad), ends(b * seq, 0);
    for (int64_t i = 0; i < b; ++i) {
      const std::vector<int32_t>& a = out->tokens[i];
      std::copy(r.prompts[i].begin(), r.prompts[i].end(), ids.begin() + i * seq);
      std::copy(a.begin(), a.end(), ids.begin() + i * seq + p);
      ends[i * seq + p + a.size() - 1] = 1;
      e.exact += a == chosen[first + i];
      e.answers.push_back(a);
    }
    e.count += b;
    if (!rm) continue;
    auto v = Scores(**ex, ids, ends, seq);
    if (!(s = v.status()).ok()) break;
    for (float x : *v) e.mean_score += x;
  }
  actor.ReleaseParams();
  if (rm) rm->ReleaseParams();
  DS_RETURN_IF_ERROR(s);
  if (e.count > 0) e.exact /= e.count, e.mean_score /= e.count;
  return e;
}

}  // namespace ds::rlhf
