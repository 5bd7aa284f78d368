#include "runtime/planner/auto_layout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/planner/plan_builder.h"

namespace ds::planner {
namespace {

std::vector<int> Divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
  return d;
}

std::vector<int> NodeOfRank(const std::vector<int>& slots) {
  std::vector<int> node;
  for (size_t n = 0; n < slots.size(); ++n) node.insert(node.end(), slots[n], static_cast<int>(n));
  return node;
}

std::vector<int> HostOfRank(const AutoOptions& o, const std::vector<int>& node_of) {
  std::vector<int> host;
  for (int n : node_of)
    host.push_back(n < static_cast<int>(o.host_of_node.size()) ? o.host_of_node[n] : n);
  return host;
}

// Plans `layout` and predicts it; false (with the reason) when the planner refuses it.
StatusOr<bool> Evaluate(const Graph& graph, const plan::PlanConfig& base, const AutoOptions& o,
                        const std::vector<int>& node_of, Layout* layout, std::string* why) {
  const plan::PlanConfig config = layout->Apply(base);
  const int world = static_cast<int>(node_of.size());
  auto topo = plan::TopologyFor(world, config);
  auto plan = topo.ok() ? MakePlan(graph, *topo, config) : StatusOr<proto::Plan>(topo.status());
  if (!plan.ok()) {
    *why = layout->Name() + ": " + plan.status().message();
    return false;
  }
  const std::vector<int> host_of = HostOfRank(o, node_of);
  std::map<int, int> per_host;  // ranks sharing a machine's memory
  for (int h : host_of) ++per_host[h];
  double worst = -1;  // the rank closest to (or furthest over) its machine's share
  for (int r = 0; r < world; ++r) {
    const int64_t peak = plan->ranks(r).memory().peak_bytes();
    const int64_t budget = o.host_memory_per_node / per_host[host_of[r]];
    if (double(peak) / budget <= worst) continue;
    worst = double(peak) / budget;
    layout->peak_bytes = peak;
    layout->budget_bytes = budget;
  }
  if (layout->peak_bytes > layout->budget_bytes) return true;  // planned; does not fit
  DS_ASSIGN_OR_RETURN(layout->prediction,
                      PredictStep(*plan, graph, config, node_of, host_of, o.rates));
  const double tokens = double(base.train_batch_size) * base.seq_len;
  layout->tokens_per_s = tokens / (layout->prediction.step_ms / 1e3);
  return true;
}

}  // namespace

std::string Layout::Name() const {
  char s[160];
  std::snprintf(s, sizeof s, "tp %d pp %d dp %d zero %d micro %lld x gas %lld recompute %s", tp, pp,
                dp, stage, static_cast<long long>(micro), static_cast<long long>(gas),
                RecomputeModeName(recompute));
  std::string name = s;
  if (sp > 1) name += " ulysses " + std::to_string(sp);
  if (ep > 1) name += " ep " + std::to_string(ep);
  if (pp > 1) name += std::string(" schedule ") + plan::PipeScheduleName(schedule);
  if (virtual_stages > 1) name += " x" + std::to_string(virtual_stages);
  if (hpz > 1) name += " hpz " + std::to_string(hpz);
  if (offload > 0) name += offload > 1 ? " offload nvme+params" : " offload nvme";
  return name;
}

plan::PlanConfig Layout::Apply(const plan::PlanConfig& base) const {
  plan::PlanConfig c = base;
  c.tensor = tp;
  c.pipeline = pp;
  c.stage = stage;
  c.micro_batch_size = micro;
  c.gradient_accumulation_steps = gas;
  c.recompute = recompute;
  c.ulysses = sp;
  c.expert = ep;
  c.pipe_schedule = schedule;
  c.virtual_stages = virtual_stages;
  if (hpz > 1) c.hpz_partition_size = hpz;
  if (offload >= 1) {
    c.optimizer_nvme = true;
    c.sub_group_size = std::min(c.sub_group_size, kAutoSubGroupSize);
  }
  if (offload >= 2) c.param_nvme = true;
  return c;
}

