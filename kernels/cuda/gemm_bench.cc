// bf16 GEMM throughput through cuBLASLt (and, beside it, cublasGemmEx): D = A^T B ("TN",
// column-major), bf16 inputs and output, fp32 accumulation, the shape of a transformer's linear
// layers.
//
// Standalone on purpose: only the CUDA runtime and cuBLASLt, so tools/gpu-check.sh can
// build it with g++ alone when Bazel is missing:
//   g++ -std=c++17 -O2 -I/usr/local/cuda/include kernels/cuda/gemm_bench.cc
//       -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudart -o gemm_bench
//
// Usage: gemm_bench [--m M] [--n N] [--k K] [--iters I] [--warmup W]   (default 8192^3)
// Prints one line "RESULT gemm_bf16 m=.. n=.. k=.. ms=.. tflops=.." that scripts parse.
// FLOPs counted as 2*m*n*k (multiply-add = 2). Exit codes: 0 ok, 77 no GPU (skipped),
// 1 error, 2 bad arguments, 3 the result failed its spot check (then no RESULT line).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define BENCH_CUDA(call)                                                                \
  do {                                                                                  \
    const cudaError_t e = (call);                                                       \
    if (e != cudaSuccess) {                                                             \
      std::fprintf(stderr, "gemm_bench: %s: %s (%d): %s\n", #call, cudaGetErrorName(e), \
                   static_cast<int>(e), cudaGetErrorString(e));                         \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

#define BENCH_CUBLAS(call)                                                                    \
  do {                                                                                        \
    const cublasStatus_t s = (call);                                                          \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                         \
      std::fprintf(stderr, "gemm_bench: %s: cuBLAS status %d\n", #call, static_cast<int>(s)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// bf16 bits <-> float (round to nearest even; inputs here are finite).
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Deterministic values in [-1, 1): realistic bit patterns (zeros would flatter the power
// draw and so the clock).
std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = ToBf16(static_cast<float>((s >> 40) * (2.0 / (1ull << 24)) - 1.0));
  }
  return v;
}

int64_t ParseFlag(int argc, char** argv, const char* name, int64_t dflt) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t m = ParseFlag(argc, argv, "--m", 8192);
  const int64_t n = ParseFlag(argc, argv, "--n", 8192);
  const int64_t k = ParseFlag(argc, argv, "--k", 8192);
  const int iters = static_cast<int>(ParseFlag(argc, argv, "--iters", 50));
  const int warmup = static_cast<int>(ParseFlag(argc, argv, "--warmup", 10));
  if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || iters <= 0 ||
      warmup < 0) {
    std::fprintf(stderr, "gemm_bench: bad arguments\n");
    return 2;
  }

  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe == cudaErrorInsufficientDriver || probe == cudaErrorNoDevice ||
      (probe == cudaSuccess && devices == 0)) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s)\n", cudaGetErrorName(probe));
    return 77;
  }
  BENCH_CUDA(probe);
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("gemm_bench: device 0: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);

  // Column-major: A stored k x m (used transposed), B k x n, D m x n.
  const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(k) * m, 1);
  const std::vector<uint16_t> b = RandomBf16(static_cast<size_t>(k) * n, 2);
  void *da = nullptr, *db = nullptr, *dd = nullptr, *workspace = nullptr;
  const size_t workspace_bytes = size_t{64} << 20;
  BENCH_CUDA(cudaMalloc(&da, a.size() * 2));
  BENCH_CUDA(cudaMalloc(&db, b.size() * 2));
  BENCH_CUDA(cudaMalloc(&dd, static_cast<size_t>(m) * n * 2));
  BENCH_CUDA(cudaMalloc(&workspace, workspace_bytes));
  BENCH_CUDA(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  cublasLtHandle_t lt;
  BENCH_CUBLAS(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  BENCH_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  BENCH_CUBLAS(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  BENCH_CUBLAS(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  cublasLtMatrixLayout_t la, lb, ld;
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t pref;
  BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes;
  BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  BENCH_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heuristic, &found));
  if (found == 0) {
    std::fprintf(stderr, "gemm_bench: cuBLASLt found no algorithm\n");
    return 1;
  }

  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    BENCH_CUBLAS(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld,
                                &heuristic.algo, workspace, workspace_bytes, stream));
  };
  for (int i = 0; i < warmup; ++i) run();
  BENCH_CUDA(cudaStreamSynchronize(stream));

  // Five timed batches; report the median batch (robust to one slow batch) and the best.
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  auto time_batches = [&](auto&& fn) {
    std::vector<float> batch_ms;
    for (int rep = 0; rep < 5; ++rep) {
      BENCH_CUDA(cudaEventRecord(start, stream));
      for (int i = 0; i < iters; ++i) fn();
      BENCH_CUDA(cudaEventRecord(stop, stream));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0.0f;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      batch_ms.push_back(ms / iters);
    }
    BENCH_CUDA(cudaGetLastError());
    std::sort(batch_ms.begin(), batch_ms.end());
    return batch_ms;
  };
  const std::vector<float> lt_ms = time_batches(run);
  const double median_ms = lt_ms[lt_ms.size() / 2], best_ms = lt_ms.front();

  // The same product through cuBLAS's classic API (cublasGemmEx picks its own algorithm),
  // so the table shows whether the Lt path loses anything against it.
  cublasHandle_t blas;
  BENCH_CUBLAS(cublasCreate(&blas));
  BENCH_CUBLAS(cublasSetStream(blas, stream));
  auto run_blas = [&] {
    BENCH_CUBLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                              static_cast<int>(n), static_cast<int>(k), &alpha, da, CUDA_R_16BF,
                              static_cast<int>(k), db, CUDA_R_16BF, static_cast<int>(k), &beta, dd,
                              CUDA_R_16BF, static_cast<int>(m), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < warmup; ++i) run_blas();
  const std::vector<float> blas_ms = time_batches(run_blas);
  const double blas_median_ms = blas_ms[blas_ms.size() / 2];
  cublasDestroy(blas);
  const double flops = 2.0 * m * n * k;

  // Spot check 16 entries of D against a CPU dot product, so a GEMM that silently did
  // nothing cannot report a throughput.
  run();  // D from the Lt path again: that is the one checked
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint16_t> d(static_cast<size_t>(m) * n);
  BENCH_CUDA(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int s = 0; s < 16; ++s) {
    const int64_t i = (s * 2654435761ll) % m, j = (s * 40503ll + 7) % n;
    double ref = 0.0;
    for (int64_t l = 0; l < k; ++l) ref += double(FromBf16(a[i * k + l])) * FromBf16(b[j * k + l]);
    const double got = FromBf16(d[j * m + i]);
    // bf16 output rounds to 2^-9 relative; fp32 accumulation adds far less.
    if (std::fabs(got - ref) > 1e-2 * std::fabs(ref) + 1e-3 * std::sqrt(double(k))) {
      std::fprintf(stderr, "gemm_bench: D[%lld,%lld] = %g, CPU %g\n", (long long)i, (long long)j,
                   got, ref);
      ++bad;
    }
  }
  if (bad > 0) {
    std::fprintf(stderr, "gemm_bench: %d of 16 spot checks failed\n", bad);
    return 3;
  }
  std::printf(
      "gemm_bench: bf16 TN m=%lld n=%lld k=%lld: median %.3f ms (%.1f TFLOP/s), best "
      "%.3f ms (%.1f TFLOP/s), %d iters x 5\n",
      (long long)m, (long long)n, (long long)k, median_ms, flops / median_ms * 1e-9, best_ms,
      flops / best_ms * 1e-9, iters);
  std::printf("gemm_bench: the same through cublasGemmEx: median %.3f ms (%.1f TFLOP/s)\n",
              blas_median_ms, flops / blas_median_ms * 1e-9);
  std::printf("RESULT gemm_bf16 m=%lld n=%lld k=%lld ms=%.4f tflops=%.1f cublas_tflops=%.1f\n",
              (long long)m, (long long)n, (long long)k, median_ms, flops / median_ms * 1e-9,
              flops / blas_median_ms * 1e-9);

  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  cudaFree(workspace);
  return 0;
}
