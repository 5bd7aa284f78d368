// ds-chat: DeepSpeed-Chat's three steps from one configuration (runtime/rlhf/chat_config.h):
//
//   ds-chat --config chat.yaml [--step sft|reward|ppo|all]
//
// step 1 (sft) writes output/sft.safetensors, step 2 (reward) output/reward.safetensors from
// it, step 3 (ppo) output/actor.safetensors and output/ppo.csv from both. Exit 2 for a bad
// command line or configuration (before any training), 1 when a step fails.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "runtime/rlhf/chat_config.h"
#include "runtime/rlhf/chat_steps.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "ds-chat: %s\nusage: ds-chat --config CHAT.yaml [--step sft|reward|ppo|all]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, step = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--config" || a == "--step") && i + 1 < argc) {
      (a == "--config" ? config : step) = argv[++i];
    } else {
      return Usage(("unknown argument \"" + a + "\"").c_str());
    }
  }
  if (config.empty()) return Usage("--config is required");
  if (step != "sft" && step != "reward" && step != "ppo" && step != "all")
    return Usage(("--step must be sft, reward, ppo or all, got \"" + step + "\"").c_str());
  auto c = ds::rlhf::LoadChatConfig(config);
  if (!c.ok()) {
    std::fprintf(stderr, "ds-chat: %s\n", c.status().ToString().c_str());
    return 2;
  }
  struct Step {
    const char* name;
    ds::Status (*run)(const ds::rlhf::ChatConfig&, ds::parallel::Communicator*, std::ostream&);
  };
  for (const Step& s : {Step{"sft", ds::rlhf::RunSft}, Step{"reward", ds::rlhf::RunReward},
                        Step{"ppo", ds::rlhf::RunPpo}}) {
    if (step != "all" && step != s.name) continue;
    std::cout << "== ds-chat step " << s.name << std::endl;
    ds::Status st = s.run(*c, nullptr, std::cout);
    if (!st.ok()) {
      std::fprintf(stderr, "ds-chat: step %s: %s\n", s.name, st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
