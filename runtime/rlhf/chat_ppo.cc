// ds-chat's step 3 (chat_steps.h: RunPpo).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "parallel/comm/communicator.h"
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

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

struct Prompts {
  std::vector<std::vector<int32_t>> train;
  Answers eval;  // the held-out prompts
};

StatusOr<std::vector<int32_t>> EncodePrompt(const ChatData& d, const PreferenceExample& e) {
  DS_ASSIGN_OR_RETURN(std::vector<int32_t> p, d.encoding.encode(e.prompt));
  if (p.empty() || static_cast<int64_t>(p.size()) > d.config.prompt_len)
    return InvalidArgumentError(d.config.source + ": prompt \"" + e.prompt + "\" has " +
                                std::to_string(p.size()) + " tokens; prompt_len is " +
                                std::to_string(d.config.prompt_len));
  return p;
}

// The chosen answer's tokens, the end tokens after them: what a greedy answer must equal.
StatusOr<std::vector<int32_t>> EncodeChosen(const ChatData& d, const PreferenceExample& e) {
  DS_ASSIGN_OR_RETURN(std::vector<int32_t> a, d.encoding.encode(e.chosen));
  a.insert(a.end(), d.encoding.end.begin(), d.encoding.end.end());
  return a;
}

// Where step 3's part splits: rows before it train, the last eval_prompts (whole batches of 16)
// are held out with their chosen answers.
size_t HeldOutStart(const ChatData& d, size_t rows) {
  const size_t held = static_cast<size_t>(d.config.ppo.eval_prompts / 16 * 16);
  return rows - std::min(rows, held);
}

// Step 3's prompts (1 to prompt_len tokens, left-padded in the rollouts) and its held-out ones.
StatusOr<Prompts> PpoPrompts(const ChatData& d) {
  Prompts out;
  const std::vector<PreferenceExample> part = d.Part(2);
  const size_t start = HeldOutStart(d, part.size());
  for (size_t i = 0; i < start; ++i) {
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> p, EncodePrompt(d, part[i]));
    out.train.push_back(std::move(p));
  }
  DS_ASSIGN_OR_RETURN(out.eval, EncodeAnswers(d, {part.begin() + start, part.end()}));
  return out;
}

// Step 3's settings, the rollouts' from the actor's hybrid_engine section.
StatusOr<PpoOptions> Options(const ChatData& d, const worker::Trainer& actor) {
  const config::HybridEngineConfig& he = actor.config().hybrid_engine;
  if (he.max_out_tokens < d.seq())
    return InvalidArgumentError(actor.config().source + ": hybrid_engine.max_out_tokens " +
                                std::to_string(he.max_out_tokens) + " is below prompt_len + " +
                                "answer_len = " + std::to_string(d.seq()));
  const ChatPpo& c = d.config.ppo;
  PpoOptions o;
  o.ppo = c.ppo;
  o.generation_batches = c.generation_batches;
  o.ppo_epochs = c.ppo_epochs;
  o.enable_ema = c.enable_ema;
  o.max_new_tokens = d.config.answer_len;
  o.prompt_len = d.config.prompt_len;
  o.unsup_coef = c.unsup_coef;
  o.inference_tp = he.inference_tp_size;
  o.tp_gather_partition_size = he.tp_gather_partition_size;
  o.pin_parameters = he.pin_parameters;
  o.stop_tokens = d.stop;
  o.pad_token = d.encoding.pad;
  o.sampling.greedy = false;
  o.sampling.temperature = static_cast<float>(c.temperature);
  o.sampling.seed = d.config.seed;
  return o;
}

struct Models {
  std::unique_ptr<worker::Trainer> actor, ref, critic, rm;
};

std::string CkptRoot(const ChatConfig& c) { return c.output + "/ppo_ckpt"; }

StatusOr<Models> LoadModels(const ChatData& d, parallel::Communicator* comm) {
  const ChatConfig& c = d.config;
  const std::string sft = c.output + "/sft.safetensors", rw = c.output + "/reward.safetensors";
  Models m;
  // Every role takes the rows' left pads (prompts shorter than prompt_len).
  DS_ASSIGN_OR_RETURN(m.actor, ChatModel(c.ppo.actor, "ppo_actor", d.seq(), comm, sft, false,
                                         CkptRoot(c) + "/actor", true));
  DS_ASSIGN_OR_RETURN(m.ref, ChatModel(c.ppo.actor, "lm", d.seq(), comm, sft, false, "", true));
  DS_ASSIGN_OR_RETURN(m.critic, ChatModel(c.ppo.critic, "ppo_critic", d.seq(), comm, rw, false,
                                          CkptRoot(c) + "/critic", true));
  DS_ASSIGN_OR_RETURN(m.rm, ChatModel(c.reward.job, "reward", d.seq(), comm, rw, false, "", true));
  return m;
}

std::string EmaPath(const ChatConfig& c) { return CkptRoot(c) + "/actor_ema.safetensors"; }

