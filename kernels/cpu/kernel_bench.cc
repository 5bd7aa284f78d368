// kernel_bench: times the CPU fp32 kernels that dominate a training step (linear and
// attention, forward and backward) and prints median and best ms, and GFLOP/s (at the
// median) from each OpDef's FLOP count.
//
//   bazel run //kernels/cpu:kernel_bench -- [--threads N] [--iters N] [--matmul bf16]
//
// --matmul bf16 runs the products as bf16 mixed precision does (OpArgs::matmul: bf16 inputs,
// fp32 accumulation; attention through attention_bf16.h where the CPU multiplies bf16).
//
// Shapes: B=4, D=64: C=256 H=4 at T 256 and 1024 (L4 C256), C=768 H=12 at T 256 (GPT-2 124M);
// linear is the qkv projection (C -> 3C) and the MLP up-projection (C -> 4C) over B*T rows.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "runtime/core/tensor.h"

namespace ds::kernels {
namespace {

struct Bench {
  std::string op;
  Attrs attrs;
  std::vector<TensorSpec> in;
};

// Owns every buffer of one op call and times forward / backward.
class Runner {
 public:
  Runner(const Bench& b, DType matmul) : bench_(b), def_(FindOp(b.op)) {
    kernel_ = FindKernel(b.op, Device::kCpu, DType::kF32);
    std::vector<TensorSpec> out;
    Status s = def_->infer(b.attrs, b.in, &out);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", b.op.c_str(), s.ToString().c_str());
      std::exit(1);
    }
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    args_.attrs = &bench_.attrs;
    args_.matmul = matmul;
    for (const TensorSpec& spec : b.in) {
      args_.in.push_back(Alloc(spec));
      for (int64_t i = 0; i < spec.numel(); ++i) args_.in.back().f32()[i] = dist(rng);
      args_.grad_in.push_back(Alloc(spec));
    }
    for (const TensorSpec& spec : out) {
      args_.out.push_back(Alloc(spec));
      args_.grad_out.push_back(Alloc(spec));
      for (int64_t i = 0; i < spec.numel(); ++i) args_.grad_out.back().f32()[i] = dist(rng);
    }
    if (def_->saved)
      for (const TensorSpec& spec : def_->saved(b.attrs, b.in)) args_.saved.push_back(Alloc(spec));
  }

  // Median and best milliseconds over `iters` calls after two warm-up calls.
  std::pair<double, double> Time(bool backward, int iters) {
    const KernelFn& fn = backward ? kernel_->backward : kernel_->forward;
    if (backward) Check(kernel_->forward(args_));
    std::vector<double> ms;
    for (int i = 0; i < iters + 2; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      Check(fn(args_));
      auto t1 = std::chrono::steady_clock::now();
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[0]};
  }

  double Flops(bool backward) const {
    return backward ? def_->backward_flops(bench_.attrs, bench_.in)
                    : def_->forward_flops(bench_.attrs, bench_.in);
  }

 private:
  Tensor Alloc(const TensorSpec& spec) {
    buffers_.push_back(Buffer::Allocate(std::max<size_t>(spec.nbytes(), 64)));
    return Tensor(buffers_.back().data(), spec.shape, spec.dtype);
  }
  static void Check(const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "kernel failed: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }

  Bench bench_;
  const OpDef* def_;
  const Kernel* kernel_;
  std::vector<Buffer> buffers_;
  OpArgs args_;
};

// (C, H, T): L4 C256's at two lengths, and GPT-2 124M's.
constexpr struct { int64_t c, h, t; } kShapes[] = {{256, 4, 256}, {256, 4, 1024}, {768, 12, 256}};

int Main(int argc, char** argv) {
  int iters = 10;
  DType matmul = DType::kF32;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads")) {
      const int n = std::atoi(argv[++i]);
      omp_set_num_threads(n);
      openblas_set_num_threads(n);
    } else if (!std::strcmp(argv[i], "--iters")) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--matmul")) {
      matmul = std::strcmp(argv[++i], "bf16") ? DType::kF32 : DType::kBF16;
    }
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("threads: omp %d, openblas %d; OpenBLAS core %s (OPENBLAS_CORETYPE=%s)\n",
              omp_get_max_threads(), openblas_get_num_threads(), openblas_get_corename(),
              coretype ? coretype : "unset");
  std::printf("products: %s\n", matmul == DType::kBF16 ? "bf16 (fp32 accumulation)" : "fp32");
  std::printf("%-36s %-9s %9s %9s %9s\n", "case", "pass", "median ms", "best ms", "GFLOP/s");
  const int64_t b = 4;
  for (const auto& [c, h, t] : kShapes) {
    Attrs heads;
    heads.SetInt("n_head", h);
    heads.SetInt("n_kv_head", h);
    const std::string shape = "B=4 T=" + std::to_string(t) + " C=" + std::to_string(c);
    const std::vector<std::pair<std::string, Bench>> cases = {
        {"linear C->3C " + shape,
         {"linear",
          {},
          {{{b, t, c}, DType::kF32}, {{3 * c, c}, DType::kF32}, {{3 * c}, DType::kF32}}}},
        {"linear C->4C " + shape,
         {"linear",
          {},
          {{{b, t, c}, DType::kF32}, {{4 * c, c}, DType::kF32}, {{4 * c}, DType::kF32}}}},
        {"attention H=" + std::to_string(h) + " D=64 " + shape,
         {"attention", heads, {{{b, t, 3 * c}, DType::kF32}}}},
    };
    for (const auto& [name, bench] : cases) {
      Runner runner(bench, matmul);
      for (bool backward : {false, true}) {
        const auto [median, best] = runner.Time(backward, iters);
        std::printf("%-36s %-9s %9.3f %9.3f %9.1f\n", name.c_str(),
                    backward ? "backward" : "forward", median, best,
                    runner.Flops(backward) / (median * 1e6));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace ds::kernels

int main(int argc, char** argv) { return ds::kernels::Main(argc, argv); }
