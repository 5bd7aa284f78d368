#include "runtime/rlhf/chat_steps.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/rlhf/chat_data.h"
#include "runtime/rlhf/chat_eval.h"
#include "runtime/rlhf/example_batches.h"

namespace ds::rlhf {
namespace {

int Rank(parallel::Communicator* c) { return c ? c->rank() : 0; }
int World(parallel::Communicator* c) { return c ? c->size() : 1; }

std::string Fixed(double v, int digits = 4) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", digits, v);
  return b;
}

std::string Out(const ChatConfig& c, const char* name) {
  std::filesystem::create_directories(c.output);
  return c.output + "/" + name;
}

// Called after step `step`; true: stop here.
using StopCheck = std::function<StatusOr<bool>(int64_t step)>;

// `steps` steps of `t` over `rows` (fewer where `stop` says so), a progress line every tenth.
Status TrainRows(worker::Trainer& t, std::vector<std::vector<TokenExample>> rows, int rows_per,
                 int64_t steps, const ChatConfig& c, parallel::Communicator* comm, const char* what,
                 std::ostream& log, const StopCheck& stop = nullptr) {
  const int64_t micro = t.config().train_micro_batch_size_per_gpu;
  DS_ASSIGN_OR_RETURN(
      ExampleBatches b,
      ExampleBatches::Create(std::move(rows), {micro, rows_per, c.seed, Rank(comm), World(comm)}));
  t.SetBatchSource(&b);
  Status status;
  for (int64_t i = 1; i <= steps && status.ok(); ++i) {
    StatusOr<worker::StepMetrics> m = t.TrainStep();
    status = m.status();
    if (status.ok() && Rank(comm) == 0 && (i % std::max<int64_t>(1, steps / 10) == 0 || i == 1))
      log << what << " step " << i << "/" << steps << " loss " << Fixed(m->loss) << "\n";
    if (!status.ok() || !stop) continue;
    StatusOr<bool> done = stop(i);
    status = done.status();
    if (status.ok() && *done) break;
  }
  t.SetBatchSource(nullptr);  // `b` ends here
  return status;
}

std::string Percent(double share) { return Fixed(100.0 * share, 2) + "%"; }

// A step's early stop (ChatStep::stop_at): every eval_interval steps `measure` of the model on
// its held-out rows (rank 0's figure on every rank, so all stop together), true once it reaches
// the share; null when the step has none.
StopCheck EarlyStop(const ChatStep& s, const char* what, std::function<StatusOr<double>()> measure,
                    parallel::Communicator* comm, std::ostream& log) {
  if (s.stop_at <= 0) return nullptr;
  return [&s, &log, what, comm, measure = std::move(measure)](int64_t step) -> StatusOr<bool> {
    if (step % s.eval_interval != 0 || step == s.steps) return false;
    DS_ASSIGN_OR_RETURN(double share, measure());
    float v = static_cast<float>(share);
    if (comm) DS_RETURN_IF_ERROR(comm->Broadcast(parallel::BufferView(&v, 1), 0));
    const bool done = v >= s.stop_at;
    if (Rank(comm) == 0 && done)
      log << what << ": step " << step << ": " << Percent(v) << " reaches " << Percent(s.stop_at)
          << "; stopping\n";
    return done;
  };
}

// The last n of `rows`, taken out of them for a step's early stop (none without one).
template <typename T>
StatusOr<std::vector<T>> HoldOut(std::vector<T>& rows, const ChatStep& s, int64_t n,
                                 const std::string& what) {
  std::vector<T> check;
  if (s.stop_at <= 0) return check;
  if (static_cast<int64_t>(rows.size()) < 2 * n)
    return InvalidArgumentError(what + " holds out " + std::to_string(n) + " rows; the step has " +
                                std::to_string(rows.size()));
  check.assign(rows.end() - n, rows.end());
  rows.resize(rows.size() - n);
  return check;
}

}  // namespace

// Rank 0 writes the weights (under ZeRO over ranks every rank joins the gather); the others
// wait until the file is there.
Status ExportModel(worker::Trainer& t, const std::string& path, parallel::Communicator* comm) {
  if (t.params().master_sharded() || Rank(comm) == 0) DS_RETURN_IF_ERROR(t.ExportWeights(path));
  return comm ? comm->Barrier() : OkStatus();
}

