// gemm_bench: the CPU's matrix products on a training job's shapes, through each path gemm.h
// has: OpenBLAS's sgemm (split over the OpenMP threads), oneDNN's fp32 matmul, oneDNN's bf16
// matmul (native with AVX512_BF16 / AMX; emulated and marked so elsewhere), and bf16 widened to
// fp32. Prints GFLOP/s at the median of the timed calls, and oneDNN's instruction set.
//
//   bazel run -c opt //kernels/cpu:gemm_bench -- [--threads N] [--shape small|gpt2-small|all]
//                                                [--cold 1]
//
// --cold 1 writes a 512 MiB buffer before each timed call, so the operands and the output come
// from memory as in a training step, where the step's other tensors have pushed them out of the
// caches; warm (the default), repeated calls find them cached. On a 2-core VM with AMX the bf16
// products ran at 0.27-0.67x their warm rate cold (mlp.fc forward 1735 -> 469 GFLOP/s), the
// rates a step's own products reach (DNNL_VERBOSE over a step): writing the fp32 output costs
// what the product does.
//
// Shapes: a linear layer over B*T = 1024 rows: forward (x W^T), input gradient (dy W) and
// weight gradient (dy^T x), for qkv, the attention projection, the MLP and the logits; then
// 2048^3, the rate quoted as the GEMM peak.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

struct Linear {
  const char* name;
  int64_t in, out;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool cold = false;  // --cold: caches evicted before each timed call

// Writes one byte per cache line of a buffer larger than the caches the operands would sit in.
void EvictCaches() {
  static std::vector<char> junk(size_t{512} << 20, 1);
  for (size_t i = 0; i < junk.size(); i += 64) junk[i]++;
}

// Median seconds of `fn` over at least 5 calls and 0.3 s of calls, after two warm-up calls;
// with --cold, 5 calls, the caches evicted before each (not timed).
double Time(const std::function<void()>& fn) {
  fn();
  fn();
  std::vector<double> t;
  double timed = 0;
  while (t.size() < 5 || (timed < 0.3 && !cold)) {  // cold: 5 calls (each evicts 512 MiB)
    if (cold) EvictCaches();
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    timed += t.back();
  }
  return Median(t);
}

void Row(const char* layer, const char* pass, const GemmShape& s) {
  const size_t na = (s.trans_a ? s.k : s.m) * s.lda, nb = (s.trans_b ? s.n : s.k) * s.ldb;
  std::vector<float> a(na), b(nb), c(s.m * s.ldc, 0.f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  std::vector<uint16_t> a16(na), b16(nb);
  ConvertF32ToBf16(a.data(), a16.data(), static_cast<int64_t>(na));
  ConvertF32ToBf16(b.data(), b16.data(), static_cast<int64_t>(nb));
  const double flop = 2.0 * s.m * s.n * s.k;
  auto rate = [&](double sec) { return flop / sec / 1e9; };
  SetGemmLibrary(GemmLibrary::kOpenBlas);
  const double openblas = rate(Time([&] { Gemm(s, 1.f, a.data(), b.data(), 0.f, c.data()); }));
  SetGemmLibrary(GemmLibrary::kOneDnn);
  const double onednn = rate(Time([&] { Gemm(s, 1.f, a.data(), b.data(), 0.f, c.data()); }));
  const double native = rate(
      Time([&] { GemmBf16(s, 1.f, a16.data(), b16.data(), 0.f, c.data(), Bf16Gemm::kNative); }));
  const double widen = rate(
      Time([&] { GemmBf16(s, 1.f, a16.data(), b16.data(), 0.f, c.data(), Bf16Gemm::kWiden); }));
  std::printf("%-10s %-6s %5lld x %5lld x %5lld %10.1f %10.1f %10.1f %10.1f   %.2fx\n", layer, pass,
              static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
              openblas, onednn, native, widen, onednn / openblas);
}

void Shapes(const char* label, int64_t c, int64_t vocab, int64_t rows) {
  std::printf("\n%s (C=%lld, V=%lld, B*T=%lld)\n", label, static_cast<long long>(c),
              static_cast<long long>(vocab), static_cast<long long>(rows));
  const Linear layers[] = {{"qkv", c, 3 * c},
                           {"attn.proj", c, c},
                           {"mlp.fc", c, 4 * c},
                           {"mlp.proj", 4 * c, c},
                           {"logits", c, vocab}};
  for (const Linear& l : layers) {
    Row(l.name, "fwd", {false, true, rows, l.out, l.in, l.in, l.in, l.out});
    Row(l.name, "dgrad", {false, false, rows, l.in, l.out, l.out, l.in, l.in});
    Row(l.name, "wgrad", {true, false, l.out, l.in, rows, l.out, l.in, l.in});
  }
}

}  // namespace
}  // namespace ds::kernels::cpu

int main(int argc, char** argv) {
  int threads = 2;
  std::string shape = "all";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0)
      threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--shape") == 0)
      shape = argv[i + 1];
    else if (std::strcmp(argv[i], "--cold") == 0)
      ds::kernels::cpu::cold = std::atoi(argv[i + 1]) != 0;
  }
  omp_set_num_threads(threads);
  using namespace ds::kernels::cpu;
  std::printf("gemm_bench: %d threads, oneDNN ISA %s, native bf16 products: %s\n", threads,
              OneDnnIsa().c_str(), HasNativeBf16Gemm() ? "yes" : "no (bf16-onednn is emulated)");
  std::printf("GFLOP/s at the median call%s; bf16 inputs, fp32 accumulation and output\n",
              cold ? ", caches evicted before each (--cold)" : ", operands cached (warm)");
  std::printf("%-10s %-6s %-21s %10s %10s %10s %10s   %s\n", "layer", "pass", "m x n x k",
              "openblas", "onednn", "bf16-onednn", "bf16-widen", "onednn/openblas");
  if (shape == "small" || shape == "all") Shapes("L4 C256 (small)", 256, 8192, 1024);
  if (shape == "gpt2-small" || shape == "all") Shapes("GPT-2 124M", 768, 50257, 1024);
  std::printf("\n");
  Row("2048^3", "peak", {false, false, 2048, 2048, 2048, 2048, 2048, 2048});
  return 0;
}
