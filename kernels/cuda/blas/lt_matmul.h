// Row-major GEMMs through cuBLASLt, with fused epilogues and a per-problem algorithm cache.
//
//   D [m, n] = alpha * op(A) [m, k] . op(B) [k, n] + beta * C   (C is D: beta = 1 accumulates)
//   then the epilogue, applied per element of D (bias is indexed by the column j < n).
//
// Storage types: fp32, bf16 or fp16, the same for A, B, D, bias and aux; compute and
// scaling in fp32. fp32 is true fp32 unless `allow_tf32` asks for TF32 tensor cores.
// A stored matrix's row length in memory (its leading dimension) is its column count unless
// lda / ldb / ldd say more: a row padded to 16 bytes keeps cuBLASLt on its tensor-core
// kernels (the CUDA linear stages rows of odd length, such as a 50257-word vocabulary,
// through such a padded buffer: LtMatmul::Staging).
//
// LtMatmul is thread-safe. It owns one cuBLASLt handle per device, one workspace per
// (device, stream) (so concurrent streams never share scratch), and the algorithm cache:
// each distinct MatmulKey asks cublasLtMatmulAlgoGetHeuristic once, later calls reuse the
// answer. Workspaces are allocated on first use of a stream and kept for the life of the
// LtMatmul (no allocation in the step loop).
//
//   MatmulArgs g;  g.m = tokens;  g.n = out;  g.k = in;  g.trans_b = true;
//   g.dtype = DType::kBF16;  g.epilogue = Epilogue::kBias;
//   g.a = x;  g.b = w;  g.d = y;  g.bias = b;
//   DS_RETURN_IF_ERROR(DefaultLtMatmul().Run(g, stream));
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/base/status.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::blas {

// What happens to each element of alpha * op(A) op(B) + beta * C before it is stored.
// gelu is the tanh approximation. The aux matrix is row-major [m, n] of the storage type.
enum class Epilogue : uint8_t {
  kNone = 0,
  kBias = 1,         // D = G + bias[j]
  kGeluBias = 2,     // D = gelu(G + bias[j])
  kGeluAuxBias = 3,  // aux = G + bias[j] (the pre-activation), D = gelu(aux)
  kDGelu = 4,        // D = G * gelu'(aux): the backward of kGeluAuxBias without a pass
};
const char* EpilogueName(Epilogue e);
inline bool EpilogueUsesBias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kGeluBias || e == Epilogue::kGeluAuxBias;
}
inline bool EpilogueUsesAux(Epilogue e) {
  return e == Epilogue::kGeluAuxBias || e == Epilogue::kDGelu;
}

// One GEMM call. Pointers are device memory; A is stored [m, k] ([k, m] when trans_a), B is
// stored [k, n] ([n, k] when trans_b), D is [m, n], bias [n], aux [m, n].
struct MatmulArgs {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType dtype = DType::kF32;
  Epilogue epilogue = Epilogue::kNone;
  bool allow_tf32 = false;  // fp32 only: TF32 tensor cores (10-bit mantissa). Off by default.
  float alpha = 1.f;
  float beta = 0.f;  // 1: D += ... (backward passes accumulate)
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  const void* bias = nullptr;
  void* aux = nullptr;  // written by kGeluAuxBias, read by kDGelu
  // Row lengths in memory, in elements, of A, B and D as stored; 0: dense (the column count).
  int64_t lda = 0, ldb = 0, ldd = 0;
};

// Everything the algorithm choice depends on. Pointer alignments enter as the largest
// power of two (capped at 16 bytes) dividing the address, since cuBLASLt's faster kernels
// need 16-byte aligned operands.
struct MatmulKey {
  int device = 0;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType dtype = DType::kF32;
  Epilogue epilogue = Epilogue::kNone;
  bool tf32 = false;
  bool accumulate = false;  // beta != 0: C is read
  uint8_t align_a = 16, align_b = 16, align_d = 16, align_bias = 16, align_aux = 16;
  int64_t lda = 0, ldb = 0, ldd = 0;  // resolved: never 0