Status RunSft(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log) {
  DS_ASSIGN_OR_RETURN(ChatData d, OpenChat(c));
  std::vector<PreferenceExample> part = d.Part(0);
  DS_ASSIGN_OR_RETURN(std::vector<PreferenceExample> check,
                      HoldOut(part, c.sft, kSftCheckRows, c.source + ": sft.stop_at_exact_match"));
  std::vector<std::vector<TokenExample>> rows;
  for (const PreferenceExample& e : part) {
    auto x = SftExample(e, d.encoding);
    if (!x.ok()) return x.status().WithPrefix(c.source);
    rows.push_back({*x});
  }
  if (Rank(comm) == 0)
    log << "sft: " << rows.size() << " examples (step 1's part"
        << (check.empty() ? "" : "; " + std::to_string(check.size()) + " more held out") << ")\n";
  DS_ASSIGN_OR_RETURN(Answers answers, EncodeAnswers(d, check));
  DS_ASSIGN_OR_RETURN(auto t, ChatModel(c.sft.job, "lm", d.seq(), comm));
  StopCheck stop = EarlyStop(
      c.sft, "sft: exact match on the held-out step-1 rows",
      [&d, &t, &answers]() { return ExactMatch(d, *t, answers); }, comm, log);
  DS_RETURN_IF_ERROR(TrainRows(*t, std::move(rows), 1, c.sft.steps, c, comm, "sft", log, stop));
  DS_ASSIGN_OR_RETURN(double exact, HeldOutExactMatch(d, *t));
  if (Rank(comm) == 0) log << "sft: held-out exact match " << Percent(exact) << "\n";
  return ExportModel(*t, Out(c, "sft.safetensors"), comm);
}

Status RunReward(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log) {
  DS_ASSIGN_OR_RETURN(ChatData d, OpenChat(c));
  std::vector<std::vector<TokenExample>> pairs;
  for (const PreferenceExample& e : d.Part(1)) {
    auto x = RewardPair(e, d.encoding);
    if (!x.ok()) return x.status().WithPrefix(c.source);
    pairs.push_back(*x);
  }
  const size_t held_n = std::max<size_t>(16, pairs.size() / 10 / 16 * 16);
  if (pairs.size() < held_n + 16)
    return InvalidArgumentError(c.source + ": step 2's part holds " + std::to_string(pairs.size()) +
                                " pairs; too few to hold out " + std::to_string(held_n));
  std::vector<std::vector<TokenExample>> held(pairs.end() - held_n, pairs.end());
  pairs.resize(pairs.size() - held_n);
  DS_ASSIGN_OR_RETURN(auto check, HoldOut(pairs, c.reward, kRewardCheckPairs,
                                          c.source + ": reward.stop_at_pairwise_accuracy"));
  // DeepSpeed-Chat starts the reward model from a base model of its own (opt-350m beside an
  // opt-1.3b actor): a reward job whose model is a Hugging Face folder starts from the folder
  // (its value head drawn); any other from the SFT weights, as before.
  DS_ASSIGN_OR_RETURN(config::JobConfig reward_job, config::LoadJobConfig(c.reward.job));
  const std::string start = reward_job.model.hf.empty() ? Out(c, "sft.safetensors") : "";
  DS_ASSIGN_OR_RETURN(auto t, ChatModel(c.reward.job, "reward", d.seq(), comm, start,
                                        /*keep_missing=*/true));
  DS_ASSIGN_OR_RETURN(PairEval before, EvaluatePairs(*t, held));
  if (Rank(comm) == 0)
    log << "reward: " << pairs.size() << " training pairs, " << held.size() << " held out"
        << (check.empty() ? "" : " (" + std::to_string(check.size()) + " more for the stop)")
        << "\n";
  StopCheck stop = EarlyStop(
      c.reward, "reward: pairwise accuracy on the held-out step-2 pairs",
      [&t, &check]() -> StatusOr<double> {
        DS_ASSIGN_OR_RETURN(PairEval e, EvaluatePairs(*t, check));
        return e.accuracy;
      },
      comm, log);
  DS_RETURN_IF_ERROR(
      TrainRows(*t, std::move(pairs), 2, c.reward.steps, c, comm, "reward", log, stop));
  DS_ASSIGN_OR_RETURN(PairEval after, EvaluatePairs(*t, held));
  if (Rank(comm) == 0)
    log << "reward: held-out pairwise accuracy " << Percent(before.accuracy) << " -> "
        << Percent(after.accuracy) << "; mean score chosen " << Fixed(after.chosen_mean)
        << ", rejected " << Fixed(after.rejected_mean) << "\n";
  return ExportModel(*t, Out(c, "reward.safetensors"), comm);
}

}  // namespace ds::rlhf
