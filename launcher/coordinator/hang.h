// Hang diagnosis from the ranks' plan positions. Every rank runs a known instruction stream and
// reports where it is in it (PlanPosition: step, instruction index, kind, group, bytes). When no
// rank's position moves for the deadline, the ranks furthest behind are the ones the others
// wait for: HangWatch names them, the instruction they are in, and where the others wait. A
// rank whose reports stopped while the others' go on (a stopped process: SIGSTOP, a frozen
// cgroup) is named first: its last position may equal the others' when it stopped inside the
// collective they all wait in.
//
// The deadline (fault_tolerance.hang_timeout): a fixed number of seconds, or auto, the default:
// `multiple` x the p99 of the measured step times once `warmup_steps` steps are done, clamped to
// [floor, ceiling]; before that (initialization, the first steps) the ceiling. Step times are
// the intervals between successive increases of the most advanced rank's completed steps.
//
//   HangWatch watch(HangOptions{}, /*world=*/4);
//   watch.Report(rank, position, completed_steps, now);   // every report
//   if (watch.Hung(now)) { Failure f = ...; f.cause = watch.Diagnose(now, hosts); }
//
// Not thread-safe: CoordinatorState calls it under its mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "launcher/coordinator/clock.h"
#include "launcher/coordinator/coordinator_types.h"

namespace ds::launcher {

struct HangOptions {
  bool enabled = true;                        // false: no hang detection
  std::chrono::milliseconds fixed{0};         // > 0: this deadline; 0: auto
  double multiple = 5;                        // auto: deadline = multiple x p99 step time
  int warmup_steps = 3;                       // auto: steps not measured
  std::chrono::milliseconds floor{10000};     // auto: at least
  std::chrono::milliseconds ceiling{600000};  // auto: at most, and before the warm-up is done
  // Per rank, the instruction stream it runs (a pipeline rank's stage: RankPlan.stage); ranks
  // are compared only with the ranks of their stream. Empty: every rank runs one stream.
  std::vector<int> streams;
};

// "auto (5 x p99 step time after 3 warm-up steps, at least 10.0 s, at most 600.0 s)" or
// "30.0 s": what the job prints at start.
std::string DescribeHangOptions(const HangOptions& options);

class HangWatch {
 public:
  HangWatch(HangOptions options, int world);

  // Rank `rank`'s report at `now`: its position and its completed steps.
  void Report(int rank, const PlanPosition& position, int64_t completed_steps, SteadyTime now);
  // The deadline now.
  std::chrono::milliseconds Deadline() const;
  // Whether step times were measured (auto: the deadline follows them from then on).
  bool measured() const { return !step_seconds_.empty(); }
  // "12.3 s (auto: 5 x p99 step 2.46 s)", "10.0 s (auto: 5 x p99 step 0.21 s = 1.05 s, floor)".
  std::string DeadlineText() const;
  // True when every rank reported a position and none moved for the deadline; while a rank is
  // between steps (validation, a checkpoint: what step times do not bound) for the maximum.
  bool Hung(SteadyTime now) const;
  // The ranks whose reports stopped (1.5 s without one while another rank's came), else the
  // ranks furthest behind the others of their stream (every rank when none is behind).
  std::vector<int> StuckRanks(SteadyTime now) const;
  // One paragraph: the silence and the deadline, each stuck rank (host from `hosts`, by rank),
  // its instruction and group, and where the other ranks wait.
  std::string Diagnose(SteadyTime now, const std::vector<std::string>& hosts) const;
  // A rank's position and how long it has stood there (nullopt: none reported).
  std::optional<PlanPosition> PositionOf(int rank) const;
  std::chrono::milliseconds StandingFor(int rank, SteadyTime now) const;

 private:
  struct Rank {
    std::optional<PlanPosition> position;
    SteadyTime moved_at{};     // when the position last changed
    SteadyTime reported_at{};  // the latest report
  };
  std::vector<int> SilentRanks(SteadyTime now) const;
  int StreamOf(int rank) const;
  double P99StepSeconds() const;

  HangOptions options_;
  std::vector<Rank> ranks_;
  int64_t max_steps_ = 0;                   // the most advanced rank's completed steps
  std::optional<SteadyTime> last_step_at_;  // when max_steps_ last increased
  std::deque<double> step_seconds_;         // measured step times, the latest 1000
};

}  // namespace ds::launcher
