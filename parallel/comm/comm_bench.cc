// comm_bench: bandwidth of GlooCommunicator's collectives over TCP on 127.0.0.1, ranks as
// threads of this process (bootstrapped through Gloo's in-process HashStore: the bench measures
// the collectives, not the bootstrap), printed like nccl-tests beside the machine's memcpy
// bandwidth at the same size.
//
// Conventions (nccl-tests): size = the buffer for allreduce and broadcast, the gathered output
// for allgather, the input per rank for reduce_scatter; algbw = size / time; busbw = algbw x
// 2(n-1)/n (allreduce), (n-1)/n (reduce_scatter, allgather, alltoall: size = each rank's
// buffer), 1 (broadcast). time = the mean of
// back-to-back iterations after a warm-up, the slowest rank's. memcpy = one thread copying
// `size` bytes between two warm buffers, same timing. "allreduce(gloo)" is Gloo's own
// gloo::allreduce (ring) on the same sockets' kind, for comparison with ours.
//
//   bazel run -c opt //parallel/comm:comm_bench -- --worlds=2,4 --max_bytes=67108864
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/gloo_communicator.h"
#include "runtime/base/logging.h"

namespace ds::parallel {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::vector<int> worlds = {2, 4};
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 64 << 20;
  int64_t step = 4;                        // size multiplier between rows
  std::vector<int> ops = {0, 1, 2, 3, 4};  // indices into kOps, in run order
};

// Iterations for one measurement: about 256 MiB moved per rank, between 5 and 200.
int Iterations(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 5, 200));
}

double MemcpyGBps(int64_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int iters = Iterations(bytes);
  std::memcpy(b.data(), a.data(), bytes);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  return bytes / s / 1e9;
}

const char* const kOps[] = {"allreduce", "allreduce(gloo)", "reduce_scatter",
                            "allgather", "broadcast",       "alltoall"};
constexpr int kNumOps = 6;

double BusFactor(int op, int n) {
  if (op <= 1) return 2.0 * (n - 1) / n;
  if (op == 4) return 1.0;
  return static_cast<double>(n - 1) / n;
}

// One rank's share of the benchmark: every op and size in the same order on every rank.
// times[op][size index] = seconds per iteration.
void RankMain(int rank, int n, gloo::rendezvous::Store* store, const std::vector<int64_t>& sizes,
              const std::vector<int>& ops, std::vector<std::vector<double>>* times,
              std::string* error) {
  GlooOptions options;
  options.rank = rank;
  options.size = n;
  options.timeout = std::chrono::seconds(120);
  StatusOr<std::unique_ptr<GlooCommunicator>> made = GlooCommunicator::Create(options, store);
  if (!made.ok()) {
    *error = made.status().ToString();
    return;
  }
  Communicator& comm = **made;
  // Gloo's own allreduce, on its own context (same device kind, its own key space).
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
  try {
    auto device = gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr("127.0.0.1"));
    context->setTimeout(std::chrono::seconds(120));
    gloo::rendezvous::PrefixStore prefixed("gloo-ref", *store);
    context->connectFullMesh(prefixed, device);
  } catch (const std::exception& e) {
    *error = std::string("gloo context: ") + e.what();
    return;
  }

  const int64_t max = sizes.back();
  std::vector<float> in(max / 4), out(max / 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 17);
  for (int op : ops) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      const int64_t count = sizes[si] / 4 / n * n;  // elements of `size` (whole chunks)
      std::function<Status()> run;
      switch (op) {
        case 0:
          run = [&] { return comm.AllReduce({out.data(), count}, ReduceOp::kSum); };
          break;
        case 1:
          run = [&] {
            try {
              gloo::AllreduceOptions o(context);
              o.setOutput(out.data(), count);
              o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
                  &gloo::sum<float>));
              gloo::allreduce(o);
              return OkStatus();
            } catch (const std::exception& e) {
              return InternalError(std::string("gloo::allreduce: ") + e.what());
            }
          };
          break;
        case 2:
          run = [&] {
            return comm.ReduceScatter({in.data(), count}, {out.data(), count / n}, ReduceOp::kSum);
          };
          break;
        case 3:
          run = [&] { return comm.AllGather({in.data(), count / n}, {out.data(), count}); };
          break;
        case 5:  // size = each rank's buffer, 1/n of it to every rank
          run = [&] { return comm.AllToAll({in.data(), count}, {out.data(), count}); };
          break;
        default:
          run = [&] { return comm.Broadcast({out.data(), count}, 0); };
          break;
      }
      Status s = run();  // warm-up
      const int iters = Iterations(sizes[si]);
      if (s.ok()) s = comm.Barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < iters && s.ok(); ++i) s = run();
      (*times)[op][si] = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      if (!s.ok()) {
        *error = s.ToString();
        return;
      }
    }
  }
}

