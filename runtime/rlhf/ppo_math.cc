#include "runtime/rlhf/ppo_math.h"

#include <algorithm>
#include <cmath>

namespace ds::rlhf {

int64_t AnswerEnd(const PpoBatch& p, int64_t b) {
  int64_t real = 0;
  for (int64_t t = p.start; t < p.seq; ++t) real += p.mask[b * p.seq + t] != 0;
  return p.start + real - 1;
}

std::vector<double> PerTokenRewards(const PpoBatch& p, const PpoSettings& s,
                                    const std::vector<float>& logprobs,
                                    const std::vector<float>& ref_logprobs,
                                    const std::vector<float>& scores) {
  std::vector<double> r(p.batch * p.seq, 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t end = AnswerEnd(p, b);
    for (int64_t t = p.start; t <= end; ++t) {
      const int64_t i = b * p.seq + t;
      r[i] = -s.kl_ctl * (double(logprobs[i]) - ref_logprobs[i]);
    }
    if (end >= p.start)
      r[b * p.seq + end] +=
          std::clamp<double>(scores[b], -s.clip_reward_value, s.clip_reward_value);
  }
  return r;
}

Gae Advantages(const PpoBatch& p, const PpoSettings& s, const std::vector<float>& values,
               const std::vector<double>& rewards) {
  Gae g;
  g.advantages.assign(p.batch * p.seq, 0.0);
  g.returns.assign(p.batch * p.seq, 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t end = AnswerEnd(p, b);
    auto value = [&](int64_t t) { return t <= end ? double(values[b * p.seq + t]) : 0.0; };
    double last = 0;
    for (int64_t t = p.seq - 1; t >= p.start; --t) {
      const double next = t + 1 < p.seq ? value(t + 1) : 0.0;
      const double delta = rewards[b * p.seq + t] + s.gamma * next - value(t);
      last = delta + s.gamma * s.lam * last;
      g.advantages[b * p.seq + t] = last;
      g.returns[b * p.seq + t] = last + value(t);
    }
  }
  return g;
}

double ActorLoss(const PpoBatch& p, const PpoSettings& s, const std::vector<float>& logprobs,
                 const std::vector<float>& old_logprobs, const std::vector<double>& advantages) {
  double sum = 0, count = 0;
  for (int64_t i = 0; i < p.batch * p.seq; ++i) {
    if (i % p.seq < p.start) continue;
    const double m = p.mask[i];
    const double ratio = std::exp((double(logprobs[i]) - old_logprobs[i]) * m);
    const double a = advantages[i];
    const double clipped = std::clamp(ratio, 1.0 - s.cliprange, 1.0 + s.cliprange);
    sum += std::max(-a * ratio, -a * clipped) * m;
    count += m;
  }
  return count > 0 ? sum / count : 0.0;
}

double CriticLoss(const PpoBatch& p, const PpoSettings& s, const std::vector<float>& values,
                  const std::vector<float>& old_values, const std::vector<double>& returns) {
  double sum = 0, count = 0;
  for (int64_t i = 0; i < p.batch * p.seq; ++i) {
    if (i % p.seq < p.start) continue;
    const double m = p.mask[i], v = values[i], r = returns[i];
    const double clipped =
        std::clamp(v, old_values[i] - s.cliprange_value, old_values[i] + s.cliprange_value);
    sum += std::max((v - r) * (v - r), (clipped - r) * (clipped - r)) * m;
    count += m;
  }
  return count > 0 ? 0.5 * sum / count : 0.0;
}

}  // namespace ds::rlhf
