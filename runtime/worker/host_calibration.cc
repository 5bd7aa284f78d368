#include "runtime/worker/host_calibration.h"

#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include <gloo/rendezvous/hash_store.h>
#include <CLI/CLI.hpp>

#include "kernels/cpu/gemm.h"
#include "parallel/comm/gloo_communicator.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/core/cpu_adam.h"
#include "runtime/core/cpu_isa.h"
#include "runtime/core/dtype.h"
#include "runtime/core/quantize.h"

namespace ds::worker {
namespace {

using Clock = std::chrono::steady_clock;
using planner::GemmSample;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads and writes 64 MiB so that the next product's operands come from memory.
void EvictCaches() {
  static std::vector<float> junk(16 << 20, 1.f);
#pragma omp parallel for
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = junk[i] * 0.5f + 1.f;
}

// The median of 3 cold calls (after one warm-up) of an m x n x k product, in GFLOP/s.
double TimeGemm(bool bf16, int64_t m, int64_t n, int64_t k) {
  std::vector<float> a(m * k), b(n * k, 0.5f), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.1f;  // not zeros
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  ConvertF32ToBf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
  ConvertF32ToBf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
  const kernels::cpu::GemmShape s{false, true, m, n, k, k, k, n};  // y = x W^T, as linear
  const auto mode = kernels::cpu::HasNativeBf16Gemm() ? kernels::cpu::Bf16Gemm::kNative
                                                      : kernels::cpu::Bf16Gemm::kWiden;
  auto run = [&] {
    if (bf16)
      kernels::cpu::GemmBf16(s, 1.f, a16.data(), b16.data(), 0.f, c.data(), mode);
    else
      kernels::cpu::Gemm(s, 1.f, a.data(), b.data(), 0.f, c.data());
  };
  run();
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) {
    EvictCaches();
    const auto t0 = Clock::now();
    run();
    t.push_back(Since(t0));
  }
  std::sort(t.begin(), t.end());
  return 2.0 * m * n * k / t[1] / 1e9;
}

std::vector<GemmSample> GemmGrid(bool bf16) {
  std::vector<GemmSample> out;
  for (int64_t m : {64, 256, 1024, 4096})
    for (int64_t n : {64, 256, 1024, 4096})
      for (int64_t k : {64, 256, 1024, 4096}) {
        if (2.0 * m * n * k > 9e9) continue;  // the largest products: their rate is the 2048^3 one
        out.push_back({m, n, k, TimeGemm(bf16, m, n, k)});
      }
  return out;
}

// y = a x + y over 64 MiB of each: 12 bytes moved per element.
double StreamGbps() {
  const int64_t n = 16 << 20;
  std::vector<float> x(n, 1.f), y(n, 2.f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] + y[i];
    best = std::max(best, 12.0 * n / Since(t0) / 1e9);
  }
  return best;
}

// The fused Adam pass over 16M fp32 parameters: 28 bytes per element (p, m, v, g read; p, m, v
// written).
double OptimizerGbps() {
  const int64_t n = 16 << 20;
  std::vector<float> p(n, 0.1f), m(n, 0.f), v(n, 0.f), g(n, 0.01f);
  AdamRun r{p.data(), m.data(), v.data(), g.data(), nullptr, DType::kF32, n,  1.f,
            0.f,      0.9f,     0.999f,   1e-8f,    1e-3f,   1.f,         0.f};
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    AdamUpdateThreaded(r);
    best = std::max(best, 28.0 * n / Since(t0) / 1e9);
  }
  return best;
}

// ZeRO++'s block quantization as the collectives run it (one thread, int8 blocks of 2048):
// billions of fp32 values a second quantized, and dequantized.
std::pair<double, double> QuantizeGvps() {
  const int64_t n = 16 << 20;
  const QuantSpec spec{8, 2048};
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
  std::vector<int8_t> q(QuantizedValueBytes(n, spec));
  std::vector<float> scales(QuantBlocks(n, spec));
  double quantize = 0, dequantize = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    Quantize(x.data(), n, spec, q.data(), scales.data());
    quantize = std::max(quantize, n / Since(t0) / 1e9);
    t0 = Clock::now();
    Dequantize(q.data(), scales.data(), n, spec, y.data());
    dequantize = std::max(dequantize, n / Since(t0) / 1e9);
  }
  return {quantize, dequantize};
}

