// cuBLASLt matmul with epilogues and a cached algorithm choice.
//
// Note [Row-major through cuBLASLt]: a row-major [r, c] matrix is the memory of a
// column-major [c, r] one (its transpose). Row-major D = op(A) op(B) is therefore
// column-major D^T = op(B)^T op(A)^T: cuBLASLt's first operand is our B (with our trans_b),
// its second is our A (with our trans_a), its problem is (n, m, k), and D^T has n rows, so
// the per-row bias of cuBLASLt is our per-column bias [n], and the aux matrix (row-major
// [m, n]) has leading dimension n. Every stored matrix [r, c] becomes the layout
// (rows c, cols r, ld c).
#include "kernels/cuda/blas/lt_matmul.h"

#include <climits>
#include <functional>
#include <utility>

#include "kernels/cuda/gemm.h"  // CublasToStatus
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_status.h"

namespace ds::kernels::blas {
namespace {

#define DS_CUBLASLT_RETURN_IF_ERROR(call)                              \
  do {                                                                 \
    const cublasStatus_t _ds_lt_status = (call);                       \
    if (_ds_lt_status != CUBLAS_STATUS_SUCCESS)                        \
      return CublasToStatus(_ds_lt_status, #call, __FILE__, __LINE__); \
  } while (0)

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

template <typename T>
Status SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& v) {
  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
  return OkStatus();
}

template <typename T>
Status SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
               const T& v) {
  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
  return OkStatus();
}

// Layout of a row-major stored [rows, cols] matrix with rows `ld` elements apart:
// column-major (cols, rows, ld).
Status MakeLayout(DType t, int64_t rows, int64_t cols, int64_t ld, cublasLtMatrixLayout_t* out) {
  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
      out, CudaType(t), static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), ld));
  return OkStatus();
}

}  // namespace

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kGeluBias:
      return "gelu_bias";
    case Epilogue::kGeluAuxBias:
      return "gelu_aux_bias";
    case Epilogue::kDGelu:
      return "dgelu";
  }
  return "?";
}

bool MatmulKey::operator==(const MatmulKey& o) const {
  return device == o.device && m == o.m && n == o.n && k == o.k && trans_a == o.trans_a &&
         trans_b == o.trans_b && dtype == o.dtype && epilogue == o.epilogue && tf32 == o.tf32 &&
         accumulate == o.accumulate && align_a == o.align_a && align_b == o.align_b &&
         align_d == o.align_d && align_bias == o.align_bias && align_aux == o.align_aux &&
         lda == o.lda && ldb == o.ldb && ldd == o.ldd;
}

std::string MatmulKey::ToString() const {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         (trans_a ? " A^T" : "") + (trans_b ? " B^T" : "") + " " + DTypeName(dtype) +
         (tf32 ? " tf32" : "") + " epilogue=" + EpilogueName(epilogue) +
         (accumulate ? " beta!=0" : "") + " align=" + std::to_string(align_a) + "/" +
         std::to_string(align_b) + "/" + std::to_string(align_d) + " ld=" + std::to_string(lda) +
         "/" + std::to_string(ldb) + "/" + std::to_string(ldd) +
         " device=" + std::to_string(device);
}

size_t MatmulKeyHash::operator()(const MatmulKey& k) const {
  size_t h = std::hash<int64_t>()(k.m);
  auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(k.n));
  mix(static_cast<uint64_t>(k.k));
  mix(static_cast<uint64_t>(k.device));
  mix(static_cast<uint64_t>(k.lda));
  mix(static_cast<uint64_t>(k.ldb));
  mix(static_cast<uint64_t>(k.ldd));
  mix((uint64_t{k.trans_a} << 0) | (uint64_t{k.trans_b} << 1) | (uint64_t{k.tf32} << 2) |
      (uint64_t{k.accumulate} << 3) | (uint64_t(k.dtype) << 8) | (uint64_t(k.epilogue) << 16) |
      (uint64_t{k.align_a} << 24) | (uint64_t{k.align_b} << 32) | (uint64_t{k.align_d} << 40) |
      (uint64_t{k.align_bias} << 48) | (uint64_t{k.align_aux} << 56));
  return h;
}

uint8_t PointerAlignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  for (uint8_t a = 16; a > 1; a /= 2)
    if (v % a == 0) return a;
  return 1;
}

