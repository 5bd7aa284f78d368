// DeepSpeed's batch-size triad (deepspeed.md 2.1):
//   train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp
// Any two given derive the third; train only or micro only imply gas = 1. Unlike DeepSpeed,
// which derives with integer division and then asserts, we report the division that does
// not come out even, with the numbers.

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"

namespace ds::config {
namespace {

constexpr const char* kRule =
    "train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
    "data-parallel size";

std::string Str(int64_t v) { return std::to_string(v); }

Status Error(const JobConfig& c, const std::string& what) {
  const std::string prefix = c.source.empty() ? "" : c.source + ": ";
  return InvalidArgumentError(prefix + what + " (rule: " + kRule + ")");
}

// `numerator` must divide evenly by `denominator` into something >= 1.
Status CheckDivides(const JobConfig& c, int64_t numerator, const std::string& numerator_text,
                    int64_t denominator, const std::string& denominator_text) {
  if (numerator % denominator == 0 && numerator / denominator >= 1) return OkStatus();
  return Error(c, numerator_text + " is not a positive multiple of " + denominator_text + " = " +
                      Str(denominator));
}

}  // namespace

namespace {

Status ResolveTriad(JobConfig* c, int dp_world_size);

}  // namespace

// elasticity: the batch every size in range runs, this size's micro-batch and accumulation.
Status ResolveElastic(JobConfig* c, int dp) {
  auto elastic = ComputeElasticBatch(c->elasticity);
  if (!elastic.ok()) return elastic.status().WithPrefix(c->source);
  const std::vector<int64_t>& sizes = elastic->valid_sizes;
  if (!std::binary_search(sizes.begin(), sizes.end(), int64_t{dp})) {
    std::string list;
    for (size_t i = 0; i < sizes.size() && i < 16; ++i) list += (i ? ", " : "") + Str(sizes[i]);
    if (sizes.size() > 16) list += ", ... (" + Str(static_cast<int64_t>(sizes.size())) + ")";
    return InvalidArgumentError(c->source + ": elasticity: train_batch_size " +
                                Str(elastic->train_batch_size) + " does not run at data-parallel " +
                                "size " + Str(dp) + "; it runs at " + list);
  }
  const int64_t b = elastic->train_batch_size;
  int64_t micro = 0;
  for (int64_t m : c->elasticity.micro_batch_sizes)
    if ((b / dp) % m == 0) micro = std::max(micro, m);
  c->train_batch_size = b;
  c->train_micro_batch_size_per_gpu = micro;
  c->gradient_accumulation_steps = b / (dp * micro);
  DS_LOG_INFO("config",
              "{}: elasticity: train_batch_size {} (valid at {} data-parallel sizes), at {}: "
              "micro {} x accumulation {}",
              c->source, b, sizes.size(), dp, micro, c->gradient_accumulation_steps);
  return OkStatus();
}

Status ResolveBatchSizes(JobConfig* c, int dp_world_size) {
  if (c->elasticity.enabled && dp_world_size >= 1) return ResolveElastic(c, dp_world_size);
  DS_RETURN_IF_ERROR(ResolveTriad(c, dp_world_size));
  for (const std::string& key : c->auto_keys)  // say what "auto" became
    DS_LOG_INFO("config",
                "{}: {} \"auto\" is {} (train_batch_size {} = micro {} x accumulation {} x "
                "data-parallel {})",
                c->source, key,
                key == "train_batch_size"                 ? c->train_batch_size
                : key == "train_micro_batch_size_per_gpu" ? c->train_micro_batch_size_per_gpu
                                                          : c->gradient_accumulation_steps,
                c->train_batch_size, c->train_micro_batch_size_per_gpu,
                c->gradient_accumulation_steps, dp_world_size);
  return OkStatus();
}

namespace {

Status ResolveTriad(JobConfig* c, int dp_world_size) {
  if (dp_world_size < 1) {
    return Error(*c, "data-parallel size must be >= 1, got " + Str(dp_world_size));
  }
  const int64_t dp = dp_world_size;
  int64_t& train = c->train_batch_size;
  int64_t& micro = c->train_micro_batch_size_per_gpu;
  int64_t& gas = c->gradient_accumulation_steps;
  if (train < 0 || micro < 0 || gas < 0) return Error(*c, "batch sizes must be positive");
  const std::string train_text = "train_batch_size " + Str(train);
  const std::string dp_text = "data-parallel size " + Str(dp);

  if (train > 0 && micro > 0 && gas > 0) {
    if (train == micro * gas * dp) return OkStatus();
    return Error(*c, train_text + " != train_micro_batch_size_per_gpu " + Str(micro) +
                         " x gradient_accumulation_steps " + Str(gas) + " x " + dp_text + " = " +
                         Str(micro * gas * dp));
  }
  if (train > 0 && micro > 0) {
    DS_RETURN_IF_ERROR(
        CheckDivides(*c, train, train_text, micro * dp,
                     "train_micro_batch_size_per_gpu " + Str(micro) + " x " + dp_text));
    gas = train / (micro * dp);
    return OkStatus();
  }
  if (train > 0 && gas > 0) {
    DS_RETURN_IF_ERROR(CheckDivides(*c, train, train_text, gas * dp,
                                    "gradient_accumulation_steps " + Str(gas) + " x " + dp_text));
    micro = train / (gas * dp);
    return OkStatus();
  }
  if (micro > 0 && gas > 0) {
    train = micro * gas * dp;
    return OkStatus();
  }
  if (train > 0) {
    DS_RETURN_IF_ERROR(CheckDivides(*c, train, train_text, dp, dp_text));
    gas = 1;
    micro = train / dp;
    return OkStatus();
  }
  if (micro > 0) {
    gas = 1;
    train = micro * dp;
    return OkStatus();
  }
  if (gas > 0) {
    return Error(*c, "gradient_accumulation_steps " + Str(gas) +
                         " alone does not fix the batch size; give train_batch_size or "
                         "train_micro_batch_size_per_gpu too");
  }
  return Error(*c, "give train_batch_size or train_micro_batch_size_per_gpu (or both)");
}

}  // namespace

}  // namespace ds::config