// Seconds per all-reduce of `count` floats between two ranks (threads) over loopback TCP.
StatusOr<std::pair<double, double>> AllReduceSeconds(int64_t small, int64_t big) {
  gloo::rendezvous::HashStore store;
  std::vector<double> t_small(2), t_big(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    parallel::GlooOptions o;
    o.rank = rank;
    o.size = 2;
    o.timeout = std::chrono::seconds(60);
    auto made = parallel::GlooCommunicator::Create(o, &store);
    if (!made.ok()) {
      errors[rank] = made.status().ToString();
      return;
    }
    std::vector<float> buf(big, 1.f);
    auto time = [&](int64_t count, int reps) {
      (void)(*made)->AllReduce({buf.data(), count}, parallel::ReduceOp::kSum);
      const auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        (void)(*made)->AllReduce({buf.data(), count}, parallel::ReduceOp::kSum);
      return Since(t0) / reps;
    };
    t_small[rank] = time(small, 200);
    t_big[rank] = time(big, 5);
  };
  std::thread a(rank_main, 0), b(rank_main, 1);
  a.join();
  b.join();
  for (const std::string& e : errors)
    if (!e.empty()) return InternalError("calibration all-reduce: " + e);
  return std::make_pair(std::max(t_small[0], t_small[1]), std::max(t_big[0], t_big[1]));
}

}  // namespace

StatusOr<planner::HostRates> CalibrateHost(
    int threads, const std::function<void(const std::string&)>& progress) {
  omp_set_num_threads(threads);
  planner::HostRates r;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  r.host = host;
  r.cpu = std::string("host ISA ") + CpuIsaName(HostCpuIsa()) + ", oneDNN ISA " +
          kernels::cpu::OneDnnIsa() +
          (kernels::cpu::HasNativeBf16Gemm() ? ", native bf16 products" : ", bf16 widened");
  r.threads = threads;
  r.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.gemm_f32 = GemmGrid(false);
  progress("matrix products, fp32: " + std::to_string(r.gemm_f32.size()) + " shapes");
  r.gemm_bf16 = GemmGrid(true);
  progress("matrix products, bf16: " + std::to_string(r.gemm_bf16.size()) + " shapes");
  r.stream_gbps = StreamGbps();
  r.optimizer_gbps = OptimizerGbps();
  std::tie(r.quantize_gvps, r.dequantize_gvps) = QuantizeGvps();
  char line[160];
  std::snprintf(line, sizeof line,
                "stream %.1f GB/s, optimizer %.1f GB/s, quantize %.2f / dequantize %.2f G values/s",
                r.stream_gbps, r.optimizer_gbps, r.quantize_gvps, r.dequantize_gvps);
  progress(line);
  const int64_t small = 1, big = 8 << 20;  // 4 bytes, 32 MiB
  DS_ASSIGN_OR_RETURN(auto t, AllReduceSeconds(small, big));
  // Two ranks: 2 ring steps' latency, and each rank sends the whole buffer once.
  r.intra.latency_us = t.first / 2 * 1e6;
  r.intra.gbps = 4.0 * big / std::max(1e-9, t.second - t.first) / 1e9;
  r.inter = r.intra;
  std::snprintf(line, sizeof line, "loopback all-reduce: latency %.1f us, %.2f GB/s",
                r.intra.latency_us, r.intra.gbps);
  progress(line);
  return r;
}

int CalibrateCommand(int argc, char** argv) {
  CLI::App app{"ds-worker calibrate: measure this host's rates for the planner's cost model"};
  int threads = omp_get_max_threads();
  std::string out;
  app.add_option("--threads", threads, "compute threads per rank")->check(CLI::PositiveNumber);
  app.add_option("--out", out, "where to write the table (default: where the planner looks)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (out.empty()) out = planner::HostRatesPath(threads);
  const auto t0 = Clock::now();
  auto rates = CalibrateHost(threads, [](const std::string& line) {
    std::fprintf(stderr, "calibrate: %s\n", line.c_str());
  });
  Status s = rates.status();
  if (s.ok()) {
    mkdir(out.substr(0, out.rfind('/')).c_str(), 0755);  // the runtime home, when it is new
    s = ckpt::WriteFileAtomic(out, planner::HostRatesToJson(*rates).Dump(1) + "\n");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "ds-worker calibrate: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "calibrate: %d threads, %.1f s; wrote %s\n", threads, Since(t0),
               out.c_str());
  return 0;
}

}  // namespace ds::worker
