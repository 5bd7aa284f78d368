// comms_logger: DeepSpeed's bandwidth formulas, the op each plan instruction is, and the summary.
#include "runtime/worker/comms_logger.h"

#include <catch2/catch.hpp>

namespace ds::worker {
namespace {

TEST_CASE("CommBandwidth follows deepspeed.comm's formulas", "[worker][comms]") {
  // 1 MB per rank in 1 ms over 4 ranks.
  const double mb = 1e6;
  Bandwidth ar = CommBandwidth("all_reduce", mb, 4, 1);
  CHECK(ar.algbw == Approx(2 * mb / 1e-3 * 8 / 1e9));
  CHECK(ar.busbw == Approx(mb / 1e-3 * 2 * 3 / 4 * 8 / 1e9));
  Bandwidth ag = CommBandwidth("all_gather_into_tensor", mb, 4, 1);
  CHECK(ag.algbw == Approx(4 * mb / 1e-3 * 8 / 1e9));
  CHECK(ag.busbw == Approx(ag.algbw * 3 / 4));
  Bandwidth p2p = CommBandwidth("send", mb, 2, 1);
  CHECK(p2p.algbw == p2p.busbw);
  CHECK(CommBandwidth("all_reduce", mb, 4, 0).algbw == 0);
}

TEST_CASE("LoggedOp names the plan's collectives and their per-rank bytes", "[worker][comms]") {
  proto::Instruction in;
  in.set_kind(proto::Instruction::REDUCE_SCATTER);
  in.mutable_collective()->set_count(4000);
  in.mutable_collective()->set_dtype(proto::DT_BF16);
  CommOp op = LoggedOp(in, 4);
  CHECK(op.name == "reduce_scatter_tensor");
  CHECK(op.bytes == 4000 * 2 / 4);
  in.set_kind(proto::Instruction::ACT_ALL_REDUCE);
  in.mutable_collective()->set_dtype(proto::DT_F32);
  CHECK(LoggedOp(in, 2).name == "all_reduce");
  CHECK(LoggedOp(in, 2).bytes == 16000);
  in.set_kind(proto::Instruction::SEND);
  CHECK(LoggedOp(in, 2).name.empty());
  in.set_kind(proto::Instruction::LOSS_REDUCE);
  in.mutable_collective()->set_placement(proto::LOCAL);
  CHECK(LoggedOp(in, 1).name.empty());
}

TEST_CASE("The summary: per op and size, count, latencies and bandwidths", "[worker][comms]") {
  CommsLogger log({});
  for (int i = 0; i < 10; ++i)
    log.Record("all_reduce", "ALL_REDUCE", 4096, 2, i == 9 ? 100 : 1, stdout);
  log.Record("all_gather_into_tensor", "GATHER_PARAMS", 1 << 20, 2, 2, stdout);
  const std::string s = log.Summary();
  INFO(s);
  CHECK(s.find("Comm. Op            Message Size        Count               Total Latency(ms)") !=
        std::string::npos);
  CHECK(s.find("all_reduce\n                    4.00 KB             10                  109.00"
               "              1.00") != std::string::npos);  // trimmed mean drops the outlier
  CHECK(s.find("all_gather_into_tensor\n                    1.00 MB             1 ") !=
        std::string::npos);
  CommsLogger only({false, false, false, {"all_gather_into_tensor"}});
  CHECK_FALSE(only.Wants("all_reduce"));
  CHECK(only.Wants("all_gather_into_tensor"));
}

}  // namespace
}  // namespace ds::worker
