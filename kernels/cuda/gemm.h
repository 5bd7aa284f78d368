// fp32 GEMM on the GPU through cuBLAS, row-major like the rest of ds-runtime.
//
// A CublasHandle is not thread-safe (cublasSetStream changes it): one per thread or per
// stream owner (the executor keeps one per compute stream). Creating one needs a GPU;
// without one Create() returns Unavailable.
//
//   DS_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create());
//   GemmParams p;  p.m = 64;  p.n = 32;  p.k = 128;
//   DS_RETURN_IF_ERROR(CudaGemmF32(cublas, stream, p, a, b, c));  // c = a @ b
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/base/status.h"

namespace ds::kernels {

// Owns a cublasHandle_t. Move-only; the destructor destroys it.
class CublasHandle {
 public:
  // Creates a handle on the current device, math mode CUBLAS_DEFAULT_MATH (true fp32:
  // no TF32 unless the NVIDIA_TF32_OVERRIDE environment variable forces it).
  static StatusOr<CublasHandle> Create();

  CublasHandle(CublasHandle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle();

  cublasHandle_t get() const { return handle_; }

 private:
  explicit CublasHandle(cublasHandle_t handle) : handle_(handle) {}
  cublasHandle_t handle_ = nullptr;
};

// Shape and scaling of C = alpha * op(A) @ op(B) + beta * C, all row-major:
// op(A) is [m, k] (A stored [m, k], or [k, m] when trans_a), op(B) is [k, n] (B stored
// [k, n], or [n, k] when trans_b), C is [m, n]. Leading dimensions are dense.
struct GemmParams {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 1.0f accumulates into C (backward passes)
};

// Enqueues the GEMM on `stream` (asynchronous; pointers are device memory). Errors:
// InvalidArgument for negative or > INT32_MAX dimensions or null pointers with a non-empty
// shape; cuBLAS failures mapped by CublasToStatus. An empty C (m or n == 0) is a no-op.
Status CudaGemmF32(const CublasHandle& handle, cudaStream_t stream, const GemmParams& p,
                   const float* a, const float* b, float* c);

// cuBLAS status -> Status with location and cuBLAS's own name and text. NOT_INITIALIZED
// (what cublasCreate returns without a driver) -> Unavailable, ALLOC_FAILED ->
// ResourceExhausted, INVALID_VALUE -> InvalidArgument, NOT_SUPPORTED -> Unimplemented,
// the rest -> Internal.
Status CublasToStatus(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace ds::kernels
