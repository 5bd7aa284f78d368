// Rendezvous of many agents: N client threads, each with its own channel to one
// CoordinatorServer on 127.0.0.1, join round 1 at once. Prints the wall time from the first
// Join sent to the last answer received (target for 256 agents: <= 1 s).
//
//   bazel run //launcher/coordinator:rendezvous_bench -- [agents=256] [slots=8]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/coordinator_server.h"
#include "runtime/base/logging.h"

using namespace ds::launcher;  // NOLINT: a benchmark main
using BenchClock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int agents = argc > 1 ? std::atoi(argv[1]) : 256;
  const int slots = argc > 2 ? std::atoi(argv[2]) : 8;
  ds::SetLogLevel("warn");
  CoordinatorOptions options;
  options.token = "bench-token";
  for (int i = 0; i < agents; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "node-%03d", i);
    options.config.nodes.push_back({name, slots});
  }
  options.config.join_timeout = std::chrono::seconds(60);
  auto server = CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  const auto connect_start = BenchClock::now();
  for (int i = 0; i < agents; ++i) {
    ClientOptions client_options;
    client_options.address = (*server)->address();
    client_options.token = options.token;
    clients.push_back(std::move(CoordinatorClient::Create(client_options)).value());
    if (!clients.back()->HealthCheck().ok()) return 1;  // connected before the clock starts
  }
  const double connect_ms =
      std::chrono::duration<double, std::milli>(BenchClock::now() - connect_start).count();

  std::atomic<bool> go{false};
  std::atomic<int64_t> first_sent{INT64_MAX}, last_done{0};
  std::vector<ds::StatusOr<JoinResult>> results(agents, ds::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < agents; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      JoinRequest request;
      request.node_name = options.config.nodes[i].name;
      request.slots = slots;
      int64_t t0 = BenchClock::now().time_since_epoch().count();
      for (int64_t seen = first_sent.load();
           t0 < seen && !first_sent.compare_exchange_weak(seen, t0);) {
      }
      results[i] = clients[i]->Join(request, std::chrono::seconds(60));
      int64_t t1 = BenchClock::now().time_since_epoch().count();
      for (int64_t seen = last_done.load();
           t1 > seen && !last_done.compare_exchange_weak(seen, t1);) {
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();

  std::set<int> ranks;
  for (int i = 0; i < agents; ++i) {
    if (!results[i].ok()) {
      std::fprintf(stderr, "agent %d: %s\n", i, results[i].status().ToString().c_str());
      return 1;
    }
    if (results[i]->node_rank != i) return 1;
    ranks.insert(results[i]->global_ranks.begin(), results[i]->global_ranks.end());
  }
  if (static_cast<int>(ranks.size()) != agents * slots) return 1;
  const double wall_ms = (last_done.load() - first_sent.load()) / 1e6;
  std::printf(
      "rendezvous: %d agents x %d slots (world %d), connections %.1f ms; "
      "first Join -> all answered: %.1f ms (target <= 1000 ms)\n",
      agents, slots, agents * slots, connect_ms, wall_ms);
  return 0;
}
