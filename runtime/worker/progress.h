// Console progress and the per-step metrics CSV of a training run.
//
//   Progress p(total_steps, /*interval=*/10);
//   p.Report(metrics);            // "step 120/500 | loss 1.2345 | ... | ETA 1m02s"
//   MetricsCsv csv; DS_RETURN_IF_ERROR(csv.Open("metrics.csv", /*append=*/false));
#pragma once

#include <cstdio>
#include <string>

#include "runtime/base/status.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// Prints a progress line: rewritten in place on a terminal, one line per `interval` steps
// otherwise (logs, the agent). Tracks the ETA from the mean step time.
class Progress {
 public:
  Progress(int64_t total_steps, int64_t interval);
  void Report(const StepMetrics& m);
  void Note(const std::string& line);  // prints a full line without breaking the progress line
  void Finish();

 private:
  int64_t total_, interval_;
  bool tty_;
  double ms_sum_ = 0;
  int64_t n_ = 0;
  bool open_line_ = false;
};

// step,loss,lr,grad_norm,tokens_per_s,tflops,peak_rss_bytes,skipped,loss_scale,step_ms,val_loss
class MetricsCsv {
 public:
  ~MetricsCsv();
  // `moe`: a last column moe_aux (the routers' load-balancing loss, StepMetrics::moe_aux).
  Status Open(const std::string& path, bool append, bool moe = false);
  void Write(const StepMetrics& m, double val_loss);  // val_loss NaN: empty cell

 private:
  std::FILE* f_ = nullptr;
  bool moe_ = false;
};

std::string FormatDuration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace ds::worker
