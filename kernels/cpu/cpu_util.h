// Helpers shared by the CPU fp32 kernels (kernels/cpu/*.cc only; not a public API):
// OpenMP parallel-for, row-major sgemm, a vectorized exp (shape checks: kernels/shape_check.h) and
// the counter-based hash dropout uses.
//
// Note [One thread pool]
// Every kernel runs its parallel work on the OpenMP pool (sized by the runtime with
// omp_set_num_threads), GEMMs included: ParallelSgemm splits C across OpenMP threads and
// each piece is a single-threaded OpenBLAS call (BlasSingleThreadScope). With OpenBLAS
// running its own pool next to OpenMP's, each pool's idle threads spin while the other
// works: on 2 cores, linear's median time was 1.3-2.5x higher (B=4, T=256 and 1024, C=256;
// 40 alternating runs of kernel_bench), attention unchanged.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/op.h"
#include "kernels/shape_check.h"
#include "runtime/base/status.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/cpu_isa.h"

namespace ds::kernels::cpu {

// ---------------------------------------------------------------------------------------
// Parallel loops.

// How many threads a loop over n items should use so each gets at least `grain` items
// (1 inside an existing parallel region).
inline int PlannedThreads(int64_t n, int64_t grain) {
  if (n <= 0 || omp_in_parallel()) return 1;
  const int64_t by_size = n / std::max<int64_t>(grain, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), by_size)));
}

// Splits [0, n) into `chunks` contiguous ranges, run as fn(chunk, begin, end) on up to
// `chunks` OpenMP threads. Chunk boundaries depend only on (n, chunks), so per-chunk
// partial sums reduce in a fixed order.
template <typename Fn>
void ParallelChunks(int64_t n, int chunks, const Fn& fn) {
  if (n <= 0) return;
  if (chunks <= 1) {
    fn(0, int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) fn(c, begin, end);
  }
}

// Calls fn(begin, end) over contiguous chunks of [0, n), one per OpenMP thread, or once
// on the calling thread when n < 2 * grain (small tensors are not worth a fork).
template <typename Fn>
void ParallelFor(int64_t n, int64_t grain, const Fn& fn) {
  ParallelChunks(n, PlannedThreads(n, grain),
                 [&](int, int64_t begin, int64_t end) { fn(begin, end); });
}

// Grain sizes in elements: below these a loop stays on one thread.
constexpr int64_t kElementwiseGrain = 1 << 15;
// Elementwise kernels that call ExpArray work through stack chunks of this many floats.
constexpr int64_t kChunk = 256;

// A per-thread float scratch buffer that grows and never shrinks (no per-call allocation
// once warm). `slot` (0-3) separates buffers a kernel needs at the same time.
float* ThreadScratch(int slot, size_t floats);

// ---------------------------------------------------------------------------------------
// GEMM: C = alpha * op(A) op(B) + beta * C, all row-major with explicit leading
// dimensions (row strides), so strided views into packed tensors need no copy.
// op(A) is [m, k], op(B) is [k, n], C is [m, n]. Nothing happens when m or n is 0;
// k == 0 leaves beta * C.
// m == 1 (a single row, as a decode step's linears) goes to OpenBLAS's sgemv, which streams
// B at several times the rate sgemm reaches for one row; 2-8 rows against a transposed B (a
// batched decode step) to a kernel that reads each row of B once for all of them.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Sgemm on the OpenMP pool: C is cut into row panels (or column panels when n > m), one
// per thread, each a single-threaded sgemm. Small products run on the calling thread.
// See Note [One thread pool].
void ParallelSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);

// While alive, OpenBLAS runs each call on the calling thread; restores the previous
// thread count on destruction. For sgemm calls issued from inside OpenMP regions.
// OpenBLAS's thread count is process-wide: create the scope outside the parallel region
// (inside one it does nothing), and note that a GEMM another thread issues meanwhile also
// runs single-threaded.
class BlasSingleThreadScope {
 public:
  BlasSingleThreadScope();
  ~BlasSingleThreadScope();
  BlasSingleThreadScope(const BlasSingleThreadScope&) = delete;
  BlasSingleThreadScope& operator=(const BlasSingleThreadScope&) = delete;

 private:
  int saved_threads_;
};

// Whether the 16-lane paths (exp, FewRowsGemm, the bf16 activations) may run: the CPU has
// AVX-512 and DS_CPU_ISA does not cap it (runtime/core/cpu_isa.h); the build targets AVX2.
using ::ds::CpuHasAvx512;

// ---------------------------------------------------------------------------------------
// Math.

// y[i] = exp(x[i]) for n elements (x == y allowed). A polynomial (Cephes) on 16 lanes with
// AVX-512, 8 with AVX2, the same bits either way; within 2 ulp over the fp32 range; inputs
// below -87.3 give ~1e-38, NaN stays NaN.
void ExpArray(const float* x, float* y, int64_t n);

// y[i] = exp(x[i] - shift) for n elements (x == y allowed); returns the sum of the y[i]
// (fp32, lane-wise partial sums). The softmax inner loop.
float ExpShiftSum(const float* x, float* y, int64_t n, float shift);
// ExpShiftSum past its 16-lane loop: x[i, n) (i counts the elements that loop took: a multiple
// of 16, or 0 without AVX-512) added into *sum in ExpShiftSum's order. For loops that ran the
// 16-lane part on other storage (bf16 rows) and want ExpShiftSum's bits for the rest.
void ExpShiftSumRest(const float* x, float* y, int64_t i, int64_t n, float shift, float* sum);

// max over x[0, n) (n >= 1).
float MaxArray(const float* x, int64_t n);

// ---------------------------------------------------------------------------------------
// Dropout's counter-based random stream: a pure function of (seed, index).
inline uint64_t SplitMix64(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Where token r = b T + t of a [B, T] batch sits, for position_embedding and rope: at
// positions[r] (an int32 [B, T] input: generation's KV cache), at t - pad[b] (an int32 [B] input:
// a left-padded batch; its pad tokens at 0), or at offset + t.
struct TokenPositions {
  const int32_t* positions = nullptr;
  const int32_t* pad = nullptr;
  int64_t seq = 1, offset = 0;
  TokenPositions(const Tensor* extra, int64_t seq_len, int64_t first)
      : seq(seq_len), offset(first) {
    if (extra && extra->rank() == 1) pad = extra->i32();
    if (extra && extra->rank() == 2) positions = extra->i32();
  }
  int64_t operator()(int64_t r) const {
    if (positions) return positions[r];
    const int64_t t = offset + r % seq;
    return pad ? std::max<int64_t>(0, t - pad[r / seq]) : t;
  }
};

}  // namespace ds::kernels::cpu
