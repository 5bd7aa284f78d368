#include "runtime/worker/flops_profiler.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "proto/plan.pb.h"
#include "runtime/core/dtype.h"
#include "runtime/worker/step_monitor.h"

namespace ds::worker {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string Line(const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-70s  %-8s\n", label.c_str(), value.c_str());
  return buf;
}

struct Module {
  std::string name, kind;
  int64_t params = 0;
  double macs = 0, flops = 0, ms = 0;  // per micro-batch forward
  std::vector<const exec::NodeCost*> nodes;
};

double PerCall(const exec::NodeCost& n, int64_t micro_batches) {
  return n.forward_ms / std::max<int64_t>(1, n.forward_calls ? n.forward_calls : micro_batches);
}

// The depth-1 modules: embeddings (before the first block), block.i, head (after the last).
std::vector<Module> Modules(const FlopsProfileInput& in) {
  std::vector<Module> out;
  bool seen_block = false;
  for (const exec::NodeCost& n : in.nodes) {
    std::string name, kind;
    if (n.block >= 0) {
      seen_block = true;
      name = "block." + std::to_string(n.block);
      kind = "block";
    } else {
      name = kind = seen_block ? "head" : "embeddings";
    }
    if (out.empty() || out.back().name != name) out.push_back({name, kind});
    Module& m = out.back();
    m.params += n.params;
    m.flops += n.forward_flops;
    m.macs += n.forward_flops / 2;
    m.ms += PerCall(n, in.micro_batches);
    m.nodes.push_back(&n);
  }
  return out;
}

// "{'block': '1.2 M', 'head': ...}": the top k kinds by `value`.
std::string Top(const std::map<std::string, double>& by_kind, int k, const std::string& unit,
                bool params, bool ms) {
  std::vector<std::pair<double, std::string>> v;
  for (const auto& [kind, x] : by_kind) v.push_back({x, kind});
  std::sort(v.rbegin(), v.rend());
  std::string out = "{";
  for (int i = 0; i < k && i < static_cast<int>(v.size()); ++i)
    out += (i ? ", '" : "'") + v[i].second + "': '" +
           HumanNumber(ms ? v[i].first / 1000 : v[i].first, unit, params) + "'";
  return out + "}";
}

std::string Share(double part, double whole) {
  return Fmt("%.2f", whole > 0 ? 100 * part / whole : 0) + "%";
}

std::string Row(const std::string& name, int64_t params, double macs, double ms, double flops,
                const Module& total) {
  return name + ": " + HumanNumber(params, "", true) + " = " + Share(params, total.params) +
         " Params, " + HumanNumber(macs, "MACs") + " = " + Share(macs, total.macs) + " MACs, " +
         HumanNumber(ms / 1000, "s") + " = " + Share(ms, total.ms) + " latency, " +
         HumanNumber(ms > 0 ? flops / (ms / 1000) : 0, "FLOPS") + "\n";
}

std::string Summary(const FlopsProfileInput& in, const Module& model) {
  const double gas = static_cast<double>(std::max<int64_t>(1, in.micro_batches));
  const double fwd_s = in.fwd_ms / gas / 1000, bwd_s = in.bwd_ms / gas / 1000;
  const double opt_s = in.opt_ms / gas / 1000, iter_s = in.iter_ms / gas / 1000;
  const double b = 2 + in.recompute_fwd_factor, f = model.flops;
  std::string s = Line("world size: ", std::to_string(in.world));
  s += Line("data parallel size: ", std::to_string(in.dp));
  s += Line("model parallel size: ", std::to_string(in.mp));
  s += Line("batch size per GPU: ", std::to_string(in.micro_batch));
  s += Line("params per GPU: ", HumanNumber(in.params, "", true));
  s += Line("params of model = params per GPU * mp_size: ",
            HumanNumber(static_cast<double>(in.params) * in.mp, "", true));
  s += Line("fwd MACs per GPU: ", HumanNumber(f / 2, "MACs"));
  s += Line("fwd flops per GPU: ", HumanNumber(f, ""));
  s += Line("fwd flops of model = fwd flops per GPU * mp_size: ", HumanNumber(f * in.mp, ""));
  s += Line("fwd latency: ", HumanNumber(fwd_s, "s"));
  s += Line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ",
            HumanNumber(fwd_s > 0 ? f / fwd_s : 0, "FLOPS"));
  s += Line("bwd latency: ", HumanNumber(bwd_s, "s"));
  s += Line("bwd FLOPS per GPU = " + Fmt("%g", b) + " * fwd flops per GPU / bwd latency: ",
            HumanNumber(bwd_s > 0 ? b * f / bwd_s : 0, "FLOPS"));
  s += Line(
      "fwd+bwd FLOPS per GPU = " + Fmt("%g", b + 1) + " * fwd flops per GPU / (fwd+bwd latency): ",
      HumanNumber(fwd_s + bwd_s > 0 ? (b + 1) * f / (fwd_s + bwd_s) : 0, "FLOPS"));
  s += Line("step latency: ", HumanNumber(opt_s, "s"));
  s += Line("iter latency: ", HumanNumber(iter_s, "s"));
  const double achieved = iter_s > 0 ? (b + 1) * f / iter_s : 0;
  s += Line("FLOPS per GPU = " + Fmt("%g", b + 1) + " * fwd flops per GPU / iter latency: ",
            HumanNumber(achieved, "FLOPS"));
  s += Line("samples/second: ",
            Fmt("%.2f", iter_s > 0 ? in.micro_batch * static_cast<double>(in.world) / iter_s : 0));
  s +=
      Line("MFU = FLOPS per GPU / peak FLOPS per GPU: ",
           in.peak_flops > 0 ? Share(achieved, in.peak_flops) + " of " +
                                   HumanNumber(in.peak_flops, "FLOPS") + " (" + in.peak_source + ")"
                             : "n/a (no peak known for this device)");
  return s;
}

}  // namespace

