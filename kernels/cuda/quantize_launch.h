// Host launchers for ZeRO++'s block quantization on the device (quantize.cu): the same format
// and the same bits as the host's (runtime/core/quantize.h): one fp32 scale per block of `block`
// values, scale = max|x| / qmax, q = nearest-even(x * (qmax / max|x|)), int8 one per byte or
// int4 two per byte (even element low, two's complement). Plain CUDA, no ds headers.
// Asynchronous on `stream`; returns the launch error. n == 0 launches nothing.
//
//   LaunchBlockQuantize(x, n, 8, 2048, q, scales, stream);      // q: n bytes, scales: blocks
//   LaunchBlockDequantize(q, scales, n, 8, 2048, y, stream);
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels {

// bits 8 or 4 (block even for 4); anything else is cudaErrorInvalidValue.
cudaError_t LaunchBlockQuantize(const float* x, int64_t n, int bits, int64_t block, int8_t* q,
                                float* scales, cudaStream_t stream);
cudaError_t LaunchBlockQuantize(const __nv_bfloat16* x, int64_t n, int bits, int64_t block,
                                int8_t* q, float* scales, cudaStream_t stream);

cudaError_t LaunchBlockDequantize(const int8_t* q, const float* scales, int64_t n, int bits,
                                  int64_t block, float* y, cudaStream_t stream);
cudaError_t LaunchBlockDequantize(const int8_t* q, const float* scales, int64_t n, int bits,
                                  int64_t block, __nv_bfloat16* y, cudaStream_t stream);

}  // namespace ds::kernels
