#include "runtime/rlhf/ppo_step.h"

#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor.h"
#include "runtime/rlhf/ppo_rows.h"
#include "runtime/worker/tp_generator.h"

namespace ds::rlhf {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool Has(const Graph& g, const char* op) {
  for (const NodeInfo& n : g.nodes)
    if (n.op == op) return true;
  return false;
}

std::vector<float> Floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// The actor's master elements, where the EMA's live (this rank's shard under ZeRO).
std::pair<float*, size_t> MasterOf(worker::Trainer& t) {
  zero::ParamStore& w = t.params();
  return {w.master_data(), w.master() ? w.total_elements() : w.shard_elements()};
}

}  // namespace

struct PpoStep::Impl {
  PpoModels m;
  PpoOptions o;
  int64_t rows = 0, seq = 0, prompt = 0;
  std::unique_ptr<generate::Generator> gen;
  std::unique_ptr<worker::TpGenerator> tp_gen;  // inference_tp > 1
  std::unique_ptr<exec::Executor> actor_ex, ref_ex, critic_ex, reward_ex;

  Status Prepare(int64_t n, int64_t prompt_len);
  // Log-probabilities of the targets from `ex`'s logits after a forward of `ids`.
  StatusOr<std::vector<float>> LogProbs(worker::Trainer* t, exec::Executor* ex,
                                        const Rows& rows) const;
  StatusOr<std::vector<float>> Values(worker::Trainer* t, exec::Executor* ex, const Rows& rows,
                                      const std::vector<int32_t>& targets) const;
  Status Train(worker::Trainer* t, RolloutSource* source, double* loss) const;

  // The rollout, with every model whole: answers, their rows, the old and reference
  // log-probabilities, the values and the scores.
  struct Rollout {
    Rows rows;
    std::vector<float> logp, ref, values, scores;
    std::vector<float> advantages, returns;  // Score's
  };
  // The actor's answers to `prompts` (its Generator, or its tensor-parallel one).
  StatusOr<std::vector<std::vector<int32_t>>> Answer(
      const std::vector<std::vector<int32_t>>& prompts, int64_t iteration, PpoStepMetrics* out);
  StatusOr<Rollout> Roll(const std::vector<std::vector<int32_t>>& prompts,
                         const std::vector<std::vector<int32_t>>& answers) const;
  // Every model back to its training layout (making the inference executors gathers them).
  void ReleaseModels() const;
  // Rewards and advantages, and the rollout's metrics (added, weighted by `share`).
  void Score(Rollout* r, double share, PpoStepMetrics* out) const;
  // One actor and one critic step on the rollout, then the pretraining step on `ptx` rows
  // [first, first + rows) when there are any.
  Status Update(const Rollout& r, PpoStepMetrics* out);
  Status Pretrain(const std::vector<std::vector<int32_t>>& ptx, size_t first,
                  PpoStepMetrics* out) const;
  std::vector<float> ema;
};

Status PpoStep::Impl::Prepare(int64_t n, int64_t prompt_len) {
  const int64_t micro = m.actor->config().train_micro_batch_size_per_gpu;
  const int64_t gas = m.actor->config().gradient_accumulation_steps;
  if (n != micro * gas)
    return InvalidArgumentError("rlhf: " + Str(n) + " prompts; the actor's step takes micro " +
                                Str(micro) + " x accumulation " + Str(gas));
  const int64_t want = prompt_len + o.max_new_tokens;
  for (worker::Trainer* t : {m.actor, m.critic})
    if (t->config().data.seq_len != want)
      return InvalidArgumentError(t->config().source + ": data.seq_len must be the prompt's " +
                                  Str(prompt_len) + " tokens + max_new_tokens " +
                                  Str(o.max_new_tokens) + " = " + Str(want));
  if ((gen || tp_gen) && rows == n && prompt == prompt_len) return OkStatus();
  rows = n, seq = want, prompt = prompt_len;
  if (o.inference_tp > 1) {
    DS_ASSIGN_OR_RETURN(
        tp_gen, m.actor->MakeTpGenerator(n, seq, o.inference_tp, o.tp_gather_partition_size));
  } else {
    DS_ASSIGN_OR_RETURN(
        gen, m.actor->MakeGenerator(n, seq, o.pin_parameters ? 0 : o.tp_gather_partition_size));
  }
  DS_ASSIGN_OR_RETURN(actor_ex, m.actor->MakeInferenceExecutor(n, seq));
  DS_ASSIGN_OR_RETURN(ref_ex, m.ref->MakeInferenceExecutor(n, seq));
  DS_ASSIGN_OR_RETURN(critic_ex, m.critic->MakeInferenceExecutor(n, seq));
  if (m.reward) {
    DS_ASSIGN_OR_RETURN(reward_ex, m.reward->MakeInferenceExecutor(n, seq));
  }
  ReleaseModels();
  return OkStatus();
}

