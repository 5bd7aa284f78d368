// The pipeline schedules without processes: every rank runs each of its micro-batch chunks'
// forward and backward once, in an order the blocking-receive simulation finishes (no
// deadlock) for p in 2..8, m in 1..16, v in 1..4; the simulated bubble equals each schedule's
// formula; the micro-batches in flight stay within what the schedule allows; bad sizes are
// refused with the key and the least that works.
#include <catch2/catch.hpp>
#include <set>
#include <tuple>

#include "parallel/pipeline/pipe_schedule.h"

namespace ds::parallel {
namespace {

// Each (micro, chunk) once per part, a backward after its forward, a weight part after its
// input part, on every rank.
void CheckComplete(const PipeOrders& o) {
  const bool split = o.kind == plan::PipeScheduleKind::kZbH1;
  for (int r = 0; r < o.stages; ++r) {
    INFO("rank " << r);
    std::set<std::tuple<int, int, int>> seen;
    for (const PipeOp& op : o.ops[r]) {
      CHECK(seen.insert({op.kind, op.micro, op.chunk}).second);
      if (op.kind != PipeOp::kForward)
        CHECK(seen.count({PipeOp::kForward, op.micro, op.chunk}) == 1);
      if (op.kind == PipeOp::kBackwardWeight)
        CHECK(seen.count({PipeOp::kBackwardInput, op.micro, op.chunk}) == 1);
      CHECK((op.kind == PipeOp::kBackward) == (!split && op.kind != PipeOp::kForward));
      CHECK(op.chunk < o.chunks);
      CHECK(op.micro < o.micro_batches);
    }
    CHECK(seen.size() == static_cast<size_t>(o.micro_batches * o.chunks * (split ? 3 : 2)));
  }
}

TEST_CASE("pipeline schedules: complete, deadlock-free, bubble by the formula", "[plan][pipe]") {
  const PipeCosts whole{1, 2, 1, 1};  // F, B = B_in + W with F = B_in = W
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m)
      for (int v = 1; v <= 4; ++v) {
        INFO("p " << p << ", m " << m << ", v " << v);
        for (plan::PipeScheduleKind kind :
             {plan::PipeScheduleKind::k1F1B, plan::PipeScheduleKind::kInterleaved,
              plan::PipeScheduleKind::kZbH1}) {
          INFO(plan::PipeScheduleName(kind));
          auto o = BuildPipelineSchedule(kind, p, m, v);
          const bool interleaved = kind == plan::PipeScheduleKind::kInterleaved;
          if (interleaved != (v > 1) || (interleaved && m % p != 0)) {
            CHECK_FALSE(o.ok());
            continue;
          }
          REQUIRE(o.ok());
          CheckComplete(*o);
          const PipeSimulation sim = SimulateSchedule(*o, whole);
          REQUIRE(sim.finished);
          const double bubble = BubbleFormula(*o, whole);
          for (int r = 0; r < p; ++r) {
            INFO("rank " << r);
            if (kind == plan::PipeScheduleKind::kZbH1 && m < p)
              CHECK(sim.idle[r] >= bubble);  // too few micro-batches to fill the cool-down
            else
              CHECK(sim.idle[r] == Approx(bubble));
            const int limit = kind == plan::PipeScheduleKind::k1F1B ? std::min(p - r, m)
                              : kind == plan::PipeScheduleKind::kZbH1
                                  ? std::min(p, m)
                                  : std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v);
            CHECK(sim.max_in_flight[r] <= limit);
          }
        }
      }
}

TEST_CASE("pipeline schedules: the bubble fractions of parallelism.md", "[plan][pipe]") {
  const PipeCosts c{1, 2, 1, 1};
  auto fraction = [&c](plan::PipeScheduleKind k, int p, int m, int v) {
    auto o = BuildPipelineSchedule(k, p, m, v);
    REQUIRE(o.ok());
    const PipeSimulation s = SimulateSchedule(*o, c);
    REQUIRE(s.finished);
    return s.idle[0] / (m * v * 3.0);  // of the ideal time, F = B_in = W
  };
  // (p-1)/m, (p-1)/(v m) (each chunk 1/v of the stage), (p-1)/(3m).
  CHECK(fraction(plan::PipeScheduleKind::k1F1B, 4, 8, 1) == Approx(3.0 / 8));
  CHECK(fraction(plan::PipeScheduleKind::kInterleaved, 4, 8, 2) == Approx(3.0 / 16));
  CHECK(fraction(plan::PipeScheduleKind::kZbH1, 4, 8, 1) == Approx(3.0 / 24));
  // ZB-H1 below 1F1B, with unequal costs too.
  const PipeCosts uneven{1.0, 2.5, 1.5, 1.0};
  auto one = BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, 4, 8);
  auto zb = BuildPipelineSchedule(plan::PipeScheduleKind::kZbH1, 4, 8);
  CHECK(SimulateSchedule(*zb, uneven).makespan < SimulateSchedule(*one, uneven).makespan);
}

TEST_CASE("pipeline schedules: the simulation finds a deadlock", "[plan][pipe]") {
  auto o = BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, 2, 2);
  REQUIRE(o.ok());
  // Rank 1 waits for micro-batch 1's forward first; rank 0 sends micro-batch 0 only after its
  // backward of micro-batch 1, which waits on rank 1.
  std::swap(o->ops[1][0], o->ops[1][2]);
  o->ops[0] = {{PipeOp::kForward, 1, 0},
               {PipeOp::kBackward, 1, 0},
               {PipeOp::kForward, 0, 0},
               {PipeOp::kBackward, 0, 0}};
  const PipeSimulation s = SimulateSchedule(*o, {});
  CHECK_FALSE(s.finished);
  CHECK(s.stuck_rank == 0);
}

TEST_CASE("pipeline schedules: bad sizes are refused with the key and the least", "[plan][pipe]") {
  auto few = BuildPipelineSchedule(plan::PipeScheduleKind::kInterleaved, 4, 6, 2);
  REQUIRE_FALSE(few.ok());
  CHECK(few.status().message().find("multiple of 4; the least is 4") != std::string::npos);
  auto chunks = BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, 4, 8, 2);
  REQUIRE_FALSE(chunks.ok());
  CHECK(chunks.status().message().find("pipeline.virtual_stages 2 needs schedule interleaved") !=
        std::string::npos);
  auto one = BuildPipelineSchedule(plan::PipeScheduleKind::kInterleaved, 4, 8, 1);
  REQUIRE_FALSE(one.ok());
  CHECK(one.status().message().find("must be >= 2") != std::string::npos);
  CHECK_FALSE(BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, 4, 0).ok());
  plan::PipeScheduleKind k;
  CHECK(plan::ParsePipeSchedule("zb-h1", &k));
  CHECK(k == plan::PipeScheduleKind::kZbH1);
  CHECK_FALSE(plan::ParsePipeSchedule("gpipe", &k));
}

}  // namespace
}  // namespace ds::parallel
