// Row-major GEMM through column-major cuBLAS.
//
// Note [Row-major through cuBLAS]: a row-major [r, c] matrix is the same memory as a
// column-major [c, r] one, i.e. its transpose. So row-major C = op(A) op(B) is
// column-major C^T = op(B)^T op(A)^T: call cublasSgemm with the operands swapped
// (B first), dimensions (n, m, k), and the same transpose flags. Leading dimensions are
// the row lengths of the stored matrices: A [m, k] -> k, A^T stored [k, m] -> m; likewise
// for B; C [m, n] -> n.
#include "kernels/cuda/gemm.h"

#include <climits>
#include <string>
#include <utility>

namespace ds::kernels {
namespace {

#define DS_CUBLAS_RETURN_IF_ERROR(call)                                    \
  do {                                                                     \
    const cublasStatus_t _ds_cublas_status = (call);                       \
    if (_ds_cublas_status != CUBLAS_STATUS_SUCCESS)                        \
      return CublasToStatus(_ds_cublas_status, #call, __FILE__, __LINE__); \
  } while (0)

StatusCode CodeFor(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return StatusCode::kUnavailable;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return StatusCode::kUnimplemented;
    default:
      return StatusCode::kInternal;
  }
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

Status CublasToStatus(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return OkStatus();
  std::string msg;
  if (file != nullptr) msg += std::string(file) + ":" + std::to_string(line) + ": ";
  if (expr != nullptr) msg += std::string(expr) + ": ";
  msg += std::string(cublasGetStatusName(status)) + " (" +
         std::to_string(static_cast<int>(status)) + "): " + cublasGetStatusString(status);
  return Status(CodeFor(status), std::move(msg));
}

StatusOr<CublasHandle> CublasHandle::Create() {
  cublasHandle_t handle = nullptr;
  DS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  CublasHandle owned(handle);
  DS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  return owned;
}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
}

Status CudaGemmF32(const CublasHandle& handle, cudaStream_t stream, const GemmParams& p,
                   const float* a, const float* b, float* c) {
  if (!FitsInt(p.m) || !FitsInt(p.n) || !FitsInt(p.k)) {
    return InvalidArgumentError(
        "CudaGemmF32: dimensions must be in [0, INT32_MAX], got m=" + std::to_string(p.m) +
        " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  }
  if (p.m == 0 || p.n == 0) return OkStatus();
  if (c == nullptr || (p.k > 0 && (a == nullptr || b == nullptr))) {
    return InvalidArgumentError("CudaGemmF32: null device pointer");
  }
  if (handle.get() == nullptr) return FailedPreconditionError("CudaGemmF32: moved-from handle");
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  // See Note [Row-major through cuBLAS]. With k == 0 cuBLAS computes C = beta * C; the
  // leading dimensions must still be >= 1.
  const int lda = p.trans_a ? m : (k > 0 ? k : 1);
  const int ldb = p.trans_b ? (k > 0 ? k : 1) : n;
  DS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle.get(), stream));
  DS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle.get(), p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &p.alpha, b,
                                        ldb, a, lda, &p.beta, c, n));
  return OkStatus();
}

}  // namespace ds::kernels
