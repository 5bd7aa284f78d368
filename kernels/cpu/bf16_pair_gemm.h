// Small bf16 matrix products on AVX512_BF16 (VDPBF16PS), for kernels whose operands sit in cache
// and are too small for a library call to pay: attention's fused path (attention_fused_bf16.cc)
// runs every per-head product through these.
//
//   C = alpha A B (+ C)      A [m, 2 kp] and B [2 kp, n] bf16, C [m, n] fp32, n % 16 == 0
//
// VDPBF16PS multiplies pairs: each fp32 lane adds a[2q] b[2q] + a[2q+1] b[2q+1]. So A is read as
// pairs of bf16 (one 32-bit word: element 2q in the low half), at any strides, which makes A^T
// of a pair-interleaved matrix free; B is read in the layout the instruction takes, one 32-bit
// word per (pair row q, column c) holding (B[2q][c], B[2q+1][c]) ("VNNI"). The packing helpers
// build that layout from plain bf16 rows. Accumulation is in fp32 registers, tiles of up to 4 rows
// by 64 columns.
//
// Callers check Bf16PairGemmHere() (the CPU has AVX512_BF16, as DS_CPU_ISA leaves it).
#pragma once

#include <cstdint>

namespace ds::kernels::cpu {

bool Bf16PairGemmHere();

// A(r, q), the pair (A[r][2q], A[r][2q+1]), is the 32-bit word p[r * row + q * pair].
struct PairRows {
  const uint32_t* p;
  int64_t row, pair;
};

// C[m, n] (row stride ldc) = alpha * A B, or += with accumulate. B: kp rows of ldb 32-bit words,
// pair row q at b + q * ldb. n a multiple of 16.
void Bf16PairGemm(int64_t m, int64_t n, int64_t kp, PairRows a, const uint32_t* b, int64_t ldb,
                  float* c, int64_t ldc, float alpha, bool accumulate);

// Plain bf16 rows x [rows, cols] (row stride ld) as B's layout: dst [(tp / 2), cols] with word
// (q, c) = (x[2q][c], x[2q+1][c]); rows past `rows` (up to tp, even) are 0. cols % 16 == 0.
void PackRowPairs(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, int64_t tp,
                  uint32_t* dst);
// The same rows as B's layout for x^T: dst [cols / 2, tp] with word (p, r) = (x[r][2p],
// x[r][2p+1]), the 32-bit words of x transposed; columns r past `rows` are 0. cols and ld even,
// tp % 16 == 0.
void PackPairColumns(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, int64_t tp,
                     uint32_t* dst);
}  // namespace ds::kernels::cpu
