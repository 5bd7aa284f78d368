// The flops profiler's report: DeepSpeed's number formatting, its summary labels with our
// numbers, the modules aggregated per depth, and the MFU line.
#include "runtime/worker/flops_profiler.h"

#include <catch2/catch.hpp>

namespace ds::worker {
namespace {

TEST_CASE("HumanNumber scales as DeepSpeed's number_to_string", "[worker][flops]") {
  CHECK(HumanNumber(336.23e6, "", true) == "336.23 M");
  CHECK(HumanNumber(3139.93e9, "MACs") == "3.14 TMACs");
  CHECK(HumanNumber(0.07667, "s") == "76.67 ms");
  CHECK(HumanNumber(81.9e12, "FLOPS") == "81.9 TFLOPS");
  CHECK(HumanNumber(1.5e9, "", true) == "1.5 B");
  CHECK(HumanNumber(12, "") == "12 ");
}

TEST_CASE("The report: summary, aggregated and detailed profiles", "[worker][flops]") {
  FlopsProfileInput in;
  in.step = 3;
  in.world = 2;
  in.dp = 2;
  in.micro_batch = 4;
  in.micro_batches = 2;
  in.params = 3000;
  in.model_name = "tiny";
  // embeddings, block 0 (two ops), head; forward timed over 2 micro-batches each.
  in.nodes = {{"wte", "embedding", -1, 1000, 0, 0, 2, 0, 2},
              {"h.0.fc", "linear", 0, 1500, 4e6, 8e6, 6, 0, 2},
              {"h.0.act", "gelu", 0, 0, 1e6, 1e6, 2, 0, 2},
              {"lm_head", "linear", -1, 500, 3e6, 6e6, 10, 0, 2}};
  in.fwd_ms = 20;  // 10 ms per micro-batch
  in.bwd_ms = 40;
  in.opt_ms = 2;
  in.iter_ms = 64;
  in.peak_flops = 1e10;
  in.peak_source = "test";
  const std::string r = FlopsProfileReport(in);
  INFO(r);
  CHECK(r.find("-------------------------- DeepSpeed Flops Profiler --------------------------") !=
        std::string::npos);
  CHECK(r.find("Profile Summary at step 3:") != std::string::npos);
  CHECK(r.find("world size:                                                             2") !=
        std::string::npos);
  CHECK(r.find("fwd flops per GPU:                                                      8 M") !=
        std::string::npos);
  CHECK(r.find("fwd MACs per GPU:                                                       4 MMACs") !=
        std::string::npos);
  CHECK(r.find("fwd latency:                                                            10 ms") !=
        std::string::npos);
  // iter 32 ms per micro-batch: 3 x 8 MFLOP / 32 ms = 750 MFLOPS = 7.50% of 10 GFLOPS.
  CHECK(r.find("750 MFLOPS") != std::string::npos);
  CHECK(r.find("7.50% of 10 GFLOPS (test)") != std::string::npos);
  CHECK(r.find("depth 1:\n    params      - {'block': '1.5 K'}") != std::string::npos);
  CHECK(r.find("depth 2:\n    params      - {'linear': '2 K'}") != std::string::npos);
  CHECK(
      r.find("  block.0: 1.5 K = 50.00% Params, 2.5 MMACs = 62.50% MACs, 4 ms = 40.00% latency") !=
      std::string::npos);
  CHECK(r.find("    h.0.fc (linear):") != std::string::npos);
  in.detailed = false;
  in.module_depth = 1;
  const std::string shallow = FlopsProfileReport(in);
  CHECK(shallow.find("depth 2:") == std::string::npos);
  CHECK(shallow.find("Detailed Profile") == std::string::npos);
}

}  // namespace
}  // namespace ds::worker