  bool operator==(const MatmulKey& o) const;
  std::string ToString() const;  // for error messages
};
struct MatmulKeyHash {
  size_t operator()(const MatmulKey& k) const;
};

// Largest power of two <= 16 dividing the address (16 for nullptr).
uint8_t PointerAlignment(const void* p);

// Checks shapes, types, pointers and epilogue requirements without touching a device:
// InvalidArgument naming the problem (negative or > INT32_MAX sizes, null operands of a
// non-empty problem, a missing bias or aux, TF32 on 16-bit types, an aux row length not a
// multiple of 8 elements as cuBLASLt requires); Unimplemented for types other than f32,
// bf16, f16.
Status ValidateMatmul(const MatmulArgs& args);

// The cache key of a validated call on `device`.
MatmulKey MakeMatmulKey(const MatmulArgs& args, int device);

// The cuBLASLt objects describing one problem (column-major view; see Note [Row-major
// through cuBLASLt] in lt_matmul.cc). Host-only objects: building them needs no GPU.
// Pointers (bias, aux) are not set here; Run sets them per call.
class MatmulRequest {
 public:
  static StatusOr<MatmulRequest> Build(const MatmulKey& key, size_t workspace_bytes);
  MatmulRequest(MatmulRequest&& o) noexcept;
  MatmulRequest& operator=(MatmulRequest&&) = delete;
  MatmulRequest(const MatmulRequest&) = delete;
  MatmulRequest& operator=(const MatmulRequest&) = delete;
  ~MatmulRequest();

  cublasLtMatmulDesc_t op() const { return op_; }
  // Column-major layouts of cuBLASLt's A (our B), B (our A), and C = D.
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t d() const { return d_; }
  cublasLtMatmulPreference_t preference() const { return pref_; }

 private:
  MatmulRequest() = default;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// Cache counters, for tests and benchmarks.
struct MatmulCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;  // heuristic queries made
  int64_t entries = 0;
};

class LtMatmul {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;
  static constexpr size_t kStagingBytes = size_t{64} << 20;

  explicit LtMatmul(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Enqueues the GEMM on `stream` of the current device (asynchronous). Errors: those of
  // ValidateMatmul; Unavailable without a GPU; Unimplemented when cuBLASLt has no algorithm
  // for the problem; cuBLAS failures as CublasToStatus maps them. m or n == 0 is a no-op;
  // k == 0 gives D = beta C plus the epilogue (done by cuBLASLt).
  Status Run(const MatmulArgs& args, cudaStream_t stream);

  // A device buffer of kStagingBytes for `stream` of the current device, allocated on first
  // use and kept (like the workspace): where the CUDA linear stages rows whose length is not
  // a multiple of 16 bytes, one chunk of rows at a time, in stream order.
  StatusOr<void*> Staging(cudaStream_t stream);

  MatmulCacheStats cache_stats() const;
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Algo {
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes;
  };
  StatusOr<cublasLtHandle_t> Handle(int device);
  StatusOr<void*> Workspace(int device, cudaStream_t stream);
  StatusOr<Algo> FindAlgo(cublasLtHandle_t handle, const MatmulKey& key,
                          const MatmulRequest& request);

  const size_t workspace_bytes_;
  mutable std::mutex mu_;
  std::map<int, cublasLtHandle_t> handles_;                   // guarded by mu_
  std::map<std::pair<int, cudaStream_t>, void*> workspaces_;  // guarded by mu_
  std::map<std::pair<int, cudaStream_t>, void*> staging_;     // guarded by mu_
  std::unordered_map<MatmulKey, Algo, MatmulKeyHash> algos_;  // guarded by mu_
  int64_t hits_ = 0, misses_ = 0;                             // guarded by mu_
};

// The process-wide instance the registered kernels use (32 MiB workspaces). Never destroyed.
LtMatmul& DefaultLtMatmul();

}  // namespace ds::kernels::blas
