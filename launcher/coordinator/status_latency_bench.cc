// Status RPC latency under load: T client threads (own channel each) call Job.Status
// against a coordinator running a joined job of N nodes x 8 ranks; prints p50, p99 and max
// latency and the call rate (target with 100 threads: p99 <= 10 ms).
// interval_ms = 0: each thread calls back to back (a saturation test: latency = T / rate);
// interval_ms > 0: each thread calls on a fixed schedule (threads spread over an interval),
// latency measured from the scheduled time, so a late call counts its delay.
//
//   bazel run //launcher/coordinator:status_latency_bench -- [threads=100] [calls=200]
//       [nodes=32] [interval_ms=0]
//
// With DS_BENCH_ADDRESS=host:port and DS_BENCH_TOKEN_FILE=path set, the clients call that
// (running) job's coordinator instead of an in-process one (tools/bench/status_load.sh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/coordinator_server.h"
#include "runtime/base/logging.h"

using namespace ds::launcher;  // NOLINT: a benchmark main
using BenchClock = std::chrono::steady_clock;

// T client threads calling Job.Status at `address`; prints the latency percentiles.
int RunClients(const std::string& address, const std::string& token, int threads, int calls,
               int interval_ms, int nodes = 0) {
  std::vector<std::vector<double>> latencies(threads);
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int t = 0; t < threads; ++t) {
    ClientOptions client_options;
    client_options.address = address;
    client_options.token = token;
    clients.push_back(std::move(CoordinatorClient::Create(client_options)).value());
    if (!clients.back()->GetStatus().ok()) return 1;  // connect and warm up
  }
  std::vector<std::thread> pool;
  const auto start = BenchClock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto interval = std::chrono::milliseconds(interval_ms);
      auto next = start + interval * t / threads;  // spread the threads over one interval
      for (int i = 0; i < calls; ++i) {
        auto t0 = BenchClock::now();
        if (interval_ms > 0) {
          std::this_thread::sleep_until(next);
          t0 = next;
          next += interval;
        }
        if (!clients[t]->GetStatus().ok()) std::abort();
        latencies[t].push_back(
            std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count());
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(BenchClock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all[std::min(all.size() - 1, size_t(p * all.size()))]; };
  std::printf(
      "Status RPC: %d threads x %d calls (%s), %s: p50 %.2f ms, "
      "p99 %.2f ms, max %.2f ms, %.0f calls/s (target p99 <= 10 ms) on %u CPUs\n",
      threads, calls,
      interval_ms > 0 ? ("every " + std::to_string(interval_ms) + " ms").c_str() : "back to back",
      nodes > 0 ? (std::to_string(nodes) + " nodes x 8 ranks").c_str() : "a running job", pct(0.50),
      pct(0.99), all.back(), all.size() / seconds, std::thread::hardware_concurrency());
  return 0;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 100;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 200;
  const int nodes = argc > 3 ? std::atoi(argv[3]) : 32;
  const int interval_ms = argc > 4 ? std::atoi(argv[4]) : 0;
  ds::SetLogLevel("warn");
  if (const char* address = std::getenv("DS_BENCH_ADDRESS")) {
    const char* token_file = std::getenv("DS_BENCH_TOKEN_FILE");
    std::FILE* f = token_file ? std::fopen(token_file, "r") : nullptr;
    char token[256] = {0};
    if (!f || !std::fgets(token, sizeof(token), f)) {
      std::fprintf(stderr, "DS_BENCH_TOKEN_FILE is missing or unreadable\n");
      return 1;
    }
    std::fclose(f);
    token[std::strcspn(token, "\n")] = '\0';
    return RunClients(address, token, threads, calls, interval_ms);
  }
  CoordinatorOptions options;
  options.token = "bench-token";
  for (int i = 0; i < nodes; ++i) options.config.nodes.push_back({"node-" + std::to_string(i), 8});
  auto started = CoordinatorServer::Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
    return 1;
  }
  CoordinatorServer& server = **started;
  // A running job, joined in-process, so each Status carries nodes x 8 ranks.
  std::vector<std::future<ds::StatusOr<JoinResult>>> joins;
  for (int i = 0; i < nodes; ++i) {
    joins.push_back(std::async(std::launch::async, [&, i] {
      JoinRequest request;
      request.node_name = options.config.nodes[i].name;
      return server.state().Join(request, WaitOptions{});
    }));
  }
  for (auto& join : joins) {
    if (!join.get().ok()) return 1;
  }

  return RunClients(server.address(), options.token, threads, calls, interval_ms, nodes);
}
