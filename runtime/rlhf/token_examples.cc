#include "runtime/rlhf/token_examples.h"

#include <algorithm>

#include "runtime/base/status_macros.h"

namespace ds::rlhf {
namespace {

// prompt + answer + end, cut to seq; *prompt_len: the prompt's tokens in it.
StatusOr<std::vector<int32_t>> Join(const std::string& prompt, const std::string& answer,
                                    const Encoding& enc, int64_t* prompt_len) {
  if (enc.seq < 2) return InvalidArgumentError("rlhf: seq must be >= 2");
  DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, enc.encode(prompt));
  *prompt_len = static_cast<int64_t>(ids.size());
  DS_ASSIGN_OR_RETURN(std::vector<int32_t> a, enc.encode(answer));
  ids.insert(ids.end(), a.begin(), a.end());
  ids.insert(ids.end(), enc.end.begin(), enc.end.end());
  if (static_cast<int64_t>(ids.size()) > enc.seq) ids.resize(enc.seq);
  return ids;
}

}  // namespace

StatusOr<TokenExample> SftExample(const PreferenceExample& e, const Encoding& enc) {
  int64_t prompt = 0;
  DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Join(e.prompt, e.chosen, enc, &prompt));
  const int64_t n = static_cast<int64_t>(ids.size());
  if (prompt >= n)
    return InvalidArgumentError("rlhf: the prompt \"" + e.prompt.substr(0, 40) + "\" fills all " +
                                std::to_string(enc.seq) + " tokens; no answer token is left");
  TokenExample out;
  out.ids.assign(enc.seq, enc.pad);
  out.targets.assign(enc.seq, kIgnore);
  std::copy(ids.begin(), ids.end(), out.ids.begin());
  // Position t predicts token t + 1: the answer's tokens are [prompt, n).
  for (int64_t t = std::max<int64_t>(prompt - 1, 0); t + 1 < n; ++t) out.targets[t] = ids[t + 1];
  return out;
}

StatusOr<std::vector<TokenExample>> RewardPair(const PreferenceExample& e, const Encoding& enc) {
  if (!e.has_rejected)
    return InvalidArgumentError("rlhf: the reward model needs a rejected answer; prompt \"" +
                                e.prompt.substr(0, 40) + "\" has none");
  std::vector<TokenExample> out;
  for (const std::string* answer : {&e.chosen, &e.rejected}) {
    int64_t prompt = 0;
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Join(e.prompt, *answer, enc, &prompt));
    TokenExample& x = out.emplace_back();
    x.ids.assign(enc.seq, enc.pad);
    x.targets.assign(enc.seq, 0);
    std::copy(ids.begin(), ids.end(), x.ids.begin());
    x.targets[ids.size() - 1] = 1;
  }
  return out;
}

}  // namespace ds::rlhf
