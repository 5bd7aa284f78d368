// DeepSpeed's elasticity block: one train_batch_size that every world size in a range can run
// (the v0.1 rule of deepspeed/elasticity), so that an elastic job (ds-launch --nnodes MIN:MAX)
// keeps its global batch, and so its loss curve, when it loses a node. ResolveBatchSizes applies
// it: at data-parallel size W the micro-batch is the largest listed one that divides B / W and the
// accumulation steps B / (W x micro); a W the rule does not allow is refused, naming the sizes
// that are.
//
//   elasticity: {enabled: true, max_train_batch_size: 2000, micro_batch_sizes: [2, 4, 6],
//                min_gpus: 1, max_gpus: 10000}
//   -> train_batch_size 1680, valid at 32 sizes (1, 2, 3, ..., 840); at 30: micro 4, gas 14
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::config {

struct ElasticityConfig {
  bool enabled = false;
  int64_t max_train_batch_size = 2000;
  std::vector<int64_t> micro_batch_sizes = {2, 4, 6};
  int64_t min_gpus = 1;
  int64_t max_gpus = 10000;
  bool prefer_larger_batch = true;
  // false (DeepSpeed's default): train_batch_size, train_micro_batch_size_per_gpu and
  // gradient_accumulation_steps beside the block are an error; true: they are ignored.
  bool ignore_non_elastic_batch_info = false;
};

struct ElasticBatch {
  int64_t train_batch_size = 0;
  std::vector<int64_t> valid_sizes;  // data-parallel sizes in [min_gpus, max_gpus], ascending
};

// The rule: for each base (every micro size and their least common multiple), the base times the
// largest highly composite number that keeps it <= max_train_batch_size; of these candidates the
// one valid at the most sizes (ties: the larger, unless prefer_larger_batch is false).
// InvalidArgument when no candidate is valid at any size in range.
StatusOr<ElasticBatch> ComputeElasticBatch(const ElasticityConfig& e);

// The data-parallel sizes where batch `b` runs with one of `micros`: b / m for each micro m that
// divides b, and every divisor of those up to half of it, within [min, max].
std::vector<int64_t> ValidSizes(int64_t b, const std::vector<int64_t>& micros, int64_t min,
                                int64_t max);

}  // namespace ds::config
