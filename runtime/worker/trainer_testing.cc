#include "runtime/worker/trainer_testing.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/token_file.h"
#include "runtime/exec/executor.h"
#include "runtime/plan/model_loader.h"

namespace ds::testing {

std::string WriteTinyTokens(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  std::string path = std::string(d ? d : "/tmp") + "/" + name;
  std::mt19937 gen(5);
  std::vector<uint32_t> tokens(30000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = gen() % 4 == 0 ? gen() % 32 : static_cast<uint32_t>((i * 7) % 29);
  REQUIRE(data::WriteTokenFile(path, tokens, data::TokenDType::kUint16, 32).ok());
  return path;
}

std::vector<Status> OnRanks(int world,
                            const std::function<Status(int, parallel::Communicator*)>& rank_fn) {
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<Status> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { errors[r] = rank_fn(r, comms[r].get()); });
  for (std::thread& t : threads) t.join();
  return errors;
}

StatusOr<std::unique_ptr<worker::Trainer>> MakeTrainer(const std::string& yaml,
                                                       parallel::Communicator* comm, int tp,
                                                       const std::string& source) {
  DS_ASSIGN_OR_RETURN(config::JobConfig config, config::ParseJobConfig(yaml, source));
  if (tp > 0) config.parallel.tensor = tp;
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(config));
  return worker::Trainer::Create(config, std::move(graph), comm);
}

double CrossEntropy(const float* logits, int64_t vocab, int32_t target) {
  double m = logits[0], z = 0;
  for (int64_t j = 1; j < vocab; ++j) m = std::max<double>(m, logits[j]);
  for (int64_t j = 0; j < vocab; ++j) z += std::exp(logits[j] - m);
  return m + std::log(z) - logits[target];
}

namespace {

bool SameNorms(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

}  // namespace

TrainRun TrainRanks(const std::string& yaml, int world, int tp, int steps, bool save) {
  std::vector<TrainRun> runs(world);
  const std::vector<Status> errors =
      OnRanks(world, [&](int r, parallel::Communicator* comm) -> Status {
        DS_ASSIGN_OR_RETURN(std::unique_ptr<worker::Trainer> t, MakeTrainer(yaml, comm, tp));
        DS_RETURN_IF_ERROR(t->Initialize());
        for (int i = 0; i < steps; ++i) {
          DS_ASSIGN_OR_RETURN(worker::StepMetrics m, t->TrainStep());
          runs[r].loss.push_back(m.loss);
          runs[r].aux.push_back(m.moe_aux);
          runs[r].norm.push_back(m.grad_norm);
          runs[r].scale.push_back(m.skipped ? -m.loss_scale : m.loss_scale);
        }
        if (save) DS_RETURN_IF_ERROR(t->SaveCheckpoint());
        if (!t->config().data.validation.empty()) {
          DS_ASSIGN_OR_RETURN(runs[r].eval, t->Evaluate(4));
        }
        const zero::ParamStore& p = t->params();
        runs[r].elements = p.total_elements();
        const config::ParallelConfig& par = t->config().parallel;
        if (tp <= 1 && par.tensor <= 1 && par.pipeline <= 1 &&
            t->graph().config.count("num_experts")) {  // all join expert gathers
          const int64_t micro = t->config().train_micro_batch_size_per_gpu, seq = 16;
          DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> ex,
                              t->MakeInferenceExecutor(micro, seq));
          for (int64_t i = 0; i < micro * seq; ++i) {
            ex->ids()[i] = static_cast<int32_t>(i * 7 % 29);
            ex->targets()[i] = static_cast<int32_t>((i * 7 + 1) % 29);
          }
          DS_RETURN_IF_ERROR(ex->Forward(0));
          runs[r].whole_loss = ex->loss();
        }
        if (!p.master_sharded())
          runs[r].weights.emplace_back(p.master_data(), p.master_data() + p.total_elements());
        return OkStatus();
      });
  std::string failed;  // every rank's error: the first to fail is often not rank 0
  for (int r = 0; r < world; ++r)
    if (!errors[r].ok()) failed += "\n  rank " + std::to_string(r) + ": " + errors[r].ToString();
  INFO(failed);
  REQUIRE(failed.empty());
  TrainRun out = runs[0];
  out.weights.assign(world, {});
  for (int r = 0; r < world; ++r) {
    CHECK(runs[r].aux == runs[0].aux);
    CHECK(runs[r].loss == runs[0].loss);  // every rank reports the same global loss and norm
    CHECK(SameNorms(runs[r].norm, runs[0].norm));
    CHECK(runs[r].eval == runs[0].eval);
    CHECK(runs[r].whole_loss == runs[0].whole_loss);
    if (!runs[r].weights.empty()) out.weights[r] = runs[r].weights[0];
  }
  return out;
}

void CheckClose(const std::vector<double>& want, const std::vector<double>& got, double rel,
                const char* what) {
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << " at step " << i + 1 << ": want " << want[i] << ", got " << got[i]);
    CHECK(std::abs(got[i] - want[i]) <= rel * std::abs(want[i]));
  }
}

}  // namespace ds::testing