namespace {

bool HasExperts(const Graph& graph) {
  for (const TensorInfo& t : graph.tensors)
    if (t.sharding == ShardKind::kExpert) return true;
  return false;
}

// Ulysses sizes worth planning: each rank takes seq_len / sp positions and n_head / sp heads
// (the planner refuses the rest, for every micro-batch and stage alike).
bool UlyssesSplits(const Graph& graph, const plan::PlanConfig& base, int sp) {
  auto it = graph.config.find("n_head");
  const int64_t heads = it == graph.config.end() ? 0 : static_cast<int64_t>(it->second);
  return base.seq_len % sp == 0 && (heads == 0 || heads % sp == 0);
}

// The model-parallel shapes of the grid: tensor (inside a node), pipeline with its schedules,
// Ulysses and expert sizes; dp, micro-batch, accumulation, stage and recompute come after.
std::vector<Layout> Shapes(const Graph& graph, const plan::PlanConfig& base, const AutoOptions& o,
                           int world) {
  std::vector<Layout> shapes;
  const bool experts = HasExperts(graph);
  for (int tp : Divisors(world)) {
    // A tensor-parallel group stays on one node (its all-reduces sit between every pair of
    // products; ds-launch refuses one that spans nodes): tp divides every node's slots.
    if (std::any_of(o.node_slots.begin(), o.node_slots.end(), [&](int s) { return s % tp; }))
      continue;
    for (int pp : Divisors(world / tp)) {
      if (pp > std::max(1, graph.num_blocks)) continue;
      const int dp = world / tp / pp;
      std::vector<std::pair<plan::PipeScheduleKind, int>> schedules{{base.pipe_schedule, 1}};
      if (pp > 1 && o.schedule_given) schedules = {{base.pipe_schedule, base.virtual_stages}};
      if (pp > 1 && !o.schedule_given) {
        schedules = {{plan::PipeScheduleKind::k1F1B, 1}, {plan::PipeScheduleKind::kZbH1, 1}};
        if (graph.num_blocks % (2 * pp) == 0)
          schedules.push_back({plan::PipeScheduleKind::kInterleaved, 2});
      }
      for (int sp : Divisors(dp)) {
        if (!UlyssesSplits(graph, base, sp)) continue;
        for (int ep : experts ? Divisors(dp) : std::vector<int>{1})
          for (const auto& [schedule, v] : schedules) {
            Layout l;
            l.tp = tp, l.pp = pp, l.dp = dp, l.sp = sp, l.ep = ep;
            l.schedule = schedule, l.virtual_stages = v;
            shapes.push_back(l);
          }
      }
    }
  }
  return shapes;
}

// Plans `l` with recompute none, else full where it does not fit without it, first with the
// states in memory, then (offload_max) swapped to NVMe; counts it in r. An offload level is
// tried only while the levels below it needed recompute to fit or did not fit at all.
Status TryLayout(const Graph& graph, const plan::PlanConfig& base, const AutoOptions& o,
                 const std::vector<int>& node_of, Layout l, AutoResult* r) {
  const std::vector<RecomputeMode> modes =
      o.recompute_given ? std::vector<RecomputeMode>{base.recompute}
                        : std::vector<RecomputeMode>{RecomputeMode::kNone, RecomputeMode::kFull};
  const int top = l.stage == 0 ? 0 : std::min(o.offload_max, l.stage == 3 ? 2 : 1);
  for (int offload = 0; offload <= top; ++offload) {
    l.offload = offload;
    for (RecomputeMode rc : modes) {
      l.recompute = rc;
      std::string why;
      ++r->planned;
      DS_ASSIGN_OR_RETURN(bool made, Evaluate(graph, base, o, node_of, &l, &why));
      if (!made) {
        ++r->refused;
        if (r->refusals.size() < 5) r->refusals.push_back(why);
        return OkStatus();  // neither recompute nor more offload makes it possible
      }
      if (l.peak_bytes <= l.budget_bytes) {
        r->layouts.push_back(l);
        if (rc == modes.front()) return OkStatus();  // more would only add work
        break;
      }
      ++r->too_big;
      const bool closer = r->closest.budget_bytes == 0 ||
                          double(l.peak_bytes) / l.budget_bytes <
                              double(r->closest.peak_bytes) / r->closest.budget_bytes;
      if (closer) r->closest = l;
    }
  }
  return OkStatus();
}

// hpZ over one node's dp ranks for a ZeRO-3 layout: where every node holds as many ranks, a node
// holds node_slots / tp consecutive dp ranks; worth a layout when that splits dp into groups of
// two or more (and the job sets no hpZ of its own). 1 otherwise.
int NodeHpz(const plan::PlanConfig& base, const AutoOptions& o, const Layout& l) {
  const int slots = plan::UniformNodeSlots(o.node_slots);
  if (base.hpz_partition_size > 1 || slots <= 0 || slots % l.tp != 0) return 1;
  const int node_dp = slots / l.tp;
  return node_dp > 1 && node_dp < l.dp && l.dp % node_dp == 0 ? node_dp : 1;
}

}  // namespace