// The actor's moving average to `path` (every rank joins; rank 0 writes, the others wait).
Status WriteEma(PpoStep& ppo, const std::string& path, parallel::Communicator* comm) {
  DS_RETURN_IF_ERROR(ppo.SaveEma(path));
  return comm ? comm->Barrier() : OkStatus();
}

// resume: the iteration the saved PPO state reached, the actor and critic loaded from their
// checkpoints, and the actor's moving average; else 0.
StatusOr<int64_t> Resume(const ChatConfig& c, Models& m, PpoStep& ppo) {
  std::ifstream in(CkptRoot(c) + "/state.json");
  if (!c.ppo.resume || !in) return int64_t{0};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"iteration\":");
  if (at == std::string::npos) return DataLossError(CkptRoot(c) + "/state.json: no \"iteration\"");
  const int64_t it = std::strtoll(text.c_str() + at + 12, nullptr, 10);
  if (c.ppo.enable_ema) DS_RETURN_IF_ERROR(ppo.LoadEma(EmaPath(c)));
  DS_RETURN_IF_ERROR(m.actor->LoadCheckpoint(CkptRoot(c) + "/actor"));
  DS_RETURN_IF_ERROR(m.critic->LoadCheckpoint(CkptRoot(c) + "/critic"));
  return it;
}

// The actor's and critic's checkpoints (and the actor's moving average), then the state naming
// the iteration they reached (written whole, then renamed: a crash leaves the previous state).
Status Save(const ChatConfig& c, Models& m, PpoStep& ppo, int64_t iteration,
            parallel::Communicator* comm) {
  DS_RETURN_IF_ERROR(m.actor->SaveCheckpoint());
  DS_RETURN_IF_ERROR(m.critic->SaveCheckpoint());
  if (c.ppo.enable_ema) DS_RETURN_IF_ERROR(WriteEma(ppo, EmaPath(c), comm));
  const bool talk = !comm || comm->rank() == 0;
  if (!talk) return OkStatus();
  const std::string path = CkptRoot(c) + "/state.json";
  {
    std::ofstream out(path + ".tmp");
    out << "{\"iteration\": " << iteration << "}\n";
    if (!out) return InternalError(path + ".tmp: cannot write the PPO state");
  }
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
    return InternalError(path + ": cannot rename the PPO state into place");
  return OkStatus();
}

// Each rank scores its own prompts: the iteration's reward, KL and answer length become the
// ranks' means, the same on every rank (the losses already are).
Status GlobalMeans(PpoStepMetrics* r, parallel::Communicator* comm) {
  if (!comm || comm->size() == 1) return OkStatus();
  float v[3] = {static_cast<float>(r->mean_score), static_cast<float>(r->mean_kl),
                static_cast<float>(r->answer_tokens)};
  DS_RETURN_IF_ERROR(comm->AllReduce(parallel::BufferView(v, 3), parallel::ReduceOp::kSum));
  r->mean_score = v[0] / comm->size();
  r->mean_kl = v[1] / comm->size();
  r->answer_tokens = v[2] / comm->size();
  return OkStatus();
}

// One ppo.csv row, and every tenth iteration (and the first) a log line.
void Report(const ChatConfig& c, const PpoStepMetrics& r, int64_t it, int64_t first, bool ptx,
            std::ostream& csv, std::ostream& log) {
  csv << it + 1 << "," << Fixed(r.mean_score) << "," << Fixed(r.mean_kl) << ","
      << Fixed(r.actor_loss) << "," << Fixed(r.critic_loss) << "," << Fixed(r.generate_ms, 1) << ","
      << Fixed(r.train_ms, 1) << "," << Fixed(r.ptx_loss) << std::endl;
  if ((it + 1) % std::max<int64_t>(1, c.ppo.iterations / 10) == 0 || it == first)
    log << "ppo iteration " << it + 1 << "/" << c.ppo.iterations << ": reward "
        << Fixed(r.mean_score) << ", kl " << Fixed(r.mean_kl) << ", actor loss "
        << Fixed(r.actor_loss) << ", critic loss " << Fixed(r.critic_loss)
        << (ptx ? ", ptx loss " + Fixed(r.ptx_loss) : "") << "\n";
}

}  // namespace

StatusOr<Answers> EncodeAnswers(const ChatData& d, const std::vector<PreferenceExample>& rows) {
  Answers out;
  for (const PreferenceExample& e : rows) {
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> p, EncodePrompt(d, e));
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> a, EncodeChosen(d, e));
    out.prompts.push_back(std::move(p));
    out.chosen.push_back(std::move(a));
  }
  return out;
}

StatusOr<double> ExactMatch(const ChatData& d, worker::Trainer& model, const Answers& a) {
  DS_ASSIGN_OR_RETURN(AnswerEval e, EvaluateAnswers(model, nullptr, a.prompts, a.chosen, d.stop,
                                                    d.config.answer_len, d.encoding.pad));
  return e.exact;
}