std::string HumanNumber(double x, const std::string& unit, bool params) {
  struct Scale {
    double mag;
    const char* prefix;
  };
  static const Scale kScales[] = {{1e12, "T"}, {1e9, "G"},  {1e6, "M"}, {1e3, "K"},
                                  {1, ""},     {1e-3, "m"}, {1e-6, "u"}};
  const double a = std::fabs(x);
  Scale s = {1, ""};
  for (const Scale& c : kScales)
    if (a >= c.mag) {
      s = c;
      break;
    }
  if (a > 0 && a < 1e-6) s = {1e-6, "u"};
  std::string prefix = s.prefix;
  if (params && prefix == "G") prefix = "B";
  const double v = std::round(x / s.mag * 100) / 100;
  return Fmt("%g", v) + " " + prefix + unit;
}

// gemm.h's products as the kernels run them (a bf16 run against the fp32 rate read 162% on a
// CPU with AVX512_BF16).
std::pair<double, std::string> MeasureCpuGemmPeak(bool bf16) {
  constexpr int64_t n = 1024;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  std::vector<uint16_t> a16(n * n, FloatToBf16(1.0f)), b16(n * n, FloatToBf16(0.5f));
  const kernels::cpu::GemmShape s{false, false, n, n, n, n, n, n};
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    if (bf16)
      kernels::cpu::GemmBf16(s, 1.f, a16.data(), b16.data(), 0.f, c.data(),
                             kernels::cpu::Bf16Gemm::kNative);
    else
      kernels::cpu::Gemm(s, 1.f, a.data(), b.data(), 0.f, c.data());
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && t > 0) best = std::max(best, 2.0 * n * n * n / t);
  }
  return {best, std::string("measured: ") + (bf16 ? "bf16" : "fp32") +
                    " GEMM 1024^3 on this rank's threads"};
}

