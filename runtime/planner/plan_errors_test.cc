// Bad input: settings that cannot work are rejected before any process starts, naming the setting
// and the numbers (issue 4, "Bad input").
#include <catch2/catch.hpp>

#include "runtime/config/job_config.h"
#include "runtime/planner/plan_builder.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::planner {
namespace {

using testing::BaseConfig;
using testing::PresetGraph;

std::string Error(const plan::PlanConfig& c, int world, int dp = -1) {
  static const Graph g = PresetGraph("gpt2-small-test");
  auto plan = MakePlan(g, plan::Topology{world, dp < 0 ? world : dp}, c);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == StatusCode::kInvalidArgument);
  return plan.status().message();
}

TEST_CASE("MakePlan: a world size that does not divide the batch", "[plan]") {
  plan::PlanConfig c = BaseConfig(1);
  c.train_batch_size = 32;
  c.micro_batch_size = 4;
  c.gradient_accumulation_steps = 0;
  const std::string e = Error(c, 3);
  CHECK_THAT(e, Catch::Contains("train_batch_size 32"));
  CHECK_THAT(e, Catch::Contains("train_micro_batch_size_per_gpu 4 x data-parallel size 3"));
  CHECK_THAT(e, Catch::Contains("world size 3"));
  c.gradient_accumulation_steps = 2;  // all three given: 4 x 2 x 3 != 32
  CHECK_THAT(Error(c, 3),
             Catch::Contains("!= train_micro_batch_size_per_gpu 4 x "
                             "gradient_accumulation_steps 2 x data-parallel size 3 = 24"));
  c.gradient_accumulation_steps = 0;
  auto ok = MakePlan(PresetGraph("gpt2-tiny"), plan::Topology{4, 4}, c);  // 32 = 4 x 2 x 4
  REQUIRE(ok.ok());
  CHECK(ok->settings().gradient_accumulation_steps() == 2);
}

TEST_CASE("MakePlan: stage outside 0..3", "[plan]") {
  for (int stage : {-1, 4}) {
    plan::PlanConfig c = BaseConfig(stage);
    CHECK_THAT(Error(c, 2), Catch::Contains("zero_optimization.stage must be 0, 1, 2 or 3, got " +
                                            std::to_string(stage)));
  }
}

TEST_CASE("MakePlan: bucket sizes must be positive", "[plan]") {
  plan::PlanConfig c = BaseConfig(2);
  c.reduce_bucket_size = 0;
  CHECK_THAT(Error(c, 2), Catch::Contains("zero_optimization.reduce_bucket_size must be > 0 "
                                          "elements, got 0"));
  c = BaseConfig(1);
  c.allgather_bucket_size = -5;
  CHECK_THAT(Error(c, 2), Catch::Contains("zero_optimization.allgather_bucket_size must be > 0 "
                                          "elements, got -5"));
}

TEST_CASE("MakePlan: stage 3 needs room for a whole block", "[plan]") {
  plan::PlanConfig c = BaseConfig(3);
  c.param_persistence_threshold = 0;
  c.max_live_parameters = 100000;
  // Block -1 (the 8192 x 256 token and 256 x 256 position embeddings) is the largest.
  const std::string e = Error(c, 4);
  CHECK_THAT(e, Catch::Contains("zero_optimization.stage3_max_live_parameters 100000 is smaller "
                                "than the 2162688 parameter elements block -1 gathers at once"));
  CHECK_THAT(e, Catch::Contains("raise it to at least 2162688"));
  c.max_live_parameters = 2162688;
  REQUIRE(MakePlan(PresetGraph("gpt2-small-test"), plan::Topology{4, 4}, c).ok());
  // Other stages do not gather, so the knob does not matter there.
  c.stage = 2;
  c.max_live_parameters = 1;
  REQUIRE(MakePlan(PresetGraph("gpt2-small-test"), plan::Topology{4, 4}, c).ok());
}

TEST_CASE("MakePlan: negative stage-3 knobs", "[plan]") {
  plan::PlanConfig c = BaseConfig(3);
  c.prefetch_bucket_size = -1;
  CHECK_THAT(Error(c, 2), Catch::Contains("stage3_prefetch_bucket_size must be >= 0"));
  c = BaseConfig(3);
  c.max_reuse_distance = -1;
  CHECK_THAT(Error(c, 2), Catch::Contains("stage3_max_reuse_distance must be >= 0"));
  c = BaseConfig(3);
  c.param_persistence_threshold = -1;
  CHECK_THAT(Error(c, 2), Catch::Contains("stage3_param_persistence_threshold must be >= 0"));
}