StatusOr<std::vector<float>> PpoStep::Impl::LogProbs(worker::Trainer* t, exec::Executor* ex,
                                                     const Rows& rows) const {
  const std::vector<int32_t>&ids = rows.ids, &targets = rows.targets;
  std::copy(ids.begin(), ids.end(), ex->ids());
  std::copy(targets.begin(), targets.end(), ex->targets());
  SetPads(ex, rows.pads);
  DS_RETURN_IF_ERROR(t->ForwardGathered(ex, o.tp_gather_partition_size));
  const Tensor logits = ex->TensorData(ex->graph().FindTensor("logits"), false);
  const int64_t v = logits.dim(-1);
  std::vector<float> out(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    const float* x = logits.f32() + r * v;
    double mx = x[0], total = 0;
    for (int64_t j = 1; j < v; ++j) mx = std::max<double>(mx, x[j]);
    for (int64_t j = 0; j < v; ++j) total += std::exp(x[j] - mx);
    out[r] = static_cast<float>(x[targets[r]] - mx - std::log(total));
  }
  return out;
}

StatusOr<std::vector<float>> PpoStep::Impl::Values(worker::Trainer* t, exec::Executor* ex,
                                                   const Rows& rows,
                                                   const std::vector<int32_t>& targets) const {
  const std::vector<int32_t>& ids = rows.ids;
  std::copy(ids.begin(), ids.end(), ex->ids());
  std::copy(targets.begin(), targets.end(), ex->targets());
  SetPads(ex, rows.pads);
  DS_RETURN_IF_ERROR(t->ForwardGathered(ex, o.tp_gather_partition_size));
  const Tensor v = ex->TensorData(ex->graph().FindTensor("values"), false);
  return std::vector<float>(v.f32(), v.f32() + ids.size());
}

Status PpoStep::Impl::Train(worker::Trainer* t, RolloutSource* source, double* loss) const {
  for (auto& [name, input] : source->inputs) {
    DS_ASSIGN_OR_RETURN(input.first, t->StateInput(name));
  }
  if (t->graph().FindTensor(kLeftPads) >= 0) {
    DS_ASSIGN_OR_RETURN(source->pads.first, t->StateInput(kLeftPads));
  }
  t->SetBatchSource(source);
  auto step = t->TrainStep();
  t->SetBatchSource(nullptr);
  DS_RETURN_IF_ERROR(step.status());
  *loss = step->loss;
  return OkStatus();
}

