// In-memory copies (Trainer::SnapshotState / RestoreState, Note [In-memory copies]): a copy
// taken at step k and put back into fresh ranks continues the run bit for bit under ZeRO 0-3 in
// fp32 and bf16; a copy of another rank, a truncated copy or a missing one is refused on every
// rank and changes nothing.
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/worker/tiny_gpt_job.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

using Copies = std::vector<StatusOr<std::string>>;

// Runs `world` ranks (threads) of `yaml`: each initializes (from copies[r] when given), trains
// `steps` steps, and with `take` snapshots after `take` steps. Returns rank 0's losses; each
// rank's status in `errors`.
std::vector<double> Run(const std::string& yaml, int world, int steps, const Copies* copies,
                        int take, Copies* taken, std::vector<Status>* errors,
                        std::vector<int64_t>* start_steps = nullptr) {
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<std::vector<double>> losses(world);
  errors->assign(world, OkStatus());
  if (taken) taken->assign(world, std::string());
  if (start_steps) start_steps->assign(world, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto t = testing::MakeTrainer(yaml, comms[r].get(), 0, "copy.yaml");
      if (!t.ok()) return void((*errors)[r] = t.status());
      Status init = copies ? (*t)->InitializeFromCopy((*copies)[r]) : (*t)->Initialize();
      if (start_steps) (*start_steps)[r] = (*t)->step();
      if (!init.ok()) return void((*errors)[r] = init);
      for (int i = 0; i < steps; ++i) {
        auto m = (*t)->TrainStep();
        if (!m.ok()) return void((*errors)[r] = m.status());
        losses[r].push_back(m->loss);
        if (taken && i + 1 == take) {
          std::string copy;
          if (Status s = (*t)->SnapshotState(&copy); !s.ok()) return void((*errors)[r] = s);
          CHECK(static_cast<int64_t>(copy.size()) > (*t)->CopyBytes());
          // ds-launch plan's figure for the copy is the copy's size.
          const proto::Plan& plan = (*t)->plan();
          for (const proto::RankPlan& rp : plan.ranks())
            if (rp.rank() == r)
              CHECK(plan::SummarizeRank(plan, rp).copy_bytes() == (*t)->CopyBytes());
          (*taken)[r] = std::move(copy);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return losses[0];
}

void RequireOk(const std::vector<Status>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r].ToString());
    REQUIRE(errors[r].ok());
  }
}

TEST_CASE("a copy put back continues the run bit for bit, ZeRO 0-3, fp32 and bf16",
          "[worker][memory]") {
  const std::string data = testing::WriteTinyTokens("copy_train.tok");
  struct Case {
    int stage;
    const char* extra;
  };
  for (const Case& c : {Case{0, ""}, Case{1, ""}, Case{2, "bf16: {enabled: true}\n"}, Case{3, ""},
                        Case{3, "bf16: {enabled: true}\n"}, Case{1, "bf16: {enabled: true}\n"}}) {
    INFO("stage " << c.stage << " " << c.extra);
    const std::string yaml = testing::TinyGptJob(data, 4, c.stage, "cpu", c.extra);
    std::vector<Status> errors;
    const std::vector<double> straight = Run(yaml, 2, 12, nullptr, 0, nullptr, &errors);
    RequireOk(errors);
    Copies taken;
    Run(yaml, 2, 8, nullptr, 5, &taken, &errors);  // copies of step 5, then 3 steps more
    RequireOk(errors);
    std::vector<int64_t> starts;
    const std::vector<double> resumed = Run(yaml, 2, 7, &taken, 0, nullptr, &errors, &starts);
    RequireOk(errors);
    CHECK(starts[0] == 5);
    CHECK(starts[1] == 5);
    REQUIRE(resumed.size() == 7);
    for (size_t i = 0; i < resumed.size(); ++i) {
      INFO("step " << i + 6);
      CHECK(resumed[i] == straight[5 + i]);
    }
  }
}

