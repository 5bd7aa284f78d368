// ds-chat's step 3 (chat_steps.h: RunPpo).
#include <cstdio>
#include <fstream>

#include "runtime/base/status_macros.h"
#include "runtime/rlhf/chat_data.h"
#include "runtime/rlhf/chat_eval.h"
#include "runtime/rlhf/chat_steps.h"
#include "runtime/rlhf/ppo_step.h"

namespace ds::rlhf {
namespace {

std::string Fixed(double v, int digits = 4) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", digits, v);
  return b;
}

struct Prompts {
  std::vector<std::vector<int32_t>> train, eval, eval_chosen;
};

// Step 3's prompts (each prompt_len tokens), the last eval_prompts (whole batches of 16) held
// out with their chosen answers.
StatusOr<Prompts> PpoPrompts(const ChatData& d) {
  Prompts out;
  const std::vector<PreferenceExample> part = d.Part(2);
  const int64_t held = d.config.ppo.eval_prompts / 16 * 16;
  for (size_t i = 0; i < part.size(); ++i) {
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> p, d.encoding.encode(part[i].prompt));
    if (static_cast<int64_t>(p.size()) != d.config.prompt_len)
      return InvalidArgumentError(d.config.source + ": prompt \"" + part[i].prompt + "\" has " +
                                  std::to_string(p.size()) + " tokens, not prompt_len " +
                                  std::to_string(d.config.prompt_len) +
                                  " (prompts have one length for now)");
    if (static_cast<int64_t>(i) < static_cast<int64_t>(part.size()) - held) {
      out.train.push_back(std::move(p));
      continue;
    }
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> a, d.encoding.encode(part[i].chosen));
    a.insert(a.end(), d.encoding.end.begin(), d.encoding.end.end());
    out.eval.push_back(std::move(p));
    out.eval_chosen.push_back(std::move(a));
  }
  return out;
}

PpoOptions Options(const ChatData& d) {
  const ChatPpo& c = d.config.ppo;
  PpoOptions o;
  o.ppo = c.ppo;
  o.generation_batches = c.generation_batches;
  o.ppo_epochs = c.ppo_epochs;
  o.enable_ema = c.enable_ema;
  o.max_new_tokens = d.config.answer_len;
  o.stop_tokens = d.stop;
  o.pad_token = d.encoding.pad;
  o.sampling.greedy = false;
  o.sampling.temperature = static_cast<float>(c.temperature);
  o.sampling.seed = d.config.seed;
  return o;
}

}  // namespace

// The SFT model's exact match on step 3's held-out prompts (chat_steps.cc's RunSft reports it).
StatusOr<double> HeldOutExactMatch(const ChatData& d, worker::Trainer& model) {
  DS_ASSIGN_OR_RETURN(Prompts prompts, PpoPrompts(d));
  DS_ASSIGN_OR_RETURN(AnswerEval e,
                      EvaluateAnswers(model, nullptr, prompts.eval, prompts.eval_chosen, d.stop,
                                      d.config.answer_len, d.encoding.pad));
  return e.exact;
}

Status RunPpo(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log) {
  DS_ASSIGN_OR_RETURN(ChatData d, OpenChat(c));
  DS_ASSIGN_OR_RETURN(Prompts prompts, PpoPrompts(d));
  const std::string sft = c.output + "/sft.safetensors", rw = c.output + "/reward.safetensors";
  const int64_t seq = d.seq();
  DS_ASSIGN_OR_RETURN(auto actor, ChatModel(c.ppo.actor, "ppo_actor", seq, comm, sft));
  DS_ASSIGN_OR_RETURN(auto ref, ChatModel(c.ppo.actor, "lm", seq, comm, sft));
  DS_ASSIGN_OR_RETURN(auto critic, ChatModel(c.ppo.critic, "ppo_critic", seq, comm, rw));
  DS_ASSIGN_OR_RETURN(auto rm, ChatModel(c.reward.job, "reward", seq, comm, rw));
  const bool talk = !comm || comm->rank() == 0;
  auto eval = [&]() {
    return EvaluateAnswers(*actor, rm.get(), prompts.eval, prompts.eval_chosen, d.stop,
                           c.answer_len, d.encoding.pad);
  };
  DS_ASSIGN_OR_RETURN(AnswerEval before, eval());
  DS_ASSIGN_OR_RETURN(
      auto ppo,
      PpoStep::Create({actor.get(), ref.get(), critic.get(), rm.get(), nullptr}, Options(d)));
  const int64_t per = c.ppo.generation_batches * actor->config().train_micro_batch_size_per_gpu *
                      actor->config().gradient_accumulation_steps;
  if (static_cast<int64_t>(prompts.train.size()) < per)
    return InvalidArgumentError(c.source + ": step 3's part has " +
                                std::to_string(prompts.train.size()) +
                                " training prompts; one iteration takes " + std::to_string(per));
  std::ofstream csv(c.output + "/ppo.csv");
  csv << "iteration,mean_reward,kl,actor_loss,critic_loss,generate_ms,train_ms\n";
  double gen_ms = 0, train_ms = 0, tokens = 0;
  for (int64_t it = 0; it < c.ppo.iterations; ++it) {
    std::vector<std::vector<int32_t>> batch;
    for (int64_t k = 0; k < per; ++k)
      batch.push_back(prompts.train[(it * per + k) % prompts.train.size()]);
    DS_ASSIGN_OR_RETURN(PpoStepMetrics m, ppo->Run(batch, it));
    gen_ms += m.generate_ms, train_ms += m.train_ms, tokens += m.answer_tokens * per;
    csv << it + 1 << "," << Fixed(m.mean_score) << "," << Fixed(m.mean_kl) << ","
        << Fixed(m.actor_loss) << "," << Fixed(m.critic_loss) << "," << Fixed(m.generate_ms, 1)
        << "," << Fixed(m.train_ms, 1) << "\n";
    if (talk && ((it + 1) % std::max<int64_t>(1, c.ppo.iterations / 10) == 0 || it == 0))
      log << "ppo iteration " << it + 1 << "/" << c.ppo.iterations << ": reward "
          << Fixed(m.mean_score) << ", kl " << Fixed(m.mean_kl) << ", actor loss "
          << Fixed(m.actor_loss) << ", critic loss " << Fixed(m.critic_loss) << "\n";
  }
  DS_ASSIGN_OR_RETURN(AnswerEval after, eval());
  if (talk)
    log << "ppo: held-out exact match " << Fixed(100 * before.exact, 2) << "% -> "
        << Fixed(100 * after.exact, 2) << "% (" << after.count << " prompts), mean reward "
        << Fixed(before.mean_score) << " -> " << Fixed(after.mean_score) << "\n"
        << "ppo: generation " << Fixed(100 * gen_ms / (gen_ms + train_ms), 1) << "% of the "
        << "steps' time, training " << Fixed(100 * train_ms / (gen_ms + train_ms), 1)
        << "%; generation " << Fixed(tokens / (gen_ms / 1e3), 1) << " tokens/s\n";
  if (talk) DS_RETURN_IF_ERROR(actor->ExportWeights(c.output + "/actor.safetensors"));
  return OkStatus();
}

}  // namespace ds::rlhf