StatusOr<AutoResult> SearchLayouts(const Graph& graph, const plan::PlanConfig& base,
                                   const AutoOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> node_of = NodeOfRank(o.node_slots);
  const int world = static_cast<int>(node_of.size());
  if (world < 1) return InvalidArgumentError("parallel: auto: no ranks to place");
  if (base.train_batch_size < 1)
    return InvalidArgumentError("parallel: auto needs train_batch_size (the global batch)");
  AutoResult r;
  for (Layout shape : Shapes(graph, base, o, world)) {
    const int data = shape.dp / shape.sp;  // the ranks the batch splits over
    if (base.train_batch_size % data != 0) continue;
    for (int micro : Divisors(base.train_batch_size / data)) {
      const int64_t gas = base.train_batch_size / data / micro;
      if ((o.micro > 0 && micro != o.micro) || (o.gas > 0 && gas != o.gas)) continue;
      if (shape.pp > 1 && gas < shape.pp) continue;  // fewer micro-batches than stages: all bubble
      for (int stage = 0; stage <= 3; ++stage) {
        Layout l = shape;
        l.micro = micro, l.gas = gas, l.stage = stage;
        DS_RETURN_IF_ERROR(TryLayout(graph, base, o, node_of, l, &r));
        l.hpz = stage == 3 ? NodeHpz(base, o, l) : 1;
        if (l.hpz > 1) DS_RETURN_IF_ERROR(TryLayout(graph, base, o, node_of, l, &r));
      }
    }
  }
  // Fastest first; within 0.1% of the fastest of a run of them, the one needing less memory
  // first, since the model cannot tell them apart.
  auto by_time = [](const Layout& a, const Layout& b) {
    return a.prediction.step_ms < b.prediction.step_ms;
  };
  std::stable_sort(r.layouts.begin(), r.layouts.end(), by_time);
  for (size_t g = 0; g < r.layouts.size();) {
    size_t e = g + 1;
    while (e < r.layouts.size() &&
           r.layouts[e].prediction.step_ms <= r.layouts[g].prediction.step_ms * 1.001)
      ++e;
    std::stable_sort(r.layouts.begin() + g, r.layouts.begin() + e,
                     [](const Layout& a, const Layout& b) { return a.peak_bytes < b.peak_bytes; });
    g = e;
  }
  r.search_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string ExplainLead(const Layout& best, const Layout& next) {
  const StepPrediction &a = best.prediction, &b = next.prediction;
  std::string kind;
  double most = 0;
  for (const auto& [k, ms] : b.kind_ms) {
    const double mine = a.kind_ms.count(k) ? a.kind_ms.at(k) : 0;
    if (std::fabs(ms - mine) > std::fabs(most)) {
      most = ms - mine;
      kind = k;
    }
  }
  for (const auto& [k, ms] : a.kind_ms)
    if (!b.kind_ms.count(k) && std::fabs(ms) > std::fabs(most)) {
      most = -ms;
      kind = k;
    }
  char s[512];
  if (std::fabs(b.step_ms - a.step_ms) <= 1e-3 * a.step_ms) {
    std::snprintf(s, sizeof s,
                  "why %s leads %s: the same predicted time (%.1f ms, within 0.1%%), and %s: "
                  "%.1f MiB per rank against %.1f",
                  best.Name().c_str(), next.Name().c_str(), a.step_ms,
                  best.peak_bytes < next.peak_bytes    ? "it needs less memory"
                  : best.peak_bytes == next.peak_bytes ? "the same memory"
                                                       : "it needs more memory",
                  best.peak_bytes / 1048576.0, next.peak_bytes / 1048576.0);
    return s;
  }
  std::snprintf(s, sizeof s,
                "why %s leads %s by %.1f ms: compute %.1f vs %.1f ms, communication not hidden "
                "by compute %.1f vs %.1f ms; the largest difference is %s (%+.1f ms in the "
                "other)",
                best.Name().c_str(), next.Name().c_str(), b.step_ms - a.step_ms, a.compute_ms,
                b.compute_ms, a.exposed_comm_ms, b.exposed_comm_ms, kind.c_str(), most);
  return s;
}

std::string FormatAutoResult(const AutoResult& r, int top) {
  std::string out;
  char line[400];
  std::snprintf(line, sizeof line,
                "auto: %d layouts planned in %.2f s: %zu fit, %d over the memory per rank, %d "
                "refused by the planner\n",
                r.planned, r.search_ms / 1e3, r.layouts.size(), r.too_big, r.refused);
  out += line;
  std::snprintf(line, sizeof line, "%4s  %-74s %9s %10s %9s %10s %10s\n", "rank", "layout",
                "step ms", "tokens/s", "peak MiB", "intra MiB", "inter MiB");
  out += line;
  for (int i = 0; i < std::min<int>(top, static_cast<int>(r.layouts.size())); ++i) {
    const Layout& l = r.layouts[i];
    std::snprintf(line, sizeof line, "%4d  %-74s %9.1f %10.0f %9.1f %10.1f %10.1f\n", i + 1,
                  l.Name().c_str(), l.prediction.step_ms, l.tokens_per_s, l.peak_bytes / 1048576.0,
                  l.prediction.intra_bytes / 1048576.0, l.prediction.inter_bytes / 1048576.0);
    out += line;
  }
  if (r.layouts.size() >= 2) out += ExplainLead(r.layouts[0], r.layouts[1]) + "\n";
  for (const std::string& why : r.refusals) out += "  refused: " + why + "\n";
  return out;
}

std::string AutoResultJson(const AutoResult& r, int top) {
  Json layouts = Json::Array();
  for (int i = 0; i < std::min<int>(top, static_cast<int>(r.layouts.size())); ++i) {
    const Layout& l = r.layouts[i];
    Json o = Json::Object();
    o.Set("name", Json::String(l.Name()));
    o.Set("tp", Json::Int(l.tp));
    o.Set("pp", Json::Int(l.pp));
    o.Set("dp", Json::Int(l.dp));
    o.Set("zero_stage", Json::Int(l.stage));
    o.Set("micro_batch", Json::Int(l.micro));
    o.Set("gradient_accumulation_steps", Json::Int(l.gas));
    o.Set("recompute", Json::String(RecomputeModeName(l.recompute)));
    o.Set("ulysses", Json::Int(l.sp));
    o.Set("expert", Json::Int(l.ep));
    o.Set("schedule", Json::String(plan::PipeScheduleName(l.schedule)));
    o.Set("virtual_stages", Json::Int(l.virtual_stages));
    o.Set("hpz_partition_size", Json::Int(l.hpz));
    o.Set("offload", Json::String(l.offload == 0   ? "none"
                                  : l.offload == 1 ? "nvme"
                                                   : "nvme+params"));
    o.Set("predicted_step_ms", Json::Double(l.prediction.step_ms));
    o.Set("predicted_compute_ms", Json::Double(l.prediction.compute_ms));
    o.Set("predicted_exposed_comm_ms", Json::Double(l.prediction.exposed_comm_ms));
    o.Set("tokens_per_s", Json::Double(l.tokens_per_s));
    o.Set("peak_bytes", Json::Int(l.peak_bytes));
    o.Set("intra_node_bytes", Json::Int(l.prediction.intra_bytes));
    o.Set("inter_node_bytes", Json::Int(l.prediction.inter_bytes));
    layouts.Append(std::move(o));
  }
  Json out = Json::Object();
  out.Set("layouts", std::move(layouts));
  out.Set("planned", Json::Int(r.planned));
  out.Set("refused", Json::Int(r.refused));
  out.Set("over_memory", Json::Int(r.too_big));
  out.Set("search_ms", Json::Double(r.search_ms));
  return out.Dump(1) + "\n";
}

}  // namespace ds::planner
