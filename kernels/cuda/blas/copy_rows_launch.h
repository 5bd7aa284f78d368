// Host launcher for copying a matrix between row strides (copy_rows.cu): the CUDA linear
// stages rows whose length is not a multiple of 16 bytes through padded ones (linear.cc).
// Plain CUDA, no ds headers. Asynchronous on `stream`; returns the launch error.
//
//   LaunchCopyRows(y, out, staging, padded, rows, out, 2, stream);  // unpad bf16 rows
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels::blas {

// dst[r * dst_ld + c] = src[r * src_ld + c] for r < rows, c < cols, elements of
// `element_bytes` (2 or 4). cudaMemcpy2DAsync does the same, but with rows only 2-byte
// aligned it ran at about 200 GB/s on an H200 (16.8 ms for GPT-2's LM head forward, five
// times its GEMM); this kernel reads and writes whole warps of consecutive elements.
// rows or cols == 0 launches nothing; negative sizes, ld < cols or another element size
// give cudaErrorInvalidValue.
cudaError_t LaunchCopyRows(void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t rows,
                           int64_t cols, int element_bytes, cudaStream_t stream);

}  // namespace ds::kernels::blas
