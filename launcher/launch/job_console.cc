#include "launcher/launch/job_console.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace ds::launcher {

using std::chrono::milliseconds;

Console::Console(CoordinatorState* state) : state_(state), tty_(isatty(STDOUT_FILENO)) {}

void Console::Pump(milliseconds wait) {
  LogChunk chunk = state_->ReadLogs(cursor_, 2000, wait);
  cursor_ = chunk.next_cursor;
  for (const LogRecord& r : chunk.records) {
    // Workers draw their own progress line with '\r'; keep the last part.
    std::string text = r.line.text;
    size_t cr = text.rfind('\r');
    if (cr != std::string::npos) text = text.substr(cr + 1);
    size_t esc = text.find("\033[K");
    if (esc != std::string::npos) text.erase(esc, 3);
    ClearLine();
    std::printf("[rank %d] %s\n", r.line.rank, text.c_str());
  }
  if (tty_) Progress();
  std::fflush(stdout);
}

void Console::ClearLine() {
  if (progress_shown_) std::printf("\r\033[K");
  progress_shown_ = false;
}

void Console::Progress() {
  JobStatus s = state_->Snapshot();
  if (s.ranks.empty() || s.phase != JobPhase::kRunning) return;
  int64_t step = INT64_MAX, total = 0;
  double loss = 0, tps = 0;
  for (const RankStatus& r : s.ranks) {
    step = std::min(step, r.step);
    total = std::max(total, r.total_steps);
    loss += r.loss / s.ranks.size();
    tps += r.tokens_per_s;
  }
  if (total <= 0) return;
  auto now = std::chrono::steady_clock::now();
  if (s.round != eta_round_ || step < eta_step_) {  // a new round restarts the estimate
    eta_round_ = s.round;
    eta_step_ = step;
    eta_start_ = now;
  }
  std::string eta = "?";
  double elapsed = std::chrono::duration<double>(now - eta_start_).count();
  if (step > eta_step_ && elapsed > 0) {
    long left = std::lround((total - step) * elapsed / (step - eta_step_));
    eta = left >= 60 ? std::to_string(left / 60) + "m" + std::to_string(left % 60) + "s"
                     : std::to_string(left) + "s";
  }
  std::printf(
      "\r\033[Kjob %s | round %d | step %lld/%lld | loss %.4f | %.0f tok/s | %zu ranks | ETA %s",
      s.job_id.c_str(), s.round, static_cast<long long>(step), static_cast<long long>(total), loss,
      tps, s.ranks.size(), eta.c_str());
  progress_shown_ = true;
}

void PrintFailure(const JobOutcome& out) {
  std::fprintf(stderr, "ds-launch: job %s: %s\n", JobPhaseName(out.phase), out.message.c_str());
  if (!out.first_failure) return;
  const Failure& f = *out.first_failure;
  if (f.rank >= 0)
    std::fprintf(stderr, "ds-launch: first failure: rank %d on %s: %s\n", f.rank, f.host.c_str(),
                 f.cause.c_str());
  else
    std::fprintf(stderr, "ds-launch: first failure: node %s: %s\n", f.host.c_str(),
                 f.cause.c_str());
  if (!f.last_lines.empty()) {
    std::fprintf(stderr, "ds-launch: last lines of rank %d:\n", f.rank);
    for (const std::string& l : f.last_lines) std::fprintf(stderr, "    %s\n", l.c_str());
  }
}

}  // namespace ds::launcher
