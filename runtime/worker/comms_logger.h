// CommsLogger: DeepSpeed's comms_logger for the step plan's collectives. With the block enabled
// every collective instruction is completed right after it is issued and timed (as DeepSpeed's
// timed_op synchronizes after each op, so the step loses its overlap while logging), recorded
// under DeepSpeed's op name with its message size (the per-rank part for all-gather and
// reduce-scatter, as DeepSpeed counts it) and the group's size, and summarised at the end in
// DeepSpeed's table: per op and message size the count, total and average latency (trimmed
// mean, 10% off each end) and the algorithm and bus bandwidths (deepspeed.comm's formulas).
// verbose prints one line per op as it completes; prof_all false limits it to prof_ops;
// debug adds the plan's instruction kind. Pipelines' point-to-point SEND / RECV are not logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace ds::worker {

struct CommsLoggerOptions {
  bool verbose = false;
  bool prof_all = true;
  bool debug = false;
  std::vector<std::string> prof_ops;  // DeepSpeed names ("all_reduce", ...)
};

// DeepSpeed's bandwidths in Gbps for `bytes` per rank over a group of `n` in `ms`.
struct Bandwidth {
  double algbw = 0, busbw = 0;
};
Bandwidth CommBandwidth(const std::string& op, double bytes, int n, double ms);

class CommsLogger {
 public:
  explicit CommsLogger(CommsLoggerOptions options) : opt_(std::move(options)) {}
  bool Wants(const std::string& op) const;
  // `kind`: the plan's instruction kind (debug); verbose lines go to `out`.
  void Record(const std::string& op, const std::string& kind, int64_t bytes, int n, double ms,
              std::FILE* out);
  std::string Summary() const;
  bool empty() const { return ops_.empty(); }

 private:
  struct Sizes {
    std::map<int64_t, std::vector<double>> ms;  // per message size: each op's latency
    std::map<int64_t, int> group;               // per message size: the group's size
  };
  CommsLoggerOptions opt_;
  std::map<std::string, Sizes> ops_;
};

// The collective an instruction runs, as DeepSpeed names it ("all_reduce",
// "reduce_scatter_tensor", "all_gather_into_tensor"), and its message bytes per rank for a group
// of `n`; name "" for what is not logged (compute, SEND / RECV, LOCAL placements).
struct CommOp {
  std::string name;
  int64_t bytes = 0;
};
CommOp LoggedOp(const proto::Instruction& in, int n);

// 1024-based sizes as DeepSpeed prints them: "4.0 B", "678.86 MB".
std::string CommSize(double bytes);

}  // namespace ds::worker
