#include "runtime/worker/progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>

namespace ds::worker {

std::string FormatDuration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lds", t);
  return buf;
}

namespace {

// " (aux 1.0132)": the MoE routers' load-balancing loss beside the loss it is part of.
std::string Aux(double aux) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), " (aux %.4f)", aux);
  return buf;
}

}  // namespace

Progress::Progress(int64_t total_steps, int64_t interval)
    : total_(total_steps), interval_(interval > 0 ? interval : 1), tty_(isatty(STDOUT_FILENO)) {}

void Progress::Report(const StepMetrics& m) {
  ms_sum_ += m.step_ms;
  ++n_;
  if (!tty_ && m.step % interval_ != 0 && m.step != total_) return;
  double eta = (total_ - m.step) * (ms_sum_ / n_) / 1e3;
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "step %lld/%lld | loss %.4f%s | lr %.2e | grad %.3f | %.0f tok/s | %.1f ms | ETA %s%s",
      static_cast<long long>(m.step), static_cast<long long>(total_), m.loss,
      m.moe_aux > 0 ? Aux(m.moe_aux).c_str() : "", m.lr, m.grad_norm, m.tokens_per_s, m.step_ms,
      FormatDuration(eta).c_str(), m.skipped ? " | SKIPPED (overflow)" : "");
  if (tty_) {
    std::printf("\r\033[K%s", line);
    open_line_ = true;
  } else {
    std::printf("%s\n", line);
  }
  std::fflush(stdout);
}

void Progress::Note(const std::string& text) {
  if (open_line_) std::printf("\n");
  open_line_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::Finish() {
  if (open_line_) std::printf("\n");
  open_line_ = false;
  std::fflush(stdout);
}

MetricsCsv::~MetricsCsv() {
  if (f_) std::fclose(f_);
}

Status MetricsCsv::Open(const std::string& path, bool append, bool moe) {
  moe_ = moe;
  // Create missing parent directories, as `mkdir -p` would.
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1))
    mkdir(path.substr(0, i).c_str(), 0755);
  bool exists = access(path.c_str(), F_OK) == 0;
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) return ErrnoToStatus(errno, "open(" + path + ")");
  if (!append || !exists)
    std::fprintf(f_,
                 "step,loss,lr,grad_norm,tokens_per_s,tflops,peak_rss_bytes,skipped,loss_scale,"
                 "step_ms,val_loss%s\n",
                 moe ? ",moe_aux" : "");
  return OkStatus();
}

void MetricsCsv::Write(const StepMetrics& m, double val_loss) {
  if (!f_) return;
  std::fprintf(f_, "%lld,%.6f,%.6e,%.6f,%.1f,%.4f,%lld,%d,%.1f,%.2f,",
               static_cast<long long>(m.step), m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.tflops,
               static_cast<long long>(m.peak_rss_bytes), m.skipped ? 1 : 0, m.loss_scale,
               m.step_ms);
  if (std::isfinite(val_loss)) std::fprintf(f_, "%.6f", val_loss);
  if (moe_) std::fprintf(f_, ",%.6f", m.moe_aux);
  std::fprintf(f_, "\n");
  std::fflush(f_);
}

}  // namespace ds::worker
