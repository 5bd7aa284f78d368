#include "runtime/worker/task_eval.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/base/status_macros.h"
#include "runtime/data/addition_task.h"
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

// Greedy decoding of `answer_length` tokens for a batch of prompts; the model sees the
// whole example width each time (causal attention ignores what lies to the right).
Status GenerateAnswers(exec::Executor& ex, const data::AdditionTask& task,
                       const std::vector<data::AdditionProblem>& batch,
                       std::vector<std::vector<int32_t>>* answers, ExpertLoad* load) {
  const int64_t T = ex.seq(), B = ex.batch();
  const int prompt = task.prompt_length();
  Tensor logits = ex.Activation("logits");
  if (!logits.defined()) return FailedPreconditionError("the model has no \"logits\" tensor");
  const int64_t V = logits.dim(-1);
  std::fill(ex.targets(), ex.targets() + B * T, 0);
  std::fill(ex.ids(), ex.ids() + B * T, data::kAdditionPad);
  for (size_t r = 0; r < batch.size(); ++r) {
    std::vector<int32_t> p = data::EncodeAdditionPrompt(task, batch[r].a, batch[r].b);
    std::copy(p.begin(), p.end(), ex.ids() + r * T);
  }
  for (int j = 0; j < task.answer_length(); ++j) {
    DS_RETURN_IF_ERROR(ex.Forward(0));
    const int64_t pos = prompt - 1 + j;
    for (size_t r = 0; r < batch.size(); ++r) {
      const float* row = logits.f32() + (r * T + pos) * V;
      ex.ids()[r * T + pos + 1] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  }
  load->Add(ex, static_cast<int64_t>(batch.size()));  // the last forward saw whole examples
  answers->clear();
  for (size_t r = 0; r < batch.size(); ++r)
    answers->emplace_back(ex.ids() + r * T + prompt,
                          ex.ids() + r * T + prompt + task.answer_length());
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
  DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> ex,
                      trainer.MakeInferenceExecutor(batch, task->example_length()));
  std::vector<std::vector<int32_t>> answers;
  std::string first_wrong;
  ExpertLoad load;
  for (size_t start = 0; start < problems.size(); start += batch) {
    std::vector<data::AdditionProblem> chunk(
        problems.begin() + start, problems.begin() + std::min(problems.size(), start + batch));
    DS_RETURN_IF_ERROR(GenerateAnswers(*ex, *task, chunk, &answers, &load));
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
