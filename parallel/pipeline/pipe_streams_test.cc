// The pipeline's planned streams without processes: for p 2..8, m 1..16, 1f1b and interleaved
// (v 2..4), each rank runs one forward and one backward of every micro-batch on every chunk,
// every SEND meets a RECV of the same size on its link, each chunk's slots are its most
// micro-batches in flight (within the schedule's bound), and the blocking simulation (each link's
// queue in order, a SEND done when its RECV is at the peer's head) ends; a bad order is caught as a
// deadlock.
#include <catch2/catch.hpp>
#include <map>

#include "parallel/pipeline/pipe_streams.h"

namespace ds::parallel {
namespace {

using Ins = proto::Instruction;

PipeStreams Streams(const PipeOrders& o) {
  const int stages = o.stages * o.chunks;
  std::vector<PipeBoundary> b(stages - 1, PipeBoundary{{3}, {0}, {7}, {96}});
  auto s = PipelineStreams(o, b, std::vector<int>(stages, 12));
  INFO((s.ok() ? "" : s.status().ToString()));
  REQUIRE(s.ok());
  return std::move(s).value();
}

void CheckStreams(const PipeOrders& o) {
  const PipeStreams s = Streams(o);
  const int p = o.stages, v = o.chunks, m = o.micro_batches;
  std::map<std::string, int> sends, recvs;
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    std::map<std::pair<int, int>, int> forwards, backwards, weights;  // (chunk, micro)
    const std::vector<Ins>& list = s.ranks[r];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Ins& in = list[i];
      for (int w : in.wait_for()) CHECK(w < i);
      CHECK(in.slot() < s.slots[r][in.chunk()]);
      if (in.kind() == Ins::FORWARD) ++forwards[{in.chunk(), in.micro_batch()}];
      if (in.kind() == Ins::BACKWARD || in.kind() == Ins::BACKWARD_INPUT)
        ++backwards[{in.chunk(), in.micro_batch()}];
      if (in.kind() == Ins::BACKWARD_WEIGHT) ++weights[{in.chunk(), in.micro_batch()}];
      if (in.kind() == Ins::FORWARD || in.kind() == Ins::BACKWARD ||
          in.kind() == Ins::BACKWARD_INPUT || in.kind() == Ins::BACKWARD_WEIGHT)
        CHECK(in.node_end() == 12);
      if (in.kind() == Ins::SEND) ++sends[in.collective().group()];
      if (in.kind() == Ins::RECV) ++recvs[in.collective().group()];
    }
    CHECK(forwards.size() == static_cast<size_t>(m * v));
    CHECK(backwards.size() == static_cast<size_t>(m * v));
    for (const auto& [key, n] : forwards) CHECK(n == 1);
    for (const auto& [key, n] : backwards) CHECK(n == 1);
    // zb-h1: each backward's weight half once, after its input half.
    CHECK(weights.size() == (o.kind == plan::PipeScheduleKind::kZbH1 ? backwards.size() : 0u));
    for (const auto& [key, n] : weights) CHECK(n == 1);
    // Each chunk's slots are its most micro-batches in flight at once (a slot is reused as
    // soon as its backward ran); all chunks together stay within the schedule's bound.
    std::vector<int> now(v, 0), most(v, 0);
    int total = 0, most_total = 0;
    for (const PipeOp& op : o.ops[r]) {
      if (op.kind == PipeOp::kBackwardInput) continue;  // the slot is kept until the weights
      const int d = op.kind == PipeOp::kForward ? 1 : -1;
      now[op.chunk] += d;
      total += d;
      most[op.chunk] = std::max(most[op.chunk], now[op.chunk]);
      most_total = std::max(most_total, total);
    }
    CHECK(s.slots[r] == most);
    const int bound = o.kind == plan::PipeScheduleKind::k1F1B ? std::min(p - r, m)
                      : o.kind == plan::PipeScheduleKind::kZbH1
                          ? std::min(p, m)
                          : std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v);
    CHECK(most_total <= bound);
  }
  CHECK(sends == recvs);
  // Activations forward and gradients back over every boundary, once per micro-batch.
  int messages = 0;
  for (const auto& [link, n] : sends) messages += n;
  CHECK(messages == 2 * (p * v - 1) * m);
  const StreamSimulation sim = SimulateStreams(s);
  INFO(sim.stuck);
  CHECK(sim.finished);
}

