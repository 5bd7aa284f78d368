// Device helpers for the tensor-core attention kernels (nvcc only): cp.async copies into
// swizzled shared tiles, ldmatrix, and the bf16 mma.sync m16n8k16 with fp32 accumulation.
//
// Note [Fragment layouts]: for mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"),
// with g = lane / 4 and t = lane % 4, a thread holds
//   A (16 x 16, row-major): a0 = A[g][2t..2t+1],   a1 = A[g+8][2t..],
//                           a2 = A[g][2t+8..],     a3 = A[g+8][2t+8..]
//   B (16 x 8, "col"):      b0 = B[2t..2t+1][g],   b1 = B[2t+8..2t+9][g]
//   C (16 x 8, fp32):       c0, c1 = C[g][2t, 2t+1],   c2, c3 = C[g+8][2t, 2t+1]
// Two C tiles side by side (columns 8j and 8j+8) are exactly the A fragment of the 16 x 16
// block they form once packed to bf16: that is how P (and dS) feed the next product from
// registers. ldmatrix.x4 gives register r the 8 x 8 matrix whose row addresses lanes
// 8r..8r+7 supplied, thread `lane` holding row lane / 4, columns 2 (lane % 4) and + 1;
// with .trans the thread holds column lane / 4, rows 2 (lane % 4) and + 1 instead.
//
// Note [Swizzle]: a tile row of D bf16 is D / 8 chunks of 16 bytes. Chunk c of row r is
// stored at chunk position c ^ (r % 8), so the 8 rows one ldmatrix matrix reads (same
// logical chunk, consecutive rows) fall in 8 different bank groups: no bank conflicts.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels::attention::internal {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Element offset of (row, col) in a swizzled tile with `kCols` bf16 per row (Note [Swizzle]).
template <int kCols>
__device__ __forceinline__ int Swz(int row, int col) {
  return row * kCols + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// 16-byte asynchronous copy; when !valid the destination is zero-filled and nothing is read.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Copies rows [r0, r0 + kRows) of a matrix with `ld` elements per row (columns [0, kCols))
// into a swizzled tile; rows >= n_rows are zero-filled. All threads of the block take part.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void LoadTile(bf16* tile, const bf16* src, int64_t ld, int r0,
                                         int n_rows) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int c = i * kThreads + threadIdx.x;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const bool valid = r0 + row < n_rows;
    const bf16* g = src + (valid ? static_cast<int64_t>(r0 + row) * ld + chunk * 8 : 0);
    CpAsync16(tile + row * kCols + ((chunk ^ (row & 7)) << 3), g, valid);
  }
}

__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], const bf16* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], const bf16* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

// c += a . b (one m16n8k16 tile).
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as bf16x2, `lo` in the low half (the lower column index).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment of a 16 x 16 block from C tiles c_lo (columns 0-7) and c_hi (8-15).
__device__ __forceinline__ void CToA(uint32_t (&a)[4], const float (&c_lo)[4],
                                     const float (&c_hi)[4]) {
  a[0] = PackBf16(c_lo[0], c_lo[1]);
  a[1] = PackBf16(c_lo[2], c_lo[3]);
  a[2] = PackBf16(c_hi[0], c_hi[1]);
  a[3] = PackBf16(c_hi[2], c_hi[3]);
}

// Lane address helpers for ldmatrix.x4 over a 16 x 16 block at (r0, c0) of a tile.
// A operand, tile stored [row][k] (non-trans): matrices (r 0-7, c 0-7), (r 8-15, c 0-7),
// (r 0-7, c 8-15), (r 8-15, c 8-15) -> a0..a3.
__device__ __forceinline__ int ARow(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int ACol(int lane) { return (lane >> 4) * 8; }
// B operand for two n-tiles, tile stored [n][k] (non-trans): matrices (n 0-7, k 0-7),
// (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) -> b0, b1 of n-tile 0, b0, b1 of 1.
__device__ __forceinline__ int BnRow(int lane) { return (lane & 7) + (lane >> 4) * 8; }
__device__ __forceinline__ int BnCol(int lane) { return ((lane >> 3) & 1) * 8; }
// B operand for two n-tiles, tile stored [k][n] (.trans): matrices (k 0-7, n 0-7),
// (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) -> b0, b1 of n-tile 0, b0, b1 of 1.
__device__ __forceinline__ int BtRow(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int BtCol(int lane) { return (lane >> 4) * 8; }
// A operand, tile stored [k][row] (.trans): matrices (k 0-7, r 0-7) -> a0, (k 0-7, r 8-15)
// -> a1, (k 8-15, r 0-7) -> a2, (k 8-15, r 8-15) -> a3.
__device__ __forceinline__ int AtRow(int lane) { return (lane & 7) + (lane >> 4) * 8; }  // k
__device__ __forceinline__ int AtCol(int lane) { return ((lane >> 3) & 1) * 8; }         // row

}  // namespace ds::kernels::attention::internal