Status ValidateMatmul(const MatmulArgs& g) {
  const std::string where = "matmul m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                            " k=" + std::to_string(g.k) + ": ";
  if (g.dtype != DType::kF32 && g.dtype != DType::kBF16 && g.dtype != DType::kF16)
    return UnimplementedError(where + "dtype " + DTypeName(g.dtype) +
                              " (f32, bf16 and f16 are supported)");
  if (!FitsInt(g.m) || !FitsInt(g.n) || !FitsInt(g.k))
    return InvalidArgumentError(where + "sizes must be in [0, 2^31)");
  if (g.allow_tf32 && g.dtype != DType::kF32)
    return InvalidArgumentError(where + "allow_tf32 applies to f32 only, dtype is " +
                                DTypeName(g.dtype));
  if (g.epilogue > Epilogue::kDGelu)
    return InvalidArgumentError(where + "unknown epilogue " +
                                std::to_string(static_cast<int>(g.epilogue)));
  // Stored row lengths: A is [m, k] ([k, m] when trans_a), B [k, n] ([n, k]), D [m, n].
  const int64_t a_cols = g.trans_a ? g.m : g.k, b_cols = g.trans_b ? g.k : g.n;
  if ((g.lda != 0 && g.lda < a_cols) || (g.ldb != 0 && g.ldb < b_cols) ||
      (g.ldd != 0 && g.ldd < g.n) || !FitsInt(g.lda) || !FitsInt(g.ldb) || !FitsInt(g.ldd))
    return InvalidArgumentError(where + "a row length (lda " + std::to_string(g.lda) + ", ldb " +
                                std::to_string(g.ldb) + ", ldd " + std::to_string(g.ldd) +
                                ") is shorter than its matrix's " + std::to_string(a_cols) + ", " +
                                std::to_string(b_cols) + ", " + std::to_string(g.n) + " columns");
  if (g.m == 0 || g.n == 0) return OkStatus();  // nothing to write
  if (g.d == nullptr) return InvalidArgumentError(where + "D is null");
  if (g.k > 0 && (g.a == nullptr || g.b == nullptr))
    return InvalidArgumentError(where + "A or B is null");
  if (EpilogueUsesBias(g.epilogue) && g.bias == nullptr)
    return InvalidArgumentError(where + "epilogue " + EpilogueName(g.epilogue) + " needs a bias");
  if (EpilogueUsesAux(g.epilogue)) {
    if (g.aux == nullptr)
      return InvalidArgumentError(where + "epilogue " + EpilogueName(g.epilogue) +
                                  " needs an aux matrix");
    if (g.n % 8 != 0)
      return InvalidArgumentError(where + "epilogue " + EpilogueName(g.epilogue) +
                                  " needs n divisible by 8 (cuBLASLt's aux row length)");
  }
  return OkStatus();
}

MatmulKey MakeMatmulKey(const MatmulArgs& g, int device) {
  MatmulKey k;
  k.device = device;
  k.m = g.m;
  k.n = g.n;
  k.k = g.k;
  k.trans_a = g.trans_a;
  k.trans_b = g.trans_b;
  k.dtype = g.dtype;
  k.epilogue = g.epilogue;
  k.tf32 = g.allow_tf32 && g.dtype == DType::kF32;
  k.accumulate = g.beta != 0.f;
  k.align_a = PointerAlignment(g.a);
  k.align_b = PointerAlignment(g.b);
  k.align_d = PointerAlignment(g.d);
  k.align_bias = EpilogueUsesBias(g.epilogue) ? PointerAlignment(g.bias) : 16;
  k.align_aux = EpilogueUsesAux(g.epilogue) ? PointerAlignment(g.aux) : 16;
  k.lda = g.lda != 0 ? g.lda : (g.trans_a ? g.m : g.k);
  k.ldb = g.ldb != 0 ? g.ldb : (g.trans_b ? g.k : g.n);
  k.ldd = g.ldd != 0 ? g.ldd : g.n;
  return k;
}

StatusOr<MatmulRequest> MatmulRequest::Build(const MatmulKey& key, size_t workspace_bytes) {
  MatmulRequest r;
  const cublasComputeType_t compute = key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&r.op_, compute, CUDA_R_32F));
  // See Note [Row-major through cuBLASLt]: cuBLASLt's A is our B.
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  DS_RETURN_IF_ERROR(SetDesc(r.op_, CUBLASLT_MATMUL_DESC_TRANSA, op_a));
  DS_RETURN_IF_ERROR(SetDesc(r.op_, CUBLASLT_MATMUL_DESC_TRANSB, op_b));
  const uint32_t epilogue = LtEpilogue(key.epilogue);
  DS_RETURN_IF_ERROR(SetDesc(r.op_, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
  if (EpilogueUsesAux(key.epilogue)) {
    const int64_t aux_ld = key.n;
    DS_RETURN_IF_ERROR(SetDesc(r.op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld));
  }
  // Our B stored [k, n] or [n, k]; our A stored [m, k] or [k, m]; D [m, n].
  // A key from MakeMatmulKey has every ld resolved; a hand-made one may leave them 0 (dense).
  const int64_t lda = key.lda ? key.lda : (key.trans_a ? key.m : key.k);
  const int64_t ldb = key.ldb ? key.ldb : (key.trans_b ? key.k : key.n);
  const int64_t ldd = key.ldd ? key.ldd : key.n;
  DS_RETURN_IF_ERROR(key.trans_b ? MakeLayout(key.dtype, key.n, key.k, ldb, &r.a_)
                                 : MakeLayout(key.dtype, key.k, key.n, ldb, &r.a_));
  DS_RETURN_IF_ERROR(key.trans_a ? MakeLayout(key.dtype, key.k, key.m, lda, &r.b_)
                                 : MakeLayout(key.dtype, key.m, key.k, lda, &r.b_));
  DS_RETURN_IF_ERROR(MakeLayout(key.dtype, key.m, key.n, ldd, &r.d_));

  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&r.pref_));
  const uint64_t ws = workspace_bytes;
  DS_RETURN_IF_ERROR(SetPref(r.pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws));
  // cuBLASLt's A and B are our B and A.
  const uint32_t align_a = key.align_b, align_b = key.align_a, align_d = key.align_d;
  DS_RETURN_IF_ERROR(SetPref(r.pref_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a));
  DS_RETURN_IF_ERROR(SetPref(r.pref_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b));
  DS_RETURN_IF_ERROR(SetPref(r.pref_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d));
  DS_RETURN_IF_ERROR(SetPref(r.pref_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d));
  return r;
}

