// The host optimizer's inner loops, vectorised: AdamW / Adam and SGD over a run of flat
// elements, fused (read the gradient in fp32, bf16 or fp16, update master and moments, write
// the 16-bit model copy, in one pass). AVX-512 (16 lanes) or AVX2 + F16C (8 lanes) chosen once
// from the CPU at run time, a scalar loop otherwise. Every path does the same operations in
// the same order (fused multiply-adds where the formulas below say fma, IEEE sqrt and divide,
// the same round-to-nearest-even 16-bit conversions), so all three give the same bits.
//
// Used by zero/optimizer.cc (the host Optimizer) and optimizer_kernels.cc (the host
// OptimizerKernels), each on one thread's share of a parameter run.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"

namespace ds {

// One Adam / AdamW update of n elements (torch.optim.AdamW's arithmetic):
//   g' = fma(g, grad_scale, l2 p);  m = fma(b1, m, (1 - b1) g');  v = fma(b2, v, ((1 - b2) g') g')
//   p = p decay - (step_size m) / fma(sqrt(v), inv_sqrt_bc2, eps)
// These are the roundings the scalar loop this replaced had (GCC contracted it so), and the
// SGD ones below too: the results are those of the earlier optimizer, bit for bit.
// `model` (nullable) receives p in `gt`.
struct AdamRun {
  float* p;
  float* m;
  float* v;
  const void* g;
  void* model;
  DType gt;
  int64_t n;
  float grad_scale, l2, b1, b2, eps, step_size, inv_sqrt_bc2, decay;
};
void AdamUpdate(const AdamRun& r);

// One SGD update (dampening 0): g' = fma(g, grad_scale, wd p); with momentum
// buf = first ? g' : fma(mu, buf, g') and g' = buf; p = fma(-lr, g', p).
struct SgdRun {
  float* p;
  float* buf;  // nullable: no momentum
  const void* g;
  void* model;
  DType gt;
  int64_t n;
  float grad_scale, wd, mu, lr;
  bool first;
};
void SgdUpdate(const SgdRun& r);

// The same over the OpenMP threads: runs above 32768 elements are cut into one contiguous
// share per thread (elementwise, so the bits do not depend on the split).
void AdamUpdateThreaded(const AdamRun& r);
void SgdUpdateThreaded(const SgdRun& r);

// "avx512", "avx2" or "scalar": what AdamUpdate / SgdUpdate run on this CPU.
const char* CpuAdamIsa();

}  // namespace ds
