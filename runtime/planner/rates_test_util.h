// A host's rates for the cost-model tests (auto_layout_test, zeropp_plan_test): 64 cores (no
// rank shares one), products at `small` GFLOP/s, or `large` for 1024^3 and up (bf16 twice as
// fast when `bf16_double`), the nodes linked at `inter_gbps` GB/s.
#pragma once

#include "runtime/planner/host_rates.h"

namespace ds::planner::testing {

inline HostRates TestRates(double inter_gbps, double small, double large, bool bf16_double) {
  HostRates r;
  r.threads = 1;
  r.cores = 64;
  for (int64_t m : {64, 1024})
    for (int64_t n : {64, 1024})
      for (int64_t k : {64, 1024}) {
        const double g = (m == 1024 && n == 1024 && k == 1024) ? large : small;
        r.gemm_f32.push_back({m, n, k, g});
        r.gemm_bf16.push_back({m, n, k, bf16_double ? 2 * g : g});
      }
  r.stream_gbps = 20;
  r.optimizer_gbps = 20;
  r.intra = {10, 20};
  r.inter = {30, inter_gbps};
  return r;
}

}  // namespace ds::planner::testing