StatusOr<StepMetrics> ProfiledStep(Trainer* t, double peak_flops, const std::string& peak_source,
                                   std::FILE* out) {
  const std::map<std::string, double> before = t->InstructionProfile();
  t->SetNodeTiming(true);
  StatusOr<StepMetrics> m = t->TrainStep();
  t->SetNodeTiming(false);
  if (!m.ok()) return m;
  const config::JobConfig& c = t->config();
  const proto::PlanTopology& topo = t->plan().topology();
  FlopsProfileInput in;
  in.step = m->step;
  in.world = topo.world();
  in.dp = topo.dp();
  in.mp = std::max(1, topo.tp()) * std::max(1, topo.pp());
  in.micro_batch = c.train_micro_batch_size_per_gpu;
  in.micro_batches = c.gradient_accumulation_steps;
  in.params = t->plan().model().num_parameters();
  in.model_name = t->plan().model().name().empty() ? "model" : t->plan().model().name();
  in.nodes = t->executor().NodeCosts();
  for (const auto& [kind, ms] : t->InstructionProfile()) {
    const double d = ms - (before.count(kind) ? before.at(kind) : 0.0);
    const std::string g = TimeGroup(kind);
    if (g == "forward") in.fwd_ms += d;
    if (g == "backward") in.bwd_ms += d;
    if (g == "step") in.opt_ms += d;
  }
  in.iter_ms = m->step_ms;
  in.recompute_fwd_factor = c.monitor.flops_profiler.recompute_fwd_factor;
  in.peak_flops = peak_flops;
  in.peak_source = peak_source;
  in.module_depth = c.monitor.flops_profiler.module_depth;
  in.top_modules = c.monitor.flops_profiler.top_modules;
  in.detailed = c.monitor.flops_profiler.detailed;
  const std::string report = FlopsProfileReport(in);
  const std::string& file = c.monitor.flops_profiler.output_file;
  std::FILE* f = file.empty() ? out : std::fopen(file.c_str(), "a");
  if (!f) return ErrnoToStatus(errno, "flops_profiler.output_file " + file);
  std::fputs(report.c_str(), f);
  if (f != out) std::fclose(f);
  std::fflush(out);
  return m;
}

std::string FlopsProfileReport(const FlopsProfileInput& in) {
  std::vector<Module> mods = Modules(in);
  Module model{in.model_name, "model"};
  for (const Module& m : mods) {
    model.params += m.params;  // (a tied parameter counts in each module that reads it)
    model.macs += m.macs;
    model.flops += m.flops;
    model.ms += m.ms;
  }
  std::string s =
      "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n";
  s += "Profile Summary at step " + std::to_string(in.step) + ":\n";
  s += "Notations:\n"
       "data parallel size (dp_size), model parallel size(mp_size),\n"
       "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
       "number of floating-point operations (flops), floating-point operations per second "
       "(FLOPS),\n"
       "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
       "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n";
  s += Summary(in, model);
  s += "\n----------------------------- Aggregated Profile per GPU "
       "-----------------------------\n";
  s += "Top " + std::to_string(in.top_modules) +
       " modules in terms of params, MACs or fwd latency at different model depths:\n";
  const int depths = in.module_depth < 0 ? 3 : std::min(3, in.module_depth + 1);
  for (int d = 0; d < depths; ++d) {
    std::map<std::string, double> params, macs, ms;
    if (d == 0) {
      params[model.name] = model.params, macs[model.name] = model.macs, ms[model.name] = model.ms;
    }
    for (const Module& m : mods) {
      if (d == 1) params[m.kind] += m.params, macs[m.kind] += m.macs, ms[m.kind] += m.ms;
      for (const exec::NodeCost* n : m.nodes)
        if (d == 2) {
          params[n->op] += n->params;
          macs[n->op] += n->forward_flops / 2;
          ms[n->op] += PerCall(*n, in.micro_batches);
        }
    }
    s += "depth " + std::to_string(d) + ":\n";
    s += "    params      - " + Top(params, in.top_modules, "", true, false) + "\n";
    s += "    MACs        - " + Top(macs, in.top_modules, "MACs", false, false) + "\n";
    s += "    fwd latency - " + Top(ms, in.top_modules, "s", false, true) + "\n";
  }
  if (in.detailed) {
    s += "\n------------------------------ Detailed Profile per GPU "
         "------------------------------\n";
    s += "Each module profile is listed after its name in the following order:\n"
         "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
         "percentage of total fwd latency, fwd FLOPS\n\n";
    s += Row(model.name, model.params, model.macs, model.ms, model.flops, model);
    for (const Module& m : mods) {
      s += "  " + Row(m.name, m.params, m.macs, m.ms, m.flops, model);
      if (depths < 3) continue;
      for (const exec::NodeCost* n : m.nodes)
        s += "    " + Row(n->name + " (" + n->op + ")", n->params, n->forward_flops / 2,
                          PerCall(*n, in.micro_batches), n->forward_flops, model);
    }
  }
  s += "------------------------------------------------------------------------------\n";
  return s;
}

}  // namespace ds::worker