int Main(const Flags& flags) {
  std::vector<int64_t> sizes;
  for (int64_t b = flags.min_bytes; b <= flags.max_bytes; b *= flags.step) sizes.push_back(b);
  std::vector<double> memcpy_gbps;
  for (int64_t b : sizes) memcpy_gbps.push_back(MemcpyGBps(b));

  std::printf(
      "# comm_bench: GlooCommunicator over TCP 127.0.0.1, ranks as threads, fp32, "
      "%u hardware threads\n",
      std::thread::hardware_concurrency());
  std::printf("# %-15s %5s %12s %12s %11s %11s %13s\n", "op", "ranks", "size(B)", "time(us)",
              "algbw(GB/s)", "busbw(GB/s)", "memcpy(GB/s)");
  for (int n : flags.worlds) {
    gloo::rendezvous::HashStore store;

    std::vector<std::vector<std::vector<double>>> times(
        n, std::vector<std::vector<double>>(kNumOps, std::vector<double>(sizes.size())));
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back(RankMain, r, n, &store, sizes, flags.ops, &times[r], &errors[r]);
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      if (!errors[r].empty()) {
        std::fprintf(stderr, "rank %d: %s\n", r, errors[r].c_str());
        return 1;
      }
    }
    for (int op : flags.ops) {
      for (size_t si = 0; si < sizes.size(); ++si) {
        double t = 0;
        for (int r = 0; r < n; ++r) t = std::max(t, times[r][op][si]);
        const double algbw = sizes[si] / t / 1e9;
        std::printf("  %-15s %5d %12lld %12.1f %11.3f %11.3f %13.2f\n", kOps[op], n,
                    static_cast<long long>(sizes[si]), t * 1e6, algbw, algbw * BusFactor(op, n),
                    memcpy_gbps[si]);
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

bool ParseFlag(const std::string& arg, const std::string& name, std::string* value) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

}  // namespace
}  // namespace ds::parallel

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a lost peer fails the collective, not this process
  ds::parallel::Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    const std::string arg = argv[i];
    if (ds::parallel::ParseFlag(arg, "worlds", &v)) {
      flags.worlds.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        flags.worlds.push_back(std::stoi(v.substr(p, q - p)));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else if (ds::parallel::ParseFlag(arg, "min_bytes", &v)) {
      flags.min_bytes = std::stoll(v);
    } else if (ds::parallel::ParseFlag(arg, "max_bytes", &v)) {
      flags.max_bytes = std::stoll(v);
    } else if (ds::parallel::ParseFlag(arg, "ops", &v)) {
      flags.ops.clear();
      for (size_t p = 0; p < v.size();) {
        const size_t q = std::min(v.find(',', p), v.size());
        const std::string name = v.substr(p, q - p);
        const auto* it =
            std::find(std::begin(ds::parallel::kOps), std::end(ds::parallel::kOps), name);
        if (it == std::end(ds::parallel::kOps)) {
          std::fprintf(stderr, "unknown op '%s'\n", name.c_str());
          return 2;
        }
        flags.ops.push_back(static_cast<int>(it - std::begin(ds::parallel::kOps)));
        p = q + 1;
      }
    } else if (ds::parallel::ParseFlag(arg, "step", &v)) {
      flags.step = std::max(2LL, std::stoll(v));
    } else {
      std::fprintf(
          stderr,
          "usage: comm_bench [--worlds=2,4] [--min_bytes=1024] "
          "[--max_bytes=67108864] [--step=4] "
          "[--ops=allreduce,allreduce(gloo),reduce_scatter,allgather,broadcast,alltoall]\n");
      return 2;
    }
  }
  ds::SetLogLevel("warn");
  return ds::parallel::Main(flags);
}
