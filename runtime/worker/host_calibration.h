// Measures this host's rates for the planner's cost model (runtime/planner/host_rates.h):
// matrix products over a grid of shapes in fp32 and in the bf16 path the worker takes here
// (native bf16 products, or fp32 on widened values), each from cold caches as a training step
// meets them; the stream rate of an elementwise pass; the optimizer's fused Adam pass; and a
// Gloo all-reduce between two ranks over loopback TCP (latency and bandwidth; on one host the
// same figures serve both link classes until the launcher probes real links). `ds-worker
// --calibrate [FILE]` runs it (a few seconds) and writes the table where the planner looks.
#pragma once

#include <functional>
#include <string>

#include "runtime/base/status.h"
#include "runtime/planner/host_rates.h"

namespace ds::worker {

// `threads`: compute threads per rank (the OpenMP pool the kernels use). `progress` gets one
// line per part measured.
StatusOr<planner::HostRates> CalibrateHost(int threads,
                                           const std::function<void(const std::string&)>& progress);

// `ds-worker calibrate [--threads N] [--out FILE]`: measures and writes the table (default
// planner::HostRatesPath(N)); returns the exit code.
int CalibrateCommand(int argc, char** argv);

}  // namespace ds::worker
