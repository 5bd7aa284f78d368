// PPO's arithmetic (ppo_math.h) against tools/ppo_golden.py's independent numpy version of
// DeepSpeed-Chat's formulas on fixed inputs (testdata/ppo_golden.json): per-token rewards (the
// KL penalty, the clipped score on the last real token, 0 after it; an empty answer and scores
// beyond the clip included), GAE advantages and returns, the clipped actor and value losses.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "runtime/base/json.h"
#include "runtime/rlhf/ppo_math.h"

namespace ds::rlhf {
namespace {

std::vector<double> Doubles(const Json& a) {
  std::vector<double> out;
  for (const Json& v : a.items()) out.push_back(v.as_double());
  return out;
}

std::vector<float> Floats(const Json& a) {
  std::vector<float> out;
  for (double v : Doubles(a)) out.push_back(static_cast<float>(v));
  return out;
}

void Same(const std::vector<double>& want, const std::vector<double>& got, const char* what) {
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << " [" << i << "]");
    CHECK(got[i] == Approx(want[i]).margin(1e-6));
  }
}

TEST_CASE("PPO arithmetic equals the independent reference", "[rlhf][ppo]") {
  std::ifstream in("runtime/rlhf/testdata/ppo_golden.json");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  auto doc = ParseJson(text.str());
  REQUIRE(doc.ok());
  const Json& set = *doc->Find("settings");
  PpoSettings s;
  s.kl_ctl = set.Find("kl_ctl")->as_double();
  s.clip_reward_value = set.Find("clip_reward_value")->as_double();
  s.cliprange = set.Find("cliprange")->as_double();
  s.cliprange_value = set.Find("cliprange_value")->as_double();
  s.gamma = set.Find("gamma")->as_double();
  s.lam = set.Find("lam")->as_double();
  const Json& x = *doc->Find("inputs");
  const Json& want = *doc->Find("expected");
  PpoBatch p;
  p.batch = doc->Find("batch")->as_int();
  p.seq = doc->Find("seq")->as_int();
  p.start = doc->Find("start")->as_int();
  p.mask = Floats(*x.Find("mask"));
  CHECK(AnswerEnd(p, 0) == p.start + 3);
  CHECK(AnswerEnd(p, 1) == p.start - 1);  // an empty answer
  const std::vector<double> rewards =
      PerTokenRewards(p, s, Floats(*x.Find("logprobs")), Floats(*x.Find("ref_logprobs")),
                      Floats(*x.Find("scores")));
  Same(Doubles(*want.Find("rewards")), rewards, "rewards");
  const Gae g = Advantages(p, s, Floats(*x.Find("values")), rewards);
  Same(Doubles(*want.Find("advantages")), g.advantages, "advantages");
  Same(Doubles(*want.Find("returns")), g.returns, "returns");
  CHECK(ActorLoss(p, s, Floats(*x.Find("logprobs")), Floats(*x.Find("old_logprobs")),
                  g.advantages) == Approx(want.Find("actor_loss")->as_double()).margin(1e-6));
  CHECK(CriticLoss(p, s, Floats(*x.Find("values")), Floats(*x.Find("old_values")), g.returns) ==
        Approx(want.Find("critic_loss")->as_double()).margin(1e-6));
}

}  // namespace
}  // namespace ds::rlhf
