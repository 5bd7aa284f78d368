#include "runtime/worker/step_monitor.h"

#include <cmath>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::worker {

const char* TimeGroup(const std::string& kind) {
  static const std::map<std::string, const char*> groups = {{"LOAD_MICROBATCH", "data"},
                                                            {"FORWARD", "forward"},
                                                            {"BACKWARD", "backward"},
                                                            {"BACKWARD_INPUT", "backward"},
                                                            {"BACKWARD_WEIGHT", "backward"},
                                                            {"RECOMPUTE", "backward"},
                                                            {"OPTIMIZER_STEP", "step"},
                                                            {"SWAP_IN", "step"},
                                                            {"SWAP_OUT", "step"},
                                                            {"ZERO_GRADS", "other"},
                                                            {"CHECKPOINT_STASH", "forward"},
                                                            {"CHECKPOINT_RESTORE", "communication"},
                                                            {"CHECKPOINT_RELOAD", "backward"},
                                                            {"GRAD_NORM_REDUCE", "communication"},
                                                            {"OVERFLOW_REDUCE", "communication"},
                                                            {"LOSS_REDUCE", "communication"}};
  auto it = groups.find(kind);
  if (it != groups.end()) return it->second;
  for (const char* comm : {"REDUCE", "GATHER", "SEND", "RECV", "SCATTER", "BROADCAST", "TO_ALL"})
    if (kind.find(comm) != std::string::npos) return "communication";
  return "other";
}

StatusOr<std::unique_ptr<StepMonitor>> StepMonitor::Create(const config::JobConfig& c) {
  std::unique_ptr<StepMonitor> m(new StepMonitor());
  const config::MonitorConfig& mc = c.monitor;
  DS_ASSIGN_OR_RETURN(
      m->monitor_,
      monitor::Monitor::Create(
          {mc.tensorboard.enabled, mc.tensorboard.output_path, mc.tensorboard.job_name},
          {mc.csv_monitor.enabled, mc.csv_monitor.output_path, mc.csv_monitor.job_name}));
  m->batch_ = std::max<int64_t>(1, c.train_batch_size);
  m->print_every_ = c.steps_per_print;
  m->fp16_ = c.fp16.enabled;
  m->breakdown_ = c.wall_clock_breakdown;
  m->beta1_ = c.optimizer.beta1;
  m->beta2_ = c.optimizer.beta2;
  return m;
}

std::map<std::string, double> StepMonitor::Since(const std::map<std::string, double>& profile,
                                                 std::map<std::string, double>* last) const {
  std::map<std::string, double> groups;
  for (const auto& [kind, ms] : profile) groups[TimeGroup(kind)] += ms - (*last)[kind];
  *last = profile;
  return groups;
}

Status StepMonitor::Step(const StepMetrics& m, double val_loss,
                         const std::map<std::string, double>& profile, std::FILE* out) {
  skipped_ += m.skipped ? 1 : 0;
  const int64_t after = m.step * batch_;
  if (monitor_) {
    std::vector<monitor::Event> ev = {
        {"Train/Samples/train_loss", m.loss, after - batch_},
        {"Train/Samples/lr", m.lr, after},
        {"Train/Samples/grad_norm", m.grad_norm, after},
        {"Train/Samples/tokens_per_s", m.tokens_per_s, after},
        {"Train/Samples/peak_rss_MiB", m.peak_rss_bytes / 1048576.0, after}};
    if (fp16_) ev.push_back({"Train/Samples/loss_scale", m.loss_scale, after});
    if (m.moe_aux > 0) ev.push_back({"Train/Samples/moe_aux_loss", m.moe_aux, after});
    if (!std::isnan(val_loss)) ev.push_back({"Train/Samples/val_loss", val_loss, after});
    if (breakdown_)
      for (const auto& [group, ms] : Since(profile, &last_step_))
        ev.push_back({"Train/Samples/elapsed_time_ms_" + group, ms, after});
    DS_RETURN_IF_ERROR(monitor_->Write(ev));
  }
  if (print_every_ <= 0 || m.step % print_every_ != 0) return OkStatus();
  std::fprintf(out, "[Rank 0] step=%lld, skipped=%lld, lr=[%g], mom=[(%g, %g)]\n",
               static_cast<long long>(m.step), static_cast<long long>(skipped_), m.lr, beta1_,
               beta2_);
  if (breakdown_) {
    const std::map<std::string, double> g = Since(profile, &last_print_);
    auto ms = [&g](const char* k) { return g.count(k) ? g.at(k) : 0.0; };
    std::fprintf(out,
                 "[Rank 0] time (ms) | forward: %.2f | backward: %.2f | step: %.2f | "
                 "communication: %.2f | data: %.2f | other: %.2f (over %lld steps)\n",
                 ms("forward"), ms("backward"), ms("step"), ms("communication"), ms("data"),
                 ms("other"), static_cast<long long>(print_every_));
  }
  std::fflush(out);
  return OkStatus();
}

}  // namespace ds::worker
