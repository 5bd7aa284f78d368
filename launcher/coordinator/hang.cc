#include "launcher/coordinator/hang.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "fmt/format.h"

namespace ds::launcher {
namespace {

double Seconds(std::chrono::milliseconds ms) { return ms.count() / 1000.0; }

// Reports come every 500 ms: a rank without one for three intervals while others report is
// stopped (or cut off).
constexpr std::chrono::milliseconds kSilence(1500);

bool Before(const PlanPosition& a, const PlanPosition& b) {
  return std::make_pair(a.step, a.instruction) < std::make_pair(b.step, b.instruction);
}

// "step 5, instruction 12 REDUCE_SCATTER on dp.0 (4.00 MiB)"; outside a step "step 5: data".
std::string Where(const PlanPosition& p) {
  if (p.instruction < 0) return fmt::format("step {}: {}", p.step, p.kind);
  std::string s = fmt::format("step {}, instruction {} {}", p.step, p.instruction, p.kind);
  if (!p.group.empty()) s += " on group " + p.group;
  if (p.bytes > 0) s += fmt::format(" ({:.2f} MiB)", p.bytes / 1048576.0);
  return s;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

std::string DescribeHangOptions(const HangOptions& o) {
  if (!o.enabled) return "off";
  if (o.fixed.count() > 0) return fmt::format("{:.1f} s", Seconds(o.fixed));
  return fmt::format(
      "auto ({:g} x p99 step time after {} warm-up steps, at least {:.1f} s, at most {:.1f} s)",
      o.multiple, o.warmup_steps, Seconds(o.floor), Seconds(o.ceiling));
}

HangWatch::HangWatch(HangOptions options, int world)
    : options_(std::move(options)), ranks_(std::max(world, 0)) {}

void HangWatch::Report(int rank, const PlanPosition& position, int64_t completed_steps,
                       SteadyTime now) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  Rank& r = ranks_[rank];
  r.reported_at = now;
  if (!r.position || !(*r.position == position)) {
    r.position = position;
    r.moved_at = now;
  }
  if (completed_steps <= max_steps_) return;
  // One interval per step: a jump of several steps between reports is their mean.
  if (last_step_at_ && max_steps_ >= options_.warmup_steps) {
    const double per_step = std::chrono::duration<double>(now - *last_step_at_).count() /
                            static_cast<double>(completed_steps - max_steps_);
    for (int64_t i = max_steps_; i < completed_steps; ++i) step_seconds_.push_back(per_step);
    while (step_seconds_.size() > 1000) step_seconds_.pop_front();
  }
  max_steps_ = completed_steps;
  last_step_at_ = now;
}

double HangWatch::P99StepSeconds() const {
  std::vector<double> s(step_seconds_.begin(), step_seconds_.end());
  std::sort(s.begin(), s.end());
  const size_t at = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(s.size()))) - 1;
  return s[std::min(at, s.size() - 1)];
}

std::chrono::milliseconds HangWatch::Deadline() const {
  if (options_.fixed.count() > 0) return options_.fixed;
  if (step_seconds_.empty()) return options_.ceiling;
  const auto scaled = std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(options_.multiple * P99StepSeconds() * 1000.0)));
  return std::clamp(scaled, options_.floor, options_.ceiling);
}

std::string HangWatch::DeadlineText() const {
  const double deadline = Seconds(Deadline());
  if (options_.fixed.count() > 0)
    return fmt::format("{:.1f} s (fault_tolerance.hang_timeout)", deadline);
  if (step_seconds_.empty())
    return fmt::format("{:.1f} s (auto: the ceiling until {} steps are measured)", deadline,
                       options_.warmup_steps + 1);
  const double p99 = P99StepSeconds(), scaled = options_.multiple * p99;
  const char* bound = scaled * 1000 < options_.floor.count()     ? ", the floor"
                      : scaled * 1000 > options_.ceiling.count() ? ", the ceiling"
                                                                 : "";
  return fmt::format("{:.1f} s (auto: {:g} x p99 step {:.3f} s = {:.2f} s{})", deadline,
                     options_.multiple, p99, scaled, bound);
}

bool HangWatch::Hung(SteadyTime now) const {
  if (!options_.enabled || ranks_.empty()) return false;
  SteadyTime latest{};
  bool outside = false;  // a rank between steps (validation, a checkpoint): no step time bounds it
  for (const Rank& r : ranks_) {
    if (!r.position) return false;
    latest = std::max(latest, r.moved_at);
    outside = outside || r.position->instruction < 0;
  }
  const auto deadline = outside && options_.fixed.count() == 0 ? options_.ceiling : Deadline();
  return now - latest > deadline;
}

