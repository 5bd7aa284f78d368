// Test helpers the trainer tests share (test-only): the tiny token file they train on, ranks as
// threads over the loopback communicator, and a trainer from job text.
//
//   const std::string data = testing::WriteTinyTokens("tp_train.tok");
//   std::vector<Status> errors = testing::OnRanks(4, [&](int rank, parallel::Communicator* c) {
//     ...; return OkStatus();
//   });
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <memory>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"
#include "runtime/worker/trainer.h"

namespace ds::testing {

// 30000 tokens of vocabulary 32 (a learnable pattern with 1 in 4 random) as TEST_TMPDIR/`name`;
// returns its path. Aborts the test (REQUIRE) when it cannot be written.
std::string WriteTinyTokens(const std::string& name);

// Runs `rank_fn` for ranks 0 .. world-1, each on its own thread with its member of one loopback
// group; returns every rank's status.
std::vector<Status> OnRanks(
    int world, const std::function<Status(int rank, parallel::Communicator*)>& rank_fn);

// A trainer for one rank of job text `yaml` over `comm`: parsed (named `source` in messages),
// parallel.tensor set to `tp` when it is above 0, the graph loaded.
StatusOr<std::unique_ptr<worker::Trainer>> MakeTrainer(const std::string& yaml,
                                                       parallel::Communicator* comm, int tp = 0,
                                                       const std::string& source = "test.yaml");

// One training run of job text `yaml` on `world` ranks (threads) with parallel.tensor `tp` (0:
// as the job says): per step the loss, the gradient norm and the loss scale (negative when the
// step was skipped); after `steps` steps every rank saves a checkpoint with `save`, and evaluates
// 4 micro-batches when the job has data.validation. REQUIREs every rank to succeed and CHECKs
// that they all report the same loss, norm (an fp16 overflow's nan included) and validation loss.
struct TrainRun {
  double eval = 0;
  std::vector<double> loss, norm, scale;
  std::vector<double> aux;  // MoE: the routers' aux loss, mean over layers (0 for dense)
  std::vector<std::vector<float>> weights;  // per rank: its fp32 master, flat (empty: sharded)
  int64_t elements = 0;  // rank 0's flat parameter elements (what its ParamStore lays out)
  // MoE: the loss of the whole model, as generation runs it on one rank, on a fixed batch.
  double whole_loss = 0;
};
TrainRun TrainRanks(const std::string& yaml, int world, int tp, int steps, bool save = false);

// The cross-entropy of one row of `vocab` logits at `target`: log-sum-exp minus the target's
// logit, in double (the reference the tests hold the runtime's losses to).
double CrossEntropy(const float* logits, int64_t vocab, int32_t target);

// CHECKs got[i] within `rel` of want[i] (relative) at every step, naming `what` and the step.
void CheckClose(const std::vector<double>& want, const std::vector<double>& got, double rel,
                const char* what);

}  // namespace ds::testing