StatusOr<double> HeldOutExactMatch(const ChatData& d, worker::Trainer& model) {
  const std::vector<PreferenceExample> part = d.Part(2);
  DS_ASSIGN_OR_RETURN(Answers a,
                      EncodeAnswers(d, {part.begin() + HeldOutStart(d, part.size()), part.end()}));
  return ExactMatch(d, model, a);
}

Status RunPpo(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log) {
  DS_ASSIGN_OR_RETURN(ChatData d, OpenChat(c));
  DS_ASSIGN_OR_RETURN(Prompts prompts, PpoPrompts(d));
  DS_ASSIGN_OR_RETURN(const std::vector<std::vector<int32_t>> ptx, PtxRows(d));
  DS_ASSIGN_OR_RETURN(Models m, LoadModels(d, comm));
  DS_ASSIGN_OR_RETURN(PpoOptions options, Options(d, *m.actor));
  DS_ASSIGN_OR_RETURN(
      auto ppo,
      PpoStep::Create({m.actor.get(), m.ref.get(), m.critic.get(), m.rm.get(), nullptr}, options));
  DS_ASSIGN_OR_RETURN(const int64_t first, Resume(c, m, *ppo));
  const bool talk = !comm || comm->rank() == 0;
  auto eval = [&]() {
    return EvaluateAnswers(*m.actor, m.rm.get(), prompts.eval.prompts, prompts.eval.chosen, d.stop,
                           c.answer_len, d.encoding.pad);
  };
  DS_ASSIGN_OR_RETURN(AnswerEval before, eval());
  const int64_t per = c.ppo.generation_batches * m.actor->config().train_micro_batch_size_per_gpu *
                      m.actor->config().gradient_accumulation_steps;
  if (static_cast<int64_t>(prompts.train.size()) < per)
    return InvalidArgumentError(c.source + ": step 3's part has " +
                                std::to_string(prompts.train.size()) +
                                " training prompts; one iteration takes " + std::to_string(per));
  if (talk && first > 0) log << "ppo: resumed at iteration " << first << "\n";
  std::ofstream csv;  // rank 0's (the ranks share the output folder)
  if (talk) csv.open(c.output + "/ppo.csv", first > 0 ? std::ios::app : std::ios::trunc);
  if (talk && first == 0)
    csv << "iteration,mean_reward,kl,actor_loss,critic_loss,generate_ms,train_ms,ptx_loss\n";
  double gen_ms = 0, train_ms = 0, tokens = 0;
  for (int64_t it = first; it < c.ppo.iterations; ++it) {
    std::vector<std::vector<int32_t>> batch, text;
    const int64_t at = (it * (comm ? comm->size() : 1) + (comm ? comm->rank() : 0)) * per;
    for (int64_t k = 0; k < per; ++k) {  // each rank its own prompts (and ptx rows)
      batch.push_back(prompts.train[(at + k) % prompts.train.size()]);
      if (!ptx.empty()) text.push_back(ptx[(at + k) % ptx.size()]);
    }
    DS_ASSIGN_OR_RETURN(PpoStepMetrics r, ppo->Run(batch, it, text));
    DS_RETURN_IF_ERROR(GlobalMeans(&r, comm));
    gen_ms += r.generate_ms, train_ms += r.train_ms, tokens += r.answer_tokens * per;
    if (talk) Report(c, r, it, first, !ptx.empty(), csv, log);
    const bool last = it + 1 == c.ppo.iterations;
    if (last || (c.ppo.save_interval > 0 && (it + 1) % c.ppo.save_interval == 0))
      DS_RETURN_IF_ERROR(Save(c, m, *ppo, it + 1, comm));
  }
  DS_ASSIGN_OR_RETURN(AnswerEval after, eval());
  if (talk)
    log << "ppo: held-out exact match " << Fixed(100 * before.exact, 2) << "% -> "
        << Fixed(100 * after.exact, 2) << "% (" << after.count << " prompts), mean reward "
        << Fixed(before.mean_score) << " -> " << Fixed(after.mean_score) << "\n"
        << "ppo: generation " << Fixed(100 * gen_ms / std::max(1e-9, gen_ms + train_ms), 1)
        << "% of the steps' time, training "
        << Fixed(100 * train_ms / std::max(1e-9, gen_ms + train_ms), 1) << "%; generation "
        << Fixed(tokens / std::max(1e-9, gen_ms / 1e3), 1) << " tokens/s\n";
  if (talk) {  // the greedy answers after step 3, ds-generate's JSONL fields
    std::ofstream out(c.output + "/eval_answers.jsonl");
    for (size_t i = 0; i < after.answers.size(); ++i)
      out << "{\"prompt_ids\": " << Ids(prompts.eval.prompts[i])
          << ", \"ids\": " << Ids(after.answers[i]) << "}\n";
  }
  if (c.ppo.enable_ema)
    DS_RETURN_IF_ERROR(WriteEma(*ppo, c.output + "/actor_ema.safetensors", comm));
  return ExportModel(*m.actor, c.output + "/actor.safetensors", comm);
}

}  // namespace ds::rlhf