PpoStep::PpoStep(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PpoStep::~PpoStep() = default;

StatusOr<std::unique_ptr<PpoStep>> PpoStep::Create(const PpoModels& models,
                                                   const PpoOptions& options) {
  auto bad = [](worker::Trainer* t, const std::string& role, const char* op) {
    return InvalidArgumentError((t ? t->config().source + ": " : std::string()) + "the PPO " +
                                role + " needs a model whose loss is " + op);
  };
  if (!models.actor || !Has(models.actor->graph(), "ppo_actor_loss"))
    return bad(models.actor, "actor", "ppo_actor_loss (model.head ppo_actor)");
  if (!models.critic || !Has(models.critic->graph(), "ppo_value_loss"))
    return bad(models.critic, "critic", "ppo_value_loss (model.head ppo_critic)");
  if (!models.ref || !Has(models.ref->graph(), "cross_entropy"))
    return bad(models.ref, "reference", "cross_entropy (model.head lm)");
  if (!models.score && (!models.reward || !Has(models.reward->graph(), "reward_pair_loss")))
    return bad(models.reward, "reward model", "reward_pair_loss (model.head reward)");
  auto impl = std::make_unique<Impl>();
  impl->m = models;
  impl->o = options;
  return std::unique_ptr<PpoStep>(new PpoStep(std::move(impl)));
}

StatusOr<std::vector<std::vector<int32_t>>> PpoStep::Impl::Answer(
    const std::vector<std::vector<int32_t>>& prompts, int64_t iteration, PpoStepMetrics* out) {
  const auto t0 = std::chrono::steady_clock::now();
  generate::GenerateRequest req;
  req.prompts = prompts;
  req.max_new_tokens = o.max_new_tokens;
  req.stop_tokens = o.stop_tokens;
  req.pad_token = o.pad_token;
  req.sampling = o.sampling;
  req.sampling.seed = o.sampling.seed * 1000003ull + static_cast<uint64_t>(iteration);
  // Rank w's prompt b samples as sequence w n + b, alone or in its tensor-parallel group (whose
  // union starts at its first rank's), so no two ranks draw the same numbers.
  const int64_t n = static_cast<int64_t>(prompts.size());
  const int w = m.actor->world_rank();
  req.first_sequence = (tp_gen ? w - tp_gen->tp_rank() : w) * n;
  DS_ASSIGN_OR_RETURN(generate::GenerateResult g,
                      tp_gen ? tp_gen->Generate(req) : gen->Generate(req));
  out->generate_ms += MsSince(t0);
  out->answers.insert(out->answers.end(), g.tokens.begin(), g.tokens.end());
  return g.tokens;
}

StatusOr<PpoStep::Impl::Rollout> PpoStep::Impl::Roll(
    const std::vector<std::vector<int32_t>>& prompts,
    const std::vector<std::vector<int32_t>>& answers) const {
  Rollout r;
  r.rows = Lay(prompts, answers, prompt, seq, o.pad_token);
  const Rows& w = r.rows;
  const PpoBatch& p = w.batch;
  for (worker::Trainer* t : {m.actor, m.ref, m.critic, m.reward})
    if (t) DS_RETURN_IF_ERROR(CheckPads(t->graph(), t->config().source, w.pads));
  DS_ASSIGN_OR_RETURN(r.logp, LogProbs(m.actor, actor_ex.get(), w));
  DS_ASSIGN_OR_RETURN(r.ref, LogProbs(m.ref, ref_ex.get(), w));
  DS_ASSIGN_OR_RETURN(r.values,
                      Values(m.critic, critic_ex.get(), w, std::vector<int32_t>(w.ids.size())));
  r.scores.resize(p.batch);
  if (reward_ex) {
    if (p.batch % 2 != 0)
      return InvalidArgumentError("rlhf: the reward model scores an even batch; got " +
                                  Str(p.batch) + " prompts");
    DS_ASSIGN_OR_RETURN(std::vector<float> v, Values(m.reward, reward_ex.get(), w, w.ends));
    for (int64_t b = 0; b < p.batch; ++b) r.scores[b] = v[b * p.seq + AnswerEnd(p, b) + 1];
  } else {
    for (int64_t b = 0; b < p.batch; ++b)
      r.scores[b] = static_cast<float>(m.score(prompts[b], answers[b]));
  }
  return r;
}

void PpoStep::Impl::Score(Rollout* r, double share, PpoStepMetrics* out) const {
  const PpoBatch& p = r->rows.batch;
  double kl = 0, count = 0;
  for (size_t i = 0; i < r->logp.size(); ++i) {
    kl += (double(r->logp[i]) - r->ref[i]) * p.mask[i];
    count += p.mask[i];
  }
  for (float x : r->scores) out->mean_score += share * x / p.batch;
  out->mean_kl += count > 0 ? share * kl / count : 0;
  out->answer_tokens += share * count / p.batch;
  const std::vector<double> rewards = PerTokenRewards(p, o.ppo, r->logp, r->ref, r->scores);
  const Gae gae = Advantages(p, o.ppo, r->values, rewards);
  for (size_t i = 0; i < gae.advantages.size(); ++i)
    out->mean_advantage += count > 0 ? share * gae.advantages[i] * p.mask[i] / count : 0.0;
  r->advantages = Floats(gae.advantages);
  r->returns = Floats(gae.returns);
}

Status PpoStep::Impl::Update(const Rollout& r, PpoStepMetrics* out) {
  const PpoBatch& p = r.rows.batch;
  RolloutSource actor(m.actor->config().train_micro_batch_size_per_gpu, p.seq);
  actor.ids = r.rows.ids;
  actor.targets = r.rows.targets;
  actor.pads.second = r.rows.pads;
  actor.inputs["ppo.old_logprobs"] = {Tensor(), r.logp};
  actor.inputs["ppo.advantages"] = {Tensor(), r.advantages};
  actor.inputs["ppo.mask"] = {Tensor(), p.mask};
  actor.inputs["ppo.ptx"] = {Tensor(), std::vector<float>(p.mask.size(), 0.f)};
  double loss = 0;
  DS_RETURN_IF_ERROR(Train(m.actor, &actor, &loss));
  out->actor_losses.push_back(loss);
  if (o.enable_ema) {
    auto [master, n] = MasterOf(*m.actor);
    if (ema.empty()) ema.assign(master, master + n);
    for (size_t i = 0; i < n; ++i) ema[i] = o.ema_decay * ema[i] + (1 - o.ema_decay) * master[i];
  }
  RolloutSource critic(m.critic->config().train_micro_batch_size_per_gpu, p.seq);
  critic.ids = r.rows.ids;
  critic.targets = r.rows.mask_int;
  critic.pads.second = r.rows.pads;
  critic.inputs["ppo.old_values"] = {Tensor(), r.values};
  critic.inputs["ppo.returns"] = {Tensor(), r.returns};
  DS_RETURN_IF_ERROR(Train(m.critic, &critic, &loss));
  out->critic_losses.push_back(loss);
  return OkStatus();
}

Status PpoStep::Impl::Pretrain(const std::vector<std::vector<int32_t>>& ptx, size_t first,
                               PpoStepMetrics* out) const {
  RolloutSource source(m.actor->config().train_micro_batch_size_per_gpu, seq);
  std::vector<float> weights(rows * seq, static_cast<float>(o.unsup_coef));
  for (int64_t b = 0; b < rows; ++b) {
    const std::vector<int32_t>& row = ptx[first + b];
    source.ids.insert(source.ids.end(), row.begin(), row.end());
    for (int64_t t = 0; t < seq; ++t) source.targets.push_back(t + 1 < seq ? row[t + 1] : 0);
    weights[b * seq + seq - 1] = 0.f;  // the last position has no next token
  }
  const std::vector<float> zeros(rows * seq, 0.f);
  for (const char* n : {"ppo.old_logprobs", "ppo.advantages", "ppo.mask"})
    source.inputs[n] = {Tensor(), zeros};
  source.inputs["ppo.ptx"] = {Tensor(), weights};
  source.pads.second.assign(rows, 0);
  double loss = 0;
  DS_RETURN_IF_ERROR(Train(m.actor, &source, &loss));
  out->ptx_losses.push_back(loss / o.unsup_coef);
  return OkStatus();
}

const std::vector<float>& PpoStep::ema() const { return impl_->ema; }

void PpoStep::Impl::ReleaseModels() const {
  for (worker::Trainer* t : {m.actor, m.ref, m.critic, m.reward})
    if (t) t->ReleaseParams();
}

Status PpoStep::SaveEma(const std::string& path) {
  if (impl_->ema.empty())
    return FailedPreconditionError(
        "rlhf: no moving average of the actor to save (enable_ema, and "
        "after the first step)");
  worker::Trainer& actor = *impl_->m.actor;
  DS_ASSIGN_OR_RETURN(std::vector<float> full, actor.MasterLayoutToFull(impl_->ema));
  return actor.WriteFullWeights(full, path);
}

Status PpoStep::LoadEma(const std::string& path) {
  worker::Trainer& actor = *impl_->m.actor;
  DS_ASSIGN_OR_RETURN(std::vector<float> full, actor.ReadFullWeights(path));
  impl_->ema = actor.FullToMasterLayout(full);
  return OkStatus();
}

StatusOr<PpoStepMetrics> PpoStep::Run(const std::vector<std::vector<int32_t>>& prompts,
                                      int64_t iteration,
                                      const std::vector<std::vector<int32_t>>& ptx) {
  Impl& s = *impl_;
  const int g = std::max(1, s.o.generation_batches);
  if (prompts.empty() || prompts[0].empty() || prompts.size() % g != 0)
    return InvalidArgumentError("rlhf: PPO needs non-empty prompts, generation_batches " + Str(g) +
                                " times the actor's batch; got " + Str(prompts.size()));
  size_t longest = 0;
  for (const std::vector<int32_t>& p : prompts) longest = std::max(longest, p.size());
  const int64_t width = s.o.prompt_len > 0 ? s.o.prompt_len : static_cast<int64_t>(longest);
  for (size_t b = 0; b < prompts.size(); ++b)
    if (prompts[b].empty() || static_cast<int64_t>(prompts[b].size()) > width)
      return InvalidArgumentError("rlhf: prompt " + Str(b) + " has " + Str(prompts[b].size()) +
                                  " tokens; PPO's prompts have 1 to prompt_len " + Str(width));
  const int64_t per = static_cast<int64_t>(prompts.size()) / g;
  DS_RETURN_IF_ERROR(s.Prepare(per, width));
  if (!ptx.empty() && ptx.size() != prompts.size())
    return InvalidArgumentError("rlhf: " + Str(ptx.size()) + " pretraining rows for " +
                                Str(prompts.size()) + " prompts (one per prompt)");
  for (size_t b = 0; b < ptx.size(); ++b)
    if (static_cast<int64_t>(ptx[b].size()) != s.seq)
      return InvalidArgumentError("rlhf: pretraining row " + Str(b) + " has " + Str(ptx[b].size()) +
                                  " tokens, not seq " + Str(s.seq));
  PpoStepMetrics out;
  // The hybrid engine. Generation: the actor whole (ZeRO-3: one all-gather of every unit, on
  // every rank, before anything generates), or with inference_tp its tensor-parallel slices (cut
  // while its units are gathered a few blocks at a time); released before the scoring, whose
  // forwards gather each model's units tp_gather_partition_size blocks at a time, as training
  // does (Trainer::ForwardGathered).
  std::vector<std::vector<std::vector<int32_t>>> parts(g), answers(g);
  for (int k = 0; k < g; ++k)
    parts[k].assign(prompts.begin() + k * per, prompts.begin() + (k + 1) * per);
  if (s.tp_gen) {
    DS_RETURN_IF_ERROR(s.m.actor->SliceForTp(s.tp_gen.get()));
  } else if (s.o.pin_parameters) {
    DS_RETURN_IF_ERROR(s.m.actor->GatherParams());
  }
  Status rolled;
  for (int k = 0; k < g && rolled.ok(); ++k) {
    auto a = s.Answer(parts[k], iteration * g + k, &out);
    rolled = a.status();
    if (a.ok()) answers[k] = std::move(a).value();
  }
  s.m.actor->ReleaseParams();
  std::vector<Impl::Rollout> rollouts;
  for (int k = 0; k < g && rolled.ok(); ++k) {
    StatusOr<Impl::Rollout> r = s.Roll(parts[k], answers[k]);
    rolled = r.status();
    if (r.ok()) rollouts.push_back(std::move(r).value());
  }
  DS_RETURN_IF_ERROR(rolled);
  for (Impl::Rollout& r : rollouts) s.Score(&r, 1.0 / g, &out);
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < std::max(1, s.o.ppo_epochs); ++epoch)
    for (size_t k = 0; k < rollouts.size(); ++k) {
      DS_RETURN_IF_ERROR(s.Update(rollouts[k], &out));
      if (!ptx.empty()) DS_RETURN_IF_ERROR(s.Pretrain(ptx, k * per, &out));
    }
  out.train_ms = MsSince(t0);
  for (double l : out.ptx_losses) out.ptx_loss += l / out.ptx_losses.size();
  for (double l : out.actor_losses) out.actor_loss += l / out.actor_losses.size();
  for (double l : out.critic_losses) out.critic_loss += l / out.critic_losses.size();
  return out;
}

}  // namespace ds::rlhf
