#include "runtime/worker/task_eval.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/base/status_macros.h"
#include "runtime/data/addition_task.h"
#include "runtime/generate/generator.h"
#include "runtime/worker/expert_load.h"

namespace ds::worker {
namespace {

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Greedy decoding of `answer_length` tokens for a batch of prompts with the KV cache: the
// prompts prefilled at once, then one decode step per answer token; the expert load counts the
// routes of every token the model reads.
Status GenerateAnswers(generate::Generator& gen, const data::AdditionTask& task,
                       const std::vector<data::AdditionProblem>& batch,
                       std::vector<std::vector<int32_t>>* answers, ExpertLoad* load) {
  std::vector<std::vector<int32_t>> prompts;
  for (const data::AdditionProblem& p : batch)
    prompts.push_back(data::EncodeAdditionPrompt(task, p.a, p.b));
  const int64_t n = static_cast<int64_t>(batch.size()), vocab = gen.vocab();
  DS_RETURN_IF_ERROR(gen.Prefill(prompts, data::kAdditionPad));
  load->Add(gen.executor(), n);
  answers->assign(n, {});
  std::vector<int32_t> next(n);
  for (int j = 0; j < task.answer_length(); ++j) {
    if (j > 0) {
      DS_RETURN_IF_ERROR(gen.Decode(next));
      load->Add(gen.executor(), n);
    }
    for (int64_t r = 0; r < n; ++r) {
      const float* row = gen.Logits(r);
      next[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      (*answers)[r].push_back(next[r]);
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<TaskResult> EvaluateTask(Trainer& trainer, int64_t max_problems) {
  TaskResult result;
  const std::string& val = trainer.config().data.validation;
  if (val.empty()) return result;
  const std::string dir = DirOf(val);
  auto task_json = ReadText(dir + "/task.json");
  if (!task_json.ok()) return result;  // not a task directory
  auto task = data::ParseAdditionTaskJson(*task_json);
  if (!task.ok()) return task.status().WithPrefix(dir + "/task.json");
  DS_ASSIGN_OR_RETURN(std::string text, ReadText(dir + "/val_problems.txt"));
  std::vector<data::AdditionProblem> problems;
  std::istringstream lines(text);
  uint64_t a, b, sum;
  while (lines >> a >> b >> sum) problems.push_back({a, b});
  if (max_problems > 0 && static_cast<int64_t>(problems.size()) > max_problems)
    problems.resize(max_problems);
  if (problems.empty()) return DataLossError(dir + "/val_problems.txt: no problems");
  const int64_t batch = 64;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<generate::Generator> gen,
                      trainer.MakeGenerator(batch, task->example_length()));
  std::vector<std::vector<int32_t>> answers;
  std::string first_wrong;
  ExpertLoad load;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t start = 0; start < problems.size(); start += batch) {
    std::vector<data::AdditionProblem> chunk(
        problems.begin() + start, problems.begin() + std::min(problems.size(), start + batch));
    DS_RETURN_IF_ERROR(GenerateAnswers(*gen, *task, chunk, &answers, &load));
    for (size_t r = 0; r < chunk.size(); ++r) {
      auto got = data::DecodeAdditionAnswer(*task, answers[r].data(), answers[r].size());
      bool ok = got.ok() && *got == chunk[r].a + chunk[r].b;
      result.correct += ok;
      if (!ok && first_wrong.empty())
        first_wrong = std::to_string(chunk[r].a) + "+" + std::to_string(chunk[r].b) + " -> " +
                      data::AdditionTokensToString(answers[r].data(), answers[r].size());
    }
  }
  result.ran = true;
  result.problems = static_cast<int64_t>(problems.size());
  std::printf("eval: addition exact match %s%% (%lld/%lld held-out problems, %d digits)%s%s\n",
              ExactPercent(result.correct, static_cast<int64_t>(problems.size())).c_str(),
              static_cast<long long>(result.correct), static_cast<long long>(result.problems),
              task->digits, first_wrong.empty() ? "" : "; first miss: ", first_wrong.c_str());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "eval: generated %lld answers of %d tokens in %.1f ms with the KV cache (%.0f "
      "tokens/s)\n",
      static_cast<long long>(result.problems), task->answer_length(), ms,
      result.problems * task->answer_length() / (ms / 1e3));
  std::printf("%s", load.Report().c_str());
  return result;
}

std::string ExactPercent(int64_t part, int64_t whole) {
  if (whole <= 0) return "0.0";
  const double pct = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  char buf[32];
  // One decimal, more where that would round a miss up to 100% or a hit down to 0%.
  for (int digits = 1; digits <= 6; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*f", digits, pct);
    const double shown = std::atof(buf);
    if ((part == whole || shown < 100.0) && (part == 0 || shown > 0.0)) break;
  }
  return buf;
}

}  // namespace ds::worker
