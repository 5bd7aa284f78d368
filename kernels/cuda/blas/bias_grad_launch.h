// Host launcher for the bias gradient of a linear layer (bias_grad.cu). Plain CUDA, no ds
// headers, so both nvcc and the registry glue include it. Asynchronous on `stream`;
// returns the launch error without synchronizing.
//
//   DS_CUDA_RETURN_IF_ERROR(LaunchBiasGrad(dy, rows, cols, kBf16, db, stream));  // db += ...
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels::blas {

// Storage type of dy and db (compute is fp32).
enum class BiasGradType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// db[j] += sum_i dy[i * cols + j] for a row-major dy [rows, cols]: ACCUMULATES (see
// kernels/op.h), summed in fp32 in a fixed order (deterministic), rounded once into db.
// rows or cols == 0 launches nothing; negative sizes give cudaErrorInvalidValue.
cudaError_t LaunchBiasGrad(const void* dy, int64_t rows, int64_t cols, BiasGradType type, void* db,
                           cudaStream_t stream);

}  // namespace ds::kernels::blas
