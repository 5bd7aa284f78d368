// C[m, n] = alpha A B^T + beta C for 2 to 8 rows of A and B [n, k] row-major (a batched decode
// step's linears: B is a weight, streamed from memory once per step). sgemm packs B first,
// which for so few rows costs more than the products, and sgemv reads B once per row.
//
// With AVX-512 two rows of B at a time against the rows of A four at a time (8 accumulators in
// registers), the later groups reading those rows of B from L1, while the next two rows are
// prefetched into L2: each row of B is read from memory once, its products computed while the
// next ones stream in (GPT-2 124M batch-8 decode: 171 -> 293 tokens/s here). Elsewhere (AVX2)
// rows of B four at a time against rows of A two at a time.
#pragma once

#include <cstdint>

namespace ds::kernels::cpu {

void FewRowsGemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Whether the AVX-512 kernel runs here: then it also beats OpenBLAS's sgemv for one row
// (prefetching the next rows of B), about 10% on GPT-2's decode here.
bool FewRowsVectorized();

}  // namespace ds::kernels::cpu