MatmulRequest::MatmulRequest(MatmulRequest&& o) noexcept
    : op_(o.op_), a_(o.a_), b_(o.b_), d_(o.d_), pref_(o.pref_) {
  o.op_ = nullptr;
  o.a_ = o.b_ = o.d_ = nullptr;
  o.pref_ = nullptr;
}

MatmulRequest::~MatmulRequest() {
  if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

LtMatmul::LtMatmul(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {}

LtMatmul::~LtMatmul() {
  // Errors are ignored: nothing can act on them during teardown.
  for (auto& [key, ptr] : workspaces_) cudaFree(ptr);
  for (auto& [key, ptr] : staging_) cudaFree(ptr);
  for (auto& [device, handle] : handles_) cublasLtDestroy(handle);
}

MatmulCacheStats LtMatmul::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {hits_, misses_, static_cast<int64_t>(algos_.size())};
}

StatusOr<cublasLtHandle_t> LtMatmul::Handle(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(device);
  if (it != handles_.end()) return it->second;
  cublasLtHandle_t handle = nullptr;
  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtCreate(&handle));
  handles_[device] = handle;
  return handle;
}

StatusOr<void*> LtMatmul::Workspace(int device, cudaStream_t stream) {
  if (workspace_bytes_ == 0) return static_cast<void*>(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workspaces_.find({device, stream});
  if (it != workspaces_.end()) return it->second;
  void* ptr = nullptr;
  DS_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, workspace_bytes_));
  workspaces_[{device, stream}] = ptr;
  return ptr;
}

StatusOr<void*> LtMatmul::Staging(cudaStream_t stream) {
  int device = 0;
  DS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = staging_.find({device, stream});
  if (it != staging_.end()) return it->second;
  void* ptr = nullptr;
  DS_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, kStagingBytes));
  staging_[{device, stream}] = ptr;
  return ptr;
}

StatusOr<LtMatmul::Algo> LtMatmul::FindAlgo(cublasLtHandle_t handle, const MatmulKey& key,
                                            const MatmulRequest& request) {
  // Held across the heuristic query (host-only, tens of microseconds, once per key) so two
  // threads never ask for the same key twice.
  std::lock_guard<std::mutex> lock(mu_);
  auto it = algos_.find(key);
  if (it != algos_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  DS_CUBLASLT_RETURN_IF_ERROR(
      cublasLtMatmulAlgoGetHeuristic(handle, request.op(), request.a(), request.b(), request.d(),
                                     request.d(), request.preference(), 1, &result, &found));
  if (found == 0) return UnimplementedError("cuBLASLt has no algorithm for " + key.ToString());
  Algo algo{result.algo, result.workspaceSize};
  algos_.emplace(key, algo);
  return algo;
}

Status LtMatmul::Run(const MatmulArgs& g, cudaStream_t stream) {
  DS_RETURN_IF_ERROR(ValidateMatmul(g));
  if (g.m == 0 || g.n == 0) return OkStatus();
  int device = 0;
  DS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const MatmulKey key = MakeMatmulKey(g, device);
  DS_ASSIGN_OR_RETURN(cublasLtHandle_t handle, Handle(device));
  DS_ASSIGN_OR_RETURN(void* workspace, Workspace(device, stream));
  DS_ASSIGN_OR_RETURN(MatmulRequest request, MatmulRequest::Build(key, workspace_bytes_));
  // Pointers first: the heuristic reads their alignment.
  if (EpilogueUsesBias(g.epilogue))
    DS_RETURN_IF_ERROR(SetDesc(request.op(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias));
  if (EpilogueUsesAux(g.epilogue))
    DS_RETURN_IF_ERROR(SetDesc(request.op(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux));
  DS_ASSIGN_OR_RETURN(Algo algo, FindAlgo(handle, key, request));
  // cuBLASLt's A is our B (Note [Row-major through cuBLASLt]); C is D.
  DS_CUBLASLT_RETURN_IF_ERROR(cublasLtMatmul(
      handle, request.op(), &g.alpha, g.b, request.a(), g.a, request.b(), &g.beta, g.d, request.d(),
      g.d, request.d(), &algo.algo, workspace, algo.workspace_bytes, stream));
  return OkStatus();
}

LtMatmul& DefaultLtMatmul() {
  static LtMatmul* instance = new LtMatmul();
  return *instance;
}

}  // namespace ds::kernels::blas
