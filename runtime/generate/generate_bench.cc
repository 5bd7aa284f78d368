// generate_bench: ds-runtime's side of tools/bench/generate_vs_transformers.sh. Loads a Hugging
// Face directory (LoadHfModel), measures the machine's memory read bandwidth (an OpenMP sum
// over 1 GiB, the threads generation uses, best of 5), then times prefill of one prompt and
// greedy decode at each batch size (the same prompt in every row), and prints one line per
// figure with the bandwidth bound of decode: bytes read per step (every parameter, fp32, and
// the KV cache filled so far, mean over the steps) / bandwidth.
//   generate_bench --hf DIR --prompt_len 128 --new_tokens 128 --batches 1,8 --rounds 3
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "runtime/core/tensor.h"
#include "runtime/generate/generator.h"
#include "runtime/generate/hf_model.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Read bandwidth in bytes/s: the best of `rounds` sums over `bytes` of floats.
double ReadBandwidth(size_t bytes, int rounds) {
  const size_t n = bytes / sizeof(float);
  ds::Buffer buffer = ds::Buffer::Allocate(bytes);  // huge pages, as the ParamStore's weights
  float* a = static_cast<float*>(buffer.data());
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i & 7);
  double best = 0, sink = 0;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = Now();
    float sum = 0;  // vectorized float lanes: the loads, not the adds, set the pace
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
    for (size_t i = 0; i < n; ++i) sum += a[i];
    best = std::max(best, bytes / (Now() - t0));
    sink += sum;
  }
  if (sink < 0) std::printf("%f\n", sink);
  return best;
}

// The rate a 1 x K by K x N GEMV (what decode's linears are) streams a 1 GiB fp32 matrix through
// the same BLAS and threads, best of `rounds`. Both probes read huge pages (ds::Buffer), as the
// weights do: on this VM 4 KiB pages read about a fifth slower.
double GemvBandwidth(size_t bytes, int rounds) {
  const int64_t k = 4096, n = static_cast<int64_t>(bytes / sizeof(float)) / k;
  ds::Buffer buffer = ds::Buffer::Allocate(static_cast<size_t>(n * k) * sizeof(float));
  float* w = static_cast<float*>(buffer.data());
  std::fill(w, w + n * k, 0.5f);
  std::vector<float> x(k, 1.0f), y(n);
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = Now();
    ds::kernels::cpu::ParallelSgemm(false, true, 1, n, k, 1.f, x.data(), k, w, k, 0.f, y.data(), n);
    best = std::max(best, n * k * sizeof(float) / (Now() - t0));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string hf;
  int prompt_len = 128, new_tokens = 128, rounds = 3;
  std::vector<int> batches = {1, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--hf") hf = v;
    if (k == "--prompt_len") prompt_len = std::atoi(v.c_str());
    if (k == "--new_tokens") new_tokens = std::atoi(v.c_str());
    if (k == "--rounds") rounds = std::atoi(v.c_str());
    if (k == "--batches") {
      batches.clear();
      for (size_t at = 0; at < v.size();) {
        batches.push_back(std::atoi(v.c_str() + at));
        at = v.find(',', at);
        at = at == std::string::npos ? v.size() : at + 1;
      }
    }
  }
  auto model = ds::generate::LoadHfModel(hf);
  if (!model.ok()) {
    std::fprintf(stderr, "generate_bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const double sum_bw = ReadBandwidth(size_t{1} << 30, 5);
  const double gemv_bw = GemvBandwidth(size_t{1} << 30, 5);
  const double bw = std::max(sum_bw, gemv_bw);
  std::printf("threads %d\nbandwidth %.3f GB/s (a vectorized sum %.3f, a 1 GiB GEMV %.3f)\n",
              omp_get_max_threads(), bw / 1e9, sum_bw / 1e9, gemv_bw / 1e9);
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  auto gen = ds::generate::Generator::Create(model->graph, model->params.get(),
                                             {max_batch, prompt_len + new_tokens});
  if (!gen.ok()) {
    std::fprintf(stderr, "generate_bench: %s\n", gen.status().ToString().c_str());
    return 1;
  }
  std::vector<int32_t> prompt(prompt_len);
  for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 7919 + 13) % 50000 % (*gen)->vocab();
  const int64_t params = model->params->num_parameters();
  const int64_t cache_per_token = (*gen)->info().cache_bytes_per_sequence() / (*gen)->max_len();
  for (int b : batches) {
    double best_prefill = 0, best_decode = 0;
    for (int r = 0; r < rounds; ++r) {
      ds::generate::GenerateRequest req;
      req.prompts.assign(b, prompt);
      req.max_new_tokens = new_tokens;
      auto out = (*gen)->Generate(req);
      if (!out.ok()) {
        std::fprintf(stderr, "generate_bench: %s\n", out.status().ToString().c_str());
        return 1;
      }
      best_prefill = std::max(best_prefill, out->prefill_tokens / (out->prefill_ms / 1e3));
      best_decode = std::max(best_decode, out->decode_tokens / (out->decode_ms / 1e3));
    }
    // A decode step reads every parameter once for the batch and each sequence's cache so far.
    const double cache = b * cache_per_token * (prompt_len + new_tokens / 2.0);
    const double step_bytes = 4.0 * params + cache;
    const double bound = bw / step_bytes * b;  // tokens/s
    std::printf(
        "batch %d prefill %.1f tok/s decode %.2f tok/s bound %.2f tok/s (%.1f MB per step)\n", b,
        best_prefill, best_decode, bound, step_bytes / 1e6);
  }
  return 0;
}