// An elastic job that shrank: 2 new ranks cut their parts out of 4 old ranks' copies.
std::vector<double> RunResharded(const std::string& yaml, int world, int steps, const Copies& old,
                                 std::vector<Status>* errors) {
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<std::vector<double>> losses(world);
  errors->assign(world, OkStatus());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto t = testing::MakeTrainer(yaml, comms[r].get(), 0, "copy.yaml");
      if (!t.ok()) return void((*errors)[r] = t.status());
      Status s = (*t)->RestoreResharded(static_cast<int>(old.size()),
                                        [&](int old_rank) { return old[old_rank]; });
      if (!s.ok()) return void((*errors)[r] = s);
      for (int i = 0; i < steps; ++i) {
        auto m = (*t)->TrainStep();
        if (!m.ok()) return void((*errors)[r] = m.status());
        losses[r].push_back(m->loss);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return losses[0];
}

TEST_CASE("copies of 4 ranks cut for 2 or 1 continue the 4-rank curve, ZeRO 0-2",
          "[worker][memory]") {
  const std::string data = testing::WriteTinyTokens("copy_reshard.tok");
  for (int stage : {0, 1, 2}) {
    for (const char* extra : {"", "bf16: {enabled: true}\n"}) {
      INFO("stage " << stage << " " << extra);
      std::vector<Status> errors;
      const std::vector<double> straight = Run(testing::TinyGptJob(data, 2, stage, "cpu", extra), 4,
                                               12, nullptr, 0, nullptr, &errors);
      RequireOk(errors);
      Copies taken;
      Run(testing::TinyGptJob(data, 2, stage, "cpu", extra), 4, 5, nullptr, 5, &taken, &errors);
      RequireOk(errors);
      for (int world : {2, 1}) {
        INFO("world " << world);
        const std::vector<double> resumed = RunResharded(
            testing::TinyGptJob(data, 8 / world, stage, "cpu", extra), world, 7, taken, &errors);
        RequireOk(errors);
        REQUIRE(resumed.size() == 7);
        for (size_t i = 0; i < resumed.size(); ++i) {
          INFO("step " << i + 6);
          // As the world sizes' curves agree (trainer_dp_test): fp32 to 1e-5, bf16 to its
          // gradients' rounding in another reduction order.
          const double tol = *extra ? 1e-2 : 1e-5;
          CHECK(std::abs(resumed[i] - straight[5 + i]) <= tol * straight[5 + i]);
        }
      }
    }
  }
}

TEST_CASE("copies of 4 ranks cut for 2: ZeRO-3, tensor and pipeline parallelism",
          "[worker][memory]") {
  const std::string data = testing::WriteTinyTokens("copy_reshard_mp.tok");
  struct Case {
    int stage;
    const char* extra;
  };
  // 4 ranks -> 2: dp 4 -> 2 at stage 3; tp 2 (or pp 2) x dp 2 -> x dp 1, each slice's (stage's)
  // ranks cutting from the old copies of the same slice (stage); Ulysses 2 over 2 data ranks -> 1
  // (its ranks are data-parallel ranks of one flat space).
  for (const Case& c :
       {Case{3, ""}, Case{3, "bf16: {enabled: true}\n"}, Case{1, "parallel: {tensor: 2}\n"},
        Case{2, "parallel: {tensor: 2}\nbf16: {enabled: true}\n"},
        Case{1, "parallel: {pipeline: 2}\n"}, Case{2, "parallel: {ulysses: 2}\n"}}) {
    INFO("stage " << c.stage << " " << c.extra);
    const std::string yaml = testing::TinyGptJob(data, 2, c.stage, "cpu", c.extra);
    std::vector<Status> errors;
    const std::vector<double> straight = Run(yaml, 4, 12, nullptr, 0, nullptr, &errors);
    RequireOk(errors);
    Copies taken;
    Run(yaml, 4, 5, nullptr, 5, &taken, &errors);
    RequireOk(errors);
    const std::vector<double> resumed = RunResharded(yaml, 2, 7, taken, &errors);
    RequireOk(errors);
    REQUIRE(resumed.size() == 7);
    const bool bf16 = std::string(c.extra).find("bf16") != std::string::npos;
    for (size_t i = 0; i < resumed.size(); ++i) {
      INFO("step " << i + 6);
      const double tol = bf16 ? 1e-2 : 1e-5;
      CHECK(std::abs(resumed[i] - straight[5 + i]) <= tol * straight[5 + i]);
    }
  }
}

TEST_CASE("a wrong, truncated or missing copy is refused on every rank, changing nothing",
          "[worker][memory]") {
  const std::string data = testing::WriteTinyTokens("copy_bad.tok");
  const std::string yaml = testing::TinyGptJob(data, 4, 1, "cpu");
  std::vector<Status> errors;
  Copies taken;
  Run(yaml, 2, 3, nullptr, 3, &taken, &errors);
  RequireOk(errors);
  std::vector<int64_t> starts;
  SECTION("the ranks' copies swapped") {
    Copies swapped = {taken[1], taken[0]};
    Run(yaml, 2, 0, &swapped, 0, nullptr, &errors, &starts);
    CHECK(errors[0].message().find("made by rank 1 of 2") != std::string::npos);
    CHECK(errors[1].message().find("made by rank 0 of 2") != std::string::npos);
  }
  SECTION("one copy truncated") {
    Copies cut = taken;
    cut[1] = taken[1]->substr(0, taken[1]->size() - 4);
    Run(yaml, 2, 0, &cut, 0, nullptr, &errors, &starts);
    CHECK(errors[1].code() == StatusCode::kDataLoss);
    CHECK(errors[1].message().find("in-memory copy of rank 1") != std::string::npos);
    CHECK(errors[0].message().find("another rank's in-memory copy") != std::string::npos);
  }
  SECTION("one copy missing") {
    Copies missing = {taken[0], NotFoundError("no copy of rank 1 at step 3")};
    Run(yaml, 2, 0, &missing, 0, nullptr, &errors, &starts);
    CHECK(errors[1].code() == StatusCode::kNotFound);
    CHECK(!errors[0].ok());
  }
  CHECK(starts[0] == 0);  // nothing restored: still at step 0
  CHECK(starts[1] == 0);
}

}  // namespace
}  // namespace ds::worker
