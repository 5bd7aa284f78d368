// PPO's arithmetic on the host, as DeepSpeed-Chat's step 3 defines it, over a batch of
// sequences [B, T] whose tokens [start, T) are the generated answer (start = the padded prompt
// length) and `mask` marks the answer's real tokens (1) from its padding (0):
//
//   PerTokenRewards  -kl_ctl x (logprob - ref_logprob) on every answer token, plus the reward
//                    model's score clipped to +-clip_reward_value on the last real one; 0 after it
//   Advantages       GAE backward from the end: delta_t = r_t + gamma V_{t+1} - V_t (V after the
//                    last position is 0), A_t = delta_t + gamma lambda A_{t+1}, returns = A + V,
//                    over [start, T); values after the answer's end are 0 first
//   ActorLoss        the clipped surrogate: sum over real tokens of max(-A r, -A clip(r, 1 - c,
//                    1 + c)) / their count, r = exp((logprob - old_logprob) x mask)
//   CriticLoss       0.5 sum over real tokens of max((V - R)^2, (clip(V, V_old +- c_v) - R)^2) /
//                    their count
//
// No reward normalisation and no advantage whitening, as DeepSpeed-Chat. Row-major [B, T]
// vectors; rewards, advantages and returns are [B, T] with 0 before `start`.
#pragma once

#include <cstdint>
#include <vector>

namespace ds::rlhf {

struct PpoSettings {  // DeepSpeed-Chat's names and defaults
  double kl_ctl = 0.1;
  double clip_reward_value = 5.0;
  double cliprange = 0.2;
  double cliprange_value = 0.2;
  double gamma = 1.0;
  double lam = 0.95;
};

struct PpoBatch {
  int64_t batch = 0, seq = 0, start = 0;
  std::vector<float> mask;  // [B, T]: 1 on the answer's real tokens (positions >= start)
};

// The last real answer position of row b (start - 1 when the answer is empty).
int64_t AnswerEnd(const PpoBatch& p, int64_t b);

std::vector<double> PerTokenRewards(const PpoBatch& p, const PpoSettings& s,
                                    const std::vector<float>& logprobs,
                                    const std::vector<float>& ref_logprobs,
                                    const std::vector<float>& scores);

struct Gae {
  std::vector<double> advantages, returns;
};
// `values` [B, T] (the critic's at generation time); those after each answer's end count as 0.
Gae Advantages(const PpoBatch& p, const PpoSettings& s, const std::vector<float>& values,
               const std::vector<double>& rewards);

double ActorLoss(const PpoBatch& p, const PpoSettings& s, const std::vector<float>& logprobs,
                 const std::vector<float>& old_logprobs, const std::vector<double>& advantages);
double CriticLoss(const PpoBatch& p, const PpoSettings& s, const std::vector<float>& values,
                  const std::vector<float>& old_values, const std::vector<double>& returns);

}  // namespace ds::rlhf
