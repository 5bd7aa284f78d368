// The row work of attention's fused bf16 path (attention_fused_bf16.cc) on 16 lanes: the
// softmax of a block's score rows and its gradient, written straight into the bf16 layouts the
// next products read (bf16_pair_gemm.h). One pass per row and no call per 16 values: at GPT-2's
// 64-wide heads a block's rows are 32 to 256 values, where a call per row and per step cost as
// much as the products. AVX-512 only (the path runs where the
// CPU has AVX512_BF16). Internal to the fused path.
#pragma once

#include <cstdint>

namespace ds::kernels::cpu::fused_rows {

// s[0, n): scaled scores of a query row that sees n keys. Writes p[0, nk) = softmax(s) rounded to
// bf16 (0 past n; nk % 16 == 0) and returns the log-sum-exp. s is scratch afterwards.
float SoftmaxRow(float* s, int64_t n, int64_t nk, uint16_t* p);

// Backward for the rows 2q (r0) and 2q + 1 (r1; nullptr past the block's last row) of a block,
// each seeing its n keys: P = exp(s - lse), dS = P (dp - dot); written as dS plain bf16 (each
// row's ds, nk long) and as word row q of P's and dS's row pairs (p_pairs, ds_pairs: (row 2q,
// row 2q + 1) per column), all 0 past each row's keys.
struct GradRow {
  const float *s, *dp;
  int64_t n;
  float lse, dot;
  uint16_t* ds;
};
void SoftmaxGradRowPair(const GradRow& r0, const GradRow* r1, int64_t nk, uint32_t* p_pairs,
                        uint32_t* ds_pairs);

// sum_j a[j] b[j] over n % 16 == 0 values, a in bf16.
float DotBf16(const uint16_t* a, const float* b, int64_t n);

}  // namespace ds::kernels::cpu::fused_rows