TEST_CASE("PipelineStreams: every schedule's streams are complete and deadlock-free",
          "[plan][pipe]") {
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      INFO("p " << p << ", m " << m);
      auto one = BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, p, m);
      REQUIRE(one.ok());
      CheckStreams(*one);
      auto zb = BuildPipelineSchedule(plan::PipeScheduleKind::kZbH1, p, m);
      REQUIRE(zb.ok());
      INFO("zb-h1");
      CheckStreams(*zb);
      for (int v = 2; v <= 4 && m % p == 0; ++v) {
        INFO("interleaved, v " << v);
        auto inter = BuildPipelineSchedule(plan::PipeScheduleKind::kInterleaved, p, m, v);
        REQUIRE(inter.ok());
        CheckStreams(*inter);
      }
    }
}

TEST_CASE("PipelineStreams: the links, slots and a deadlock", "[plan][pipe]") {
  auto o = BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, 2, 4);
  REQUIRE(o.ok());
  const PipeStreams s = Streams(*o);
  // Rank 0 holds 2 micro-batches in flight (p - 0), rank 1 one.
  CHECK(s.slots[0] == std::vector<int>{2});
  CHECK(s.slots[1] == std::vector<int>{1});
  // The first instruction of rank r of `kind` for `micro` (and, for SEND / RECV, `tensor`).
  auto find = [&s](int r, Ins::Kind kind, int micro, int tensor = -1) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Ins& in = s.ranks[r][i];
      if (in.kind() == kind && in.micro_batch() == micro &&
          (tensor < 0 || in.activation().tensor() == tensor))
        return i;
    }
    return -1;
  };
  // RECVs are posted early: rank 0's for micro-batch 0's gradient before its forward even runs
  // (the slot is free), rank 1's for micro-batch 1's activations right after the backward of
  // micro-batch 0 frees its one slot.
  CHECK(find(0, Ins::RECV, 0, 7) < find(0, Ins::FORWARD, 0));
  CHECK(find(1, Ins::RECV, 1, 0) == find(1, Ins::BACKWARD, 0) + 1);
  const int at = find(0, Ins::SEND, 0);
  REQUIRE(at >= 0);
  const Ins& send = s.ranks[0][at];
  REQUIRE(send.kind() == Ins::SEND);
  CHECK(send.collective().group() == "pipe.0-1");
  CHECK(send.collective().peer() == 1);
  CHECK(send.activation().tensor() == 3);
  CHECK_FALSE(send.activation().grad());
  // Rank 1's first backward sends the gradient of what it received back on pipe.1-0.
  for (const Ins& in : s.ranks[1])
    if (in.kind() == Ins::SEND) {
      CHECK(in.collective().group() == "pipe.1-0");
      CHECK(in.activation().tensor() == 0);
      CHECK(in.activation().grad());
      break;
    }
  // Rank 0 backwards micro-batch 1 before 0 while rank 1 sends 0's gradient first: the
  // message would land in the wrong micro-batch.
  PipeOrders swapped = *o;
  for (PipeOp& op : swapped.ops[0])
    if (op.kind == PipeOp::kBackward) op.micro = op.micro == 0 ? 1 : op.micro == 1 ? 0 : op.micro;
  const StreamSimulation wrong = SimulateStreams(Streams(swapped));
  CHECK_FALSE(wrong.finished);
  CHECK(wrong.stuck.find("sends micro-batch 0") != std::string::npos);
  CHECK(wrong.stuck.find("expects micro-batch 1") != std::string::npos);
  // Rank 0 waits for micro-batch 0's gradient before it sends micro-batch 1, and rank 1
  // runs micro-batch 1's forward before 0's backward: each waits for the other.
  PipeOrders stuck = *o;
  stuck.ops[0] = {{PipeOp::kForward, 0, 0},  {PipeOp::kBackward, 0, 0}, {PipeOp::kForward, 1, 0},
                  {PipeOp::kBackward, 1, 0}, {PipeOp::kForward, 2, 0},  {PipeOp::kBackward, 2, 0},
                  {PipeOp::kForward, 3, 0},  {PipeOp::kBackward, 3, 0}};
  stuck.ops[1] = {{PipeOp::kForward, 0, 0},  {PipeOp::kForward, 1, 0}, {PipeOp::kBackward, 0, 0},
                  {PipeOp::kBackward, 1, 0}, {PipeOp::kForward, 2, 0}, {PipeOp::kBackward, 2, 0},
                  {PipeOp::kForward, 3, 0},  {PipeOp::kBackward, 3, 0}};
  const StreamSimulation dead = SimulateStreams(Streams(stuck));
  CHECK_FALSE(dead.finished);
  CHECK(dead.stuck.find("waits at instruction") != std::string::npos);
}

}  // namespace
}  // namespace ds::parallel
