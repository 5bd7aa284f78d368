#include "runtime/planner/plan_command.h"

#include <google/protobuf/util/json_util.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace ds::planner {
namespace {

constexpr const char* kJob = "runtime/planner/testdata/gpt2_small_bf16.yaml";

struct Result {
  int code;
  std::string out, err;
};

Result Run(std::vector<std::string> args) {
  args.insert(args.begin(), "ds-plan");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  int code = RunPlanCommand(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST_CASE("ds-plan: prints memory and traffic per rank for the configured stage", "[plan]") {
  Result r = Run({kJob, "--world", "4"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("world 4 (dp 4, tp 1, pp 1)"));
  CHECK_THAT(r.out, Catch::Contains("ZeRO stage 2, BF16"));
  CHECK_THAT(r.out, Catch::Contains("micro 4 x gas 1 x dp 4 = 16 sequences of 256 tokens"));
  for (const char* row :
       {"parameters", "gradients", "optimizer state", "model states", "activations (peak)",
        "peak total", "REDUCE_SCATTER", "ALL_GATHER", "GRAD_NORM_REDUCE", "2P + 18P/G"})
    CHECK_THAT(r.out, Catch::Contains(row));
  // Generation: 4 layers x k, v x 4 heads x 64 x 4 bytes = 8 KiB per token.
  CHECK_THAT(r.out, Catch::Contains("generation (KV cache, fp32): 8.0 KiB per token and sequence "
                                    "(4 layers x k, v x 4 kv heads x 64)"));
  r = Run({kJob, "--world", "4", "--host-memory", "2", "--ranks-per-node", "4"});
  CHECK_THAT(r.out, Catch::Contains("in 0.50 GiB: "));
  CHECK_THAT(r.out, !Catch::Contains("hybrid engine"));  // stage 2: the model is whole
  // ZeRO-3: the hybrid engine's two phases (RLHF's actor).
  r = Run({kJob, "--world", "4", "--stage", "3"});
  CHECK_THAT(r.out, Catch::Contains("hybrid engine (ZeRO-3): the training step peaks at "));
  CHECK_THAT(r.out, Catch::Contains("a rollout first gathers the whole model (20.30 MiB in fp32)"));
}

// Generation under tensor parallelism: the inference plan of a tp rank, its half of the heads
// cached, the stream's all-reduces (the embedding's and 2 per layer, 256 floats a token each)
// and the logits' gather (4096 of 8192 a token).
TEST_CASE("ds-plan: the generation section of a tensor-parallel job", "[plan][generate]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string job = std::string(tmp ? tmp : "/tmp") + "/plan_tp2.yaml";
  {
    std::ifstream in(kJob);
    std::ofstream out(job);
    out << in.rdbuf() << "\nparallel: {tensor: 2}\n";
  }
  const Result r = Run({job, "--world", "4"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("generation (KV cache, fp32), per tp rank: 4.0 KiB per token "
                                    "and sequence (4 layers x k, v x 2 kv heads x 64)"));
  CHECK_THAT(r.out, Catch::Contains("each tp rank (tp 2) runs 20 instructions per step: 10 "
                                    "forward ranges, 9 all-reduces (9.0 KiB per token), 1 "
                                    "all-gather of its 4096 logits (16.0 KiB per token)"));
}

TEST_CASE("ds-plan: Ulysses with heads sp does not divide", "[plan][ulysses]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string job = std::string(tmp ? tmp : "/tmp") + "/plan_sp4.yaml";
  {
    std::ifstream in(kJob);
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    yaml.replace(yaml.find("n_embd: 256"), 11, "n_embd: 192");
    yaml.replace(yaml.find("n_head: 4"), 9, "n_head: 6");
    std::ofstream(job) << yaml << "\nparallel: {ulysses: 4}\n";
  }
  const Result r = Run({job, "--world", "4"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("the ranks' query heads 0-1 | 2-3 | 4 | 5 of 6, kv heads "
                                    "0-1 | 2-3 | 4 | 5 of 6 (uneven"));
  // Every part is as wide as 2 heads' q, k and v: 4/3 of the even split's 4Nh/P.
  CHECK_THAT(r.out, Catch::Contains("1024.0 KiB exchanged per rank, 768.0 KiB sent; 4Nh/P: "
                                    "768.0 KiB"));
}

// hybrid_engine.inference_tp_size 2 at ZeRO-3: each rank's tensor-parallel slice (half the heads,
// MLP and vocabulary rows: 10.29 of the whole 20.30 MiB), cut while one block's units are
// gathered at a time (the 8 MiB embedding is the largest).
TEST_CASE("ds-plan: the hybrid engine's tensor-parallel rollouts", "[plan][rlhf]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string job = std::string(tmp ? tmp : "/tmp") + "/plan_he.yaml";
  {
    std::ifstream in(kJob);
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    yaml.replace(yaml.find("stage: 2"), 8, "stage: 3");
    std::ofstream(job) << yaml
                       << "\nhybrid_engine: {inference_tp_size: 2, tp_gather_partition_size: 1}\n";
  }
  const Result r = Run({job, "--world", "4"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("a rollout first gathers the whole model (20.30 MiB in fp32)"));
  CHECK_THAT(r.out, Catch::Contains("with hybrid_engine.inference_tp_size 2 the rollouts run from "
                                    "tensor-parallel slices instead: 10.29 MiB per rank in fp32, "
                                    "cut while at most 8.00 MiB of units is gathered "
                                    "(tp_gather_partition_size 1 blocks)"));
}

// PR-MoE under expert parallelism: the dispatch's all-to-alls (forward and backward) run while
// the dense branch computes, unless parallel.moe_shared_expert_overlap is false.
TEST_CASE("ds-plan: PR-MoE's overlapped all-to-alls", "[plan][moe]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string job = std::string(tmp ? tmp : "/tmp") + "/plan_prmoe.yaml";
  for (const char* overlap : {"true", "false"}) {
    std::ofstream(job) << "train_micro_batch_size_per_gpu: 4\n"
                          "optimizer: {type: AdamW, params: {lr: 1.0e-4}}\n"
                          "zero_optimization: {stage: 2}\n"
                          "model: {family: gpt2, n_layer: 4, n_embd: 64, n_head: 4, vocab_size: "
                          "512, max_seq_len: 64, moe: {num_experts: 4, top_k: 1, expert_interval: "
                          "2, use_residual: true}}\n"
                          "data: {seq_len: 64}\n"
                          "parallel: {expert: 2, moe_shared_expert_overlap: "
                       << overlap << "}\n";
    const Result r = Run({job, "--world", "2"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("all-to-all per step on rank 0: 8 calls"));
    const bool says =
        r.out.find("4 of them run while PR-MoE's dense branch computes") != std::string::npos;
    CHECK(says == (std::string(overlap) == "true"));
  }
}

TEST_CASE("ds-plan: --json is a PlanSummary", "[plan]") {
  Result r = Run({kJob, "--world", "2", "--stage", "3", "--json"});
  REQUIRE(r.code == 0);
  proto::PlanSummary s;
  REQUIRE(google::protobuf::util::JsonStringToMessage(r.out, &s).ok());
  CHECK(s.topology().world() == 2);
  CHECK(s.settings().zero_stage() == 3);
  REQUIRE(s.ranks_size() == 2);
  CHECK(s.ranks(1).rank() == 1);
  CHECK(s.ranks(0).gather_peak_bytes() > 0);
  CHECK(s.ranks(0).peak_bytes() >= s.ranks(0).model_state_bytes());
  CHECK(s.deepspeed_estimate_bytes() > 0);
  CHECK(s.hash().size() == 16);
}

TEST_CASE("ds-plan: bad input is an error with the reason", "[plan]") {
  Result r = Run({kJob, "--world", "4", "--stage", "3", "--dump"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("kind: GATHER_PARAMS"));
  r = Run({"runtime/planner/testdata/missing.yaml", "--world", "2"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::StartsWith("ds-plan: "));
  r = Run({kJob});
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("--world"));
  r = Run({kJob, "--world", "4", "--stage", "5"});
  CHECK(r.code != 0);
}

TEST_CASE("ds-plan: a world size that does not divide the batch", "[plan]") {
  Result r = Run({"runtime/planner/testdata/batch32.yaml", "--world", "3"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("train_batch_size 32"));
  CHECK_THAT(r.err, Catch::Contains("data-parallel size 3"));
  CHECK(Run({"runtime/planner/testdata/batch32.yaml", "--world", "4"}).code == 0);
}

}  // namespace
}  // namespace ds::planner

namespace ds::planner {
namespace {

// The fit check: the same job fits a big node, does not fit a small one, and the advice names
// an offload whose own plan fits (checked by planning the suggested change).
TEST_CASE("ds-plan: says whether the job fits the host memory and what offload would", "[plan]") {
  Result big = Run({kJob, "--world", "1", "--host-memory", "64"});
  REQUIRE(big.code == 0);
  CHECK_THAT(big.out, Catch::Contains("fit: the planned peak of"));
  CHECK_THAT(big.out, Catch::Contains("64.00 GiB of host memory per rank"));
  // 0.15 GiB per rank: the states (about 85 MB) and bf16 activations (about 57 MB: the job pins
  // device.cpu_bf16_matmul, so on every host) of one rank do not fit; the master and Adam
  // moments on NVMe make room.
  Result small = Run({kJob, "--world", "1", "--host-memory", "0.3", "--ranks-per-node", "2"});
  REQUIRE(small.code == 0);
  CHECK_THAT(small.out, Catch::Contains("does not fit: the planned peak of"));
  CHECK_THAT(small.out, Catch::Contains("0.15 GiB of host memory per rank"));
  CHECK_THAT(small.out, Catch::Contains("it fits with zero_optimization {"));
  CHECK_THAT(small.out, Catch::Contains("offload_optimizer: {device: nvme"));
  CHECK_THAT(small.out, Catch::Contains("per rank on NVMe"));
  Result none = Run({kJob, "--world", "1", "--host-memory", "0.001"});
  REQUIRE(none.code == 0);
  CHECK_THAT(none.out, Catch::Contains("no offload makes it fit"));
}

}  // namespace
}  // namespace ds::planner

namespace ds::planner {
namespace {

TEST_CASE("ds-plan: NVMe offload shows the swap buffers, the swap files and DeepSpeed's row",
          "[plan]") {
  Result r = Run({"runtime/planner/testdata/gpt2_small_nvme.yaml", "--world", "2"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("offload_optimizer nvme: sub_group_size 1000000 elements"));
  CHECK_THAT(r.out, Catch::Contains("swap buffers (peak)"));
  CHECK_THAT(r.out, Catch::Contains("on NVMe (swap files)"));
  CHECK_THAT(r.out, Catch::Contains("16-bit parameters: not in memory"));
  CHECK_THAT(r.out, Catch::Contains("DeepSpeed's estimator has no NVMe row"));
  CHECK_THAT(r.out, Catch::Contains("4L device, 18P x 1.5 host"));
  // fp32: the parameters are the master, swapped with the states in one file.
  Result fp32 = Run({"runtime/planner/testdata/gpt2_small_nvme_fp32.yaml", "--world", "2"});
  INFO(fp32.err);
  REQUIRE(fp32.code == 0);
  CHECK_THAT(fp32.out,
             Catch::Contains("fp32 parameters (the master) and optimizer state: not in memory"));
}

}  // namespace
}  // namespace ds::planner

namespace ds::planner {
namespace {

// gpt2_small_bf16.yaml: s 256, b 4, h 256, a 4, so sbh = 262144 and 5as/h = 20.
TEST_CASE("ds-plan: one layer's activations beside Korthikanti et al.'s formulas", "[plan]") {
  Result r = Run({kJob, "--world", "1"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("activations of one transformer layer: "));
  CHECK_THAT(r.out, Catch::Contains("no parallelism                       sbh(34+5as/h)"));
  CHECK_THAT(r.out, Catch::Contains("13.50 MiB"));  // sbh (34 + 20)
  CHECK_THAT(r.out, Catch::Contains("TP 2                                 sbh(10+24/t+5as/(ht))"));
  CHECK_THAT(r.out, Catch::Contains(" 8.00 MiB"));  // sbh (10 + 12 + 10)
  CHECK_THAT(r.out, Catch::Contains(" 6.75 MiB"));  // TP 2 + SP: sbh (17 + 10)
  CHECK_THAT(r.out, Catch::Contains(" 4.25 MiB"));  // selective: 34 sbh / 2
  CHECK_THAT(r.out, Catch::Contains(" 0.50 MiB"));  // full: 2 sbh
}

}  // namespace
}  // namespace ds::planner
