#include "runtime/worker/trainer_testing.h"

#include <cstdlib>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "parallel/loopback_communicator.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/token_file.h"
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

}  // namespace ds::testing
