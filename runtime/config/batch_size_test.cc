// DeepSpeed's batch triad, table-driven (deepspeed.md 2.1).
#include <string>

#include <catch2/catch.hpp>

#include "runtime/config/job_config.h"

namespace ds::config {
namespace {

struct Row {
  int64_t train, micro, gas;  // given (0 = absent)
  int dp;
  int64_t want_train, want_micro, want_gas;  // 0 = expect an error
  const char* error;                         // substring of the error
};

TEST_CASE("ResolveBatchSizes: the triad table", "[config]") {
  const Row rows[] = {
      // all three: only checked
      {32, 4, 2, 4, 32, 4, 2, ""},
      {32, 4, 2, 2, 0, 0, 0,
       "train_batch_size 32 != train_micro_batch_size_per_gpu 4 x "
       "gradient_accumulation_steps 2 x data-parallel size 2 = 16"},
      // train + micro -> gas
      {32, 4, 0, 2, 32, 4, 4, ""},
      {32, 4, 0, 3, 0, 0, 0,
       "train_batch_size 32 is not a positive multiple of "
       "train_micro_batch_size_per_gpu 4 x data-parallel size 3 = 12"},
      {4, 8, 0, 1, 0, 0, 0, "is not a positive multiple"},
      // train + gas -> micro
      {32, 0, 4, 2, 32, 4, 4, ""},
      {30, 0, 4, 2, 0, 0, 0, "gradient_accumulation_steps 4 x data-parallel size 2 = 8"},
      // micro + gas -> train
      {0, 4, 3, 2, 24, 4, 3, ""},
      // train only -> gas 1
      {16, 0, 0, 4, 16, 4, 1, ""},
      {10, 0, 0, 4, 0, 0, 0,
       "train_batch_size 10 is not a positive multiple of data-parallel "
       "size 4 = 4"},
      // micro only -> gas 1
      {0, 6, 0, 2, 12, 6, 1, ""},
      // gas only, nothing
      {0, 0, 8, 2, 0, 0, 0, "gradient_accumulation_steps 8 alone does not fix the batch size"},
      {0, 0, 0, 2, 0, 0, 0, "give train_batch_size or train_micro_batch_size_per_gpu"},
      // bad dp
      {8, 0, 0, 0, 0, 0, 0, "data-parallel size must be >= 1, got 0"},
  };
  for (const Row& row : rows) {
    JobConfig c;
    c.source = "job.yaml";
    c.train_batch_size = row.train;
    c.train_micro_batch_size_per_gpu = row.micro;
    c.gradient_accumulation_steps = row.gas;
    INFO("train " << row.train << " micro " << row.micro << " gas " << row.gas << " dp " << row.dp);
    Status s = ResolveBatchSizes(&c, row.dp);
    if (row.want_train > 0) {
      REQUIRE(s.ok());
      CHECK(c.train_batch_size == row.want_train);
      CHECK(c.train_micro_batch_size_per_gpu == row.want_micro);
      CHECK(c.gradient_accumulation_steps == row.want_gas);
    } else {
      REQUIRE_FALSE(s.ok());
      CHECK(s.code() == StatusCode::kInvalidArgument);
      INFO(s.message());
      CHECK(s.message().rfind("job.yaml: ", 0) == 0);
      CHECK(s.message().find(row.error) != std::string::npos);
      // Every error states the rule.
      CHECK(s.message().find("train_batch_size = train_micro_batch_size_per_gpu x "
                             "gradient_accumulation_steps x data-parallel size") !=
            std::string::npos);
    }
  }
}

TEST_CASE("ResolveBatchSizes: from a parsed config", "[config]") {
  StatusOr<JobConfig> c =
      ParseJobConfig("train_batch_size: 64\ngradient_accumulation_steps: 4\n", "job.yaml");
  REQUIRE(c.ok());
  REQUIRE(ResolveBatchSizes(&*c, 4).ok());
  CHECK(c->train_micro_batch_size_per_gpu == 4);
  // Resolving again with the same world size is a no-op; another size is inconsistent.
  CHECK(ResolveBatchSizes(&*c, 4).ok());
  CHECK_FALSE(ResolveBatchSizes(&*c, 2).ok());
}

}  // namespace
}  // namespace ds::config
