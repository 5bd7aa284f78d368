// What one host computes and moves per second, measured once (ds-worker --calibrate) and cached:
// the cost model's rate table (step_cost.h). Matrix products are shape-aware (a grid of m, n, k
// in each precision, looked up in log space: small products run far below the 2048^3 rate),
// everything else is memory traffic at the measured stream rate, the optimizer's pass at its
// measured rate, and the links' latency and bandwidth per class (inside a node, between nodes).
//
//   DS_ASSIGN_OR_RETURN(HostRates r, ReadHostRates(path));
//   double gflops = r.GemmGflops(DType::kBF16, 1024, 768, 3072);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/json.h"
#include "runtime/base/status.h"
#include "runtime/core/dtype.h"

namespace ds::planner {

struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  double gflops = 0;
};

// A link class's cost of moving b bytes in one message: latency_us + b / (gbps GB/s).
struct LinkRate {
  double latency_us = 50;
  double gbps = 1;  // GB/s (1e9 bytes per second) one rank sends at
  double Seconds(double bytes) const { return latency_us * 1e-6 + bytes / (gbps * 1e9); }
};

// The slower of two rates for one link class: the larger latency, the smaller bandwidth (a
// collective is no faster than the library on this host, the table's rate, nor than the wire
// measured at launch).
LinkRate Slower(const LinkRate& a, const LinkRate& b);

struct HostRates {
  std::string host;  // where it was measured
  std::string cpu;   // the CPU model and the ISA the kernels used
  int threads = 1;   // compute threads per rank when measured
  int cores = 1;     // the host's cores (ranks beyond them share)
  std::vector<GemmSample> gemm_f32, gemm_bf16;
  double stream_gbps = 10;     // elementwise kernels: bytes read + written per second (GB/s)
  double optimizer_gbps = 10;  // the optimizer step: bytes of states read + written per second
  // ZeRO++'s block quantization (runtime/core/quantize.h), billions of fp32 values a second into
  // int8 and back; tables measured before it have 1.
  double quantize_gvps = 1, dequantize_gvps = 1;
  // The swaps' I/O engine on the job's nvme_path (zero/aio/io_rates.h), GB/s; measured for a job
  // that offloads (ChooseLayout), not cached with the host's table.
  double nvme_read_gbps = 1, nvme_write_gbps = 1;
  LinkRate intra;  // ranks of one node
  LinkRate inter;  // ranks of different nodes

  // GFLOP/s of an m x n x k product in `dtype` (kBF16, or fp32 for anything else), from the
  // nearest samples in log space (inverse-distance weighted over the closest four).
  double GemmGflops(DType dtype, int64_t m, int64_t n, int64_t k) const;
};

Json HostRatesToJson(const HostRates& r);
StatusOr<HostRates> HostRatesFromJson(const Json& j, const std::string& source);
StatusOr<HostRates> ReadHostRates(const std::string& path);

// Where the cached table of this host lives: RuntimeHome()/host-rates-<threads>t.json
// (runtime/base/runtime_home.h); ds-worker calibrate writes it.
std::string HostRatesPath(int threads);

}  // namespace ds::planner
