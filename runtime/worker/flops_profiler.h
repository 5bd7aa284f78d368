// The flops profiler's report (DeepSpeed's flops_profiler block), in DeepSpeed's layout: the
// "Profile Summary at step N" lines (world, dp and model-parallel sizes, batch size per GPU,
// params, fwd MACs and flops, fwd / bwd / step / iter latency and the FLOPS they give, samples
// per second) with the model FLOPs utilisation against the device's peak added, then the
// aggregated profile (the top modules by params, MACs and fwd latency at each depth) and the
// detailed profile (each module and op with its share of params, MACs and latency, and its
// FLOPS).
//
// Modules: depth 0 the model; depth 1 the embeddings, each transformer block and the head (the
// nodes before the first block, the blocks by Node.block, the nodes after the last); depth 2
// each module's ops (nodes). Aggregated per depth by kind (embeddings / block / head; op type),
// as DeepSpeed sums per module class. Latencies are means per micro-batch over the profiled
// step; FLOPs are the ops' formulas (runtime/exec NodeCost), per micro-batch.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/exec/executor.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

struct FlopsProfileInput {
  int64_t step = 0;
  int world = 1, dp = 1, mp = 1;  // mp: tensor x pipeline
  int64_t micro_batch = 1, micro_batches = 1;
  int64_t params = 0;  // this rank's parameters
  std::string model_name;
  std::vector<exec::NodeCost> nodes;  // timed over the step
  // The step's milliseconds in forward, backward and the optimizer (TimeGroup), and its wall.
  double fwd_ms = 0, bwd_ms = 0, opt_ms = 0, iter_ms = 0;
  double recompute_fwd_factor = 0;
  double peak_flops = 0;  // per GPU / rank; 0 = unknown
  std::string peak_source;
  int module_depth = -1, top_modules = 1;
  bool detailed = true;
};

std::string FlopsProfileReport(const FlopsProfileInput& in);

// One training step with every node of the rank's executors timed (flops_profiler.profile_step
// on rank 0), its report written to flops_profiler.output_file (appended) or `out`. The step's
// forward / backward / optimizer times come from the step plan's instruction times (the
// profiler turns wall_clock_breakdown on, as in DeepSpeed). peak_flops 0: unknown.
StatusOr<StepMetrics> ProfiledStep(Trainer* trainer, double peak_flops,
                                   const std::string& peak_source, std::FILE* out);

// The peak MFU is quoted against on the CPU: the best of three 1024^3 GEMMs on the kernels'
// OpenMP threads, after one to warm up; bf16 inputs with fp32 accumulation where the step
// multiplies so. Returns FLOP/s and what was measured ("measured: bf16 GEMM 1024^3 ...").
std::pair<double, std::string> MeasureCpuGemmPeak(bool bf16);

// DeepSpeed's number_to_string: `x` scaled to T/G/M/K/''/m/u with 2 decimals (":g") and the
// unit appended ("336.23 M", "76.67 ms", "81.9 TFLOPS"); params say B for G.
std::string HumanNumber(double x, const std::string& unit, bool params = false);

}  // namespace ds::worker