std::vector<int> HangWatch::SilentRanks(SteadyTime now) const {
  std::vector<int> silent;
  SteadyTime latest{};
  for (const Rank& r : ranks_) latest = std::max(latest, r.reported_at);
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i)
    if (ranks_[i].position && now - ranks_[i].reported_at > kSilence &&
        latest - ranks_[i].reported_at > kSilence)
      silent.push_back(i);
  return silent;
}

int HangWatch::StreamOf(int rank) const {
  return rank < static_cast<int>(options_.streams.size()) ? options_.streams[rank] : 0;
}

std::vector<int> HangWatch::StuckRanks(SteadyTime now) const {
  std::vector<int> stuck = SilentRanks(now);
  if (!stuck.empty()) return stuck;
  // Instruction indexes mean the same place only within one stream (a pipeline's stage).
  std::map<int, std::vector<int>> streams;
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i)
    if (ranks_[i].position) streams[StreamOf(i)].push_back(i);
  for (const auto& [stream, members] : streams) {
    const PlanPosition* least = nullptr;
    for (int i : members)
      if (!least || Before(*ranks_[i].position, *least)) least = &*ranks_[i].position;
    std::vector<int> behind;
    for (int i : members)
      if (!Before(*least, *ranks_[i].position)) behind.push_back(i);
    // One stream: its laggards, or all of it. Several: a stream's ranks count only when some
    // of its ranks are ahead of them.
    if (streams.size() == 1 || behind.size() < members.size())
      stuck.insert(stuck.end(), behind.begin(), behind.end());
  }
  if (stuck.empty())
    for (const auto& [stream, members] : streams)
      stuck.insert(stuck.end(), members.begin(), members.end());
  std::sort(stuck.begin(), stuck.end());
  return stuck;
}

std::optional<PlanPosition> HangWatch::PositionOf(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return std::nullopt;
  return ranks_[rank].position;
}

std::chrono::milliseconds HangWatch::StandingFor(int rank, SteadyTime now) const {
  if (!PositionOf(rank)) return std::chrono::milliseconds(-1);
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - ranks_[rank].moved_at);
}

std::string HangWatch::Diagnose(SteadyTime now, const std::vector<std::string>& hosts) const {
  SteadyTime latest{};
  for (const Rank& r : ranks_) latest = std::max(latest, r.moved_at);
  std::string text =
      fmt::format("hang: no rank moved for {:.1f} s (deadline {})",
                  std::chrono::duration<double>(now - latest).count(), DeadlineText());
  const std::vector<int> stuck = StuckRanks(now);
  const std::vector<int> silent = SilentRanks(now);
  const int world = static_cast<int>(ranks_.size());
  if (stuck.empty()) return text;
  if (static_cast<int>(stuck.size()) == world) {
    bool same = true;
    for (int r : stuck) same = same && *ranks_[r].position == *ranks_[stuck[0]].position;
    if (same)
      return text + fmt::format("; every rank stands at {}", Where(*ranks_[stuck[0]].position));
    text += "; no rank is behind the others of its stage:";
    for (int r : stuck)
      text += fmt::format("{} rank {} on {} at {}", r == stuck[0] ? "" : ";", r,
                          r < static_cast<int>(hosts.size()) ? hosts[r] : "?",
                          Where(*ranks_[r].position));
    return text;
  }
  for (int r : stuck) {
    const std::string host = r < static_cast<int>(hosts.size()) ? hosts[r] : "?";
    text += fmt::format("; rank {} on {} stands at {} for {:.1f} s", r, host,
                        Where(*ranks_[r].position),
                        std::chrono::duration<double>(now - ranks_[r].moved_at).count());
    if (!silent.empty())
      text += fmt::format(" and sent no report for {:.1f} s (stopped?)",
                          std::chrono::duration<double>(now - ranks_[r].reported_at).count());
  }
  // Where the others wait: their positions, the most common first.
  std::map<std::tuple<int64_t, int, std::string>, std::vector<int>> waiting;
  for (int i = 0; i < world; ++i)
    if (std::find(stuck.begin(), stuck.end(), i) == stuck.end()) {
      const PlanPosition& p = *ranks_[i].position;
      waiting[{p.step, p.instruction, p.group}].push_back(i);
    }
  std::vector<std::vector<int>> groups;
  for (auto& [at, ranks] : waiting) groups.push_back(ranks);
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  for (const std::vector<int>& g : groups)
    text += fmt::format("; rank{} {} wait{} at {}", g.size() == 1 ? "" : "s", RankList(g),
                        g.size() == 1 ? "s" : "", Where(*ranks_[g[0]].position));
  return text;
}

}  // namespace ds::launcher
