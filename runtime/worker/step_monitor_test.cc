// StepMonitor: DeepSpeed's monitor events on the samples axis (csv_monitor read back), its
// step=... line every steps_per_print steps, and the wall_clock_breakdown groups.
#include "runtime/worker/step_monitor.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ds::worker {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("TimeGroup sorts the plan's instructions", "[worker][monitor]") {
  CHECK(std::string(TimeGroup("FORWARD")) == "forward");
  CHECK(std::string(TimeGroup("RECOMPUTE")) == "backward");
  CHECK(std::string(TimeGroup("BACKWARD_WEIGHT")) == "backward");
  CHECK(std::string(TimeGroup("OPTIMIZER_STEP")) == "step");
  CHECK(std::string(TimeGroup("REDUCE_SCATTER")) == "communication");
  CHECK(std::string(TimeGroup("ACT_ALL_GATHER")) == "communication");
  CHECK(std::string(TimeGroup("SEND")) == "communication");
  CHECK(std::string(TimeGroup("TIED_GRAD_ALL_REDUCE")) == "communication");
  CHECK(std::string(TimeGroup("ZERO_GRADS")) == "other");
}

TEST_CASE("StepMonitor: csv_monitor events, the step line and the time line", "[worker][monitor]") {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp") + "/step_monitor";
  std::filesystem::remove_all(dir);
  config::JobConfig c;
  c.train_batch_size = 16;
  c.steps_per_print = 2;
  c.wall_clock_breakdown = true;
  c.monitor.csv_monitor = {true, dir, "run"};
  auto mon = StepMonitor::Create(c);
  REQUIRE(mon.ok());
  const std::string out_path = dir + "/out.txt";
  std::FILE* out = std::fopen(out_path.c_str(), "w");
  REQUIRE(out);
  std::map<std::string, double> profile;
  for (int s = 1; s <= 4; ++s) {
    StepMetrics m;
    m.step = s;
    m.loss = 3.0 - s * 0.25;
    m.lr = 1e-3;
    m.skipped = s == 1;
    profile["FORWARD"] += 10;
    profile["BACKWARD"] += 20;
    profile["ALL_REDUCE"] += 5;
    profile["OPTIMIZER_STEP"] += 1;
    profile["LOAD_MICROBATCH"] += 0.25;  // the data loader: its own group
    const double val = s == 4 ? 2.0 : std::nan("");
    REQUIRE((*mon)->Step(m, val, profile, out).ok());
  }
  std::fclose(out);
  CHECK(Slurp(dir + "/run/Train_Samples_train_loss.csv") ==
        "step,train_loss\n0,2.75\n16,2.5\n32,2.25\n48,2\n");
  CHECK(Slurp(dir + "/run/Train_Samples_lr.csv") ==
        "step,lr\n16,0.001\n32,0.001\n48,0.001\n64,0.001\n");
  CHECK(Slurp(dir + "/run/Train_Samples_val_loss.csv") == "step,val_loss\n64,2\n");
  CHECK(Slurp(dir + "/run/Train_Samples_elapsed_time_ms_backward.csv") ==
        "step,elapsed_time_ms_backward\n16,20\n32,20\n48,20\n64,20\n");
  CHECK_FALSE(std::filesystem::exists(dir + "/run/Train_Samples_loss_scale.csv"));  // not fp16
  const std::string text = Slurp(out_path);
  CHECK(text.find("[Rank 0] step=2, skipped=1, lr=[0.001], mom=[(0.9, 0.999)]") !=
        std::string::npos);
  CHECK(text.find("[Rank 0] step=4, skipped=1") != std::string::npos);
  CHECK(text.find("time (ms) | forward: 20.00 | backward: 40.00 | step: 2.00 | communication: "
                  "10.00 | data: 0.50 | other: 0.00 (over 2 steps)") != std::string::npos);
  CHECK(text.find("step=1,") == std::string::npos);
}

}  // namespace
}  // namespace ds::worker