// Bad pipeline layouts are refused before start with the numbers; tensor sizes the rules
// cannot split are refused naming the model key.
TEST_CASE("MakePlan: pipeline sizes and unsplittable tensor sizes are refused", "[plan]") {
  static const Graph g = PresetGraph("gpt2-small-test");
  plan::PlanConfig c = BaseConfig(1);
  c.tensor = 2;
  auto topo = plan::TopologyFor(8, c);
  REQUIRE(topo.ok());
  CHECK(topo->dp == 4);
  CHECK(MakePlan(g, *topo, c).ok());
  c.tensor = 8;  // more ranks than heads: refused by the rule, naming the key
  auto heads = MakePlan(g, *plan::TopologyFor(8, c), c);
  REQUIRE_FALSE(heads.ok());
  CHECK(heads.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(heads.status().message(), Catch::Contains("parallel.tensor 8 does not divide model."));
  c.tensor = 3;
  auto bad = plan::TopologyFor(8, c);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("does not divide the world size 8"));
  c.tensor = 1;
  c.pipeline = 2;
  auto plan = MakePlan(g, *plan::TopologyFor(8, c), c);  // a valid grid pp 2 x dp 4 plans
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  CHECK(plan->stages_size() == 2);
  // The stage split and the schedule are checked: more stages than the graph's 4 blocks, a
  // method that leaves a stage empty, too few micro-batches to interleave.
  c.pipeline = 8;
  auto many = MakePlan(g, *plan::TopologyFor(8, c), c);
  REQUIRE_FALSE(many.ok());
  CHECK_THAT(many.status().message(), Catch::Contains("8 stages"));
  CHECK_THAT(many.status().message(), Catch::Contains("has 4 transformer blocks"));
  c.pipeline = 2;
  c.partition_method = "type:conv";
  CHECK_THAT(MakePlan(g, *plan::TopologyFor(8, c), c).status().message(),
             Catch::Contains("leaves stage 0 of 2 without a matching block"));
  c.partition_method = "uniform";
  c.pipe_schedule = plan::PipeScheduleKind::kInterleaved;
  c.virtual_stages = 2;
  c.gradient_accumulation_steps = 1;
  CHECK_THAT(MakePlan(g, *plan::TopologyFor(8, c), c).status().message(),
             Catch::Contains("to be a multiple of 2; the least is 2"));
  c.gradient_accumulation_steps = 2;
  CHECK(MakePlan(g, *plan::TopologyFor(8, c), c).ok());  // the least number plans
  c.pipe_schedule = plan::PipeScheduleKind::k1F1B;
  c.pipeline = 1;
  CHECK_THAT(MakePlan(g, *plan::TopologyFor(8, c), c).status().message(),
             Catch::Contains("pipeline.virtual_stages 2 needs parallel.pipeline > 1"));
  c.virtual_stages = 1;
  c.sequence_parallel = true;
  plan = MakePlan(g, *plan::TopologyFor(2, c), c);
  REQUIRE_FALSE(plan.ok());
  CHECK_THAT(plan.status().message(), Catch::Contains("sequence_parallel"));
}

TEST_CASE("PlanConfigFromJob: an unknown pipeline schedule names the key", "[plan]") {
  auto job = config::ParseJobConfig("train_batch_size: 8\npipeline: {schedule: gpipe}", "job.yaml");
  REQUIRE(job.ok());
  auto c = plan::PlanConfigFromJob(*job);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(),
             Catch::Contains("job.yaml: pipeline.schedule \"gpipe\" must be 1f1b, interleaved "
                             "or zb-h1"));
  job = config::ParseJobConfig("train_batch_size: 8\npipeline: {schedule: zb-h1}", "job.yaml");
  REQUIRE(job.ok());
  c = plan::PlanConfigFromJob(*job);
  REQUIRE(c.ok());
  CHECK(c->pipe_schedule == plan::PipeScheduleKind::kZbH1);
}

TEST_CASE("MakePlan: topology, precision and sequence", "[plan]") {
  plan::PlanConfig c = BaseConfig(0);
  CHECK_THAT(Error(c, 4, 2), Catch::Contains("topology pp 1 x dp 2 x tp 1 != world size 4"));
  CHECK_THAT(Error(c, 0), Catch::Contains("world size must be >= 1, got 0"));
  c.model_dtype = DType::kI32;
  CHECK_THAT(Error(c, 2), Catch::Contains("fp32, bf16 or fp16"));
  c = BaseConfig(0);
  c.seq_len = 4096;  // the model's position table has 256 rows
  CHECK_THAT(Error(c, 2), Catch::Contains("seq_len 4096"));
}

}  // namespace
}  // namespace ds::planner
