// Batched bf16 matrix products over strided views, for the products attention runs per head:
// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for every batch index i = (i0, i1, i2), A and B in
// bf16 (a batch dim of size 1 in B broadcasts over A's and C's), C in fp32, accumulated in fp32,
// through one oneDNN matmul over all of them. Each operand is a view: its sizes and strides in
// elements, so a transpose is a view with its strides swapped and a head of a packed tensor is a
// view into it; nothing is copied.
//
//   MatrixView q{{B, H, 1}, {H * T * d, T * d, 0}, m, d, d, 1};  // Q rows [i0, i0 + m) per head
//   BatchedGemmBf16(q, qp + i0 * d, kt, kp, s, scores, scale, 0.f);
//
// Primitives are made once per shape (PrepareBatchedGemmBf16 at plan time, or on first use) and
// cached for the process. CPUs whose oneDNN has no bf16 matmul: HasNativeBf16Gemm() in gemm.h says
// so; callers keep their fp32 path there.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"

namespace ds::kernels::cpu {

struct MatrixView {
  int64_t batch[3] = {1, 1, 1};         // batch sizes; 1 in B broadcasts
  int64_t batch_stride[3] = {0, 0, 0};  // elements between batch entries
  int64_t rows = 0, cols = 0;           // of the matrix as the product uses it (op applied)
  int64_t row_stride = 0, col_stride = 1;
};

Status PrepareBatchedGemmBf16(const MatrixView& a, const MatrixView& b, const MatrixView& c,
                              float alpha, float beta);
// Aborts on a shape oneDNN refuses (PrepareBatchedGemmBf16 reports it as an error instead).
void BatchedGemmBf16(const MatrixView& a, const uint16_t* pa, const MatrixView& b,
                     const uint16_t* pb, const MatrixView& c, float* pc, float alpha, float beta);
// Primitives made so far (a test reads it around a step: none may be made inside one).
int64_t BatchedGemmPrimitivesMade();

}  // namespace ds::kernels::cpu
