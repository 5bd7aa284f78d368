// CPU-side tests of the cuBLASLt wrapper and the CUDA linear glue: they need the toolkit
// but no GPU. Argument validation, cache keys, the column-major request handed to the
// heuristic (read back from the cuBLASLt descriptors, which are host objects), and the
// errors a call gets on a machine without a device.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "kernels/cuda/blas/bias_grad_launch.h"
#include "kernels/cuda/blas/copy_rows_launch.h"
#include "kernels/cuda/blas/lt_matmul.h"
#include "kernels/registry.h"
#include "runtime/cuda/device.h"

namespace ds::kernels::blas {
namespace {

// A fake device address with the given alignment (never dereferenced here).
void* Addr(uintptr_t v) { return reinterpret_cast<void*>(v); }

MatmulArgs ValidArgs() {
  MatmulArgs g;
  g.m = 5;
  g.n = 16;
  g.k = 7;
  g.dtype = DType::kBF16;
  g.a = Addr(0x10000);
  g.b = Addr(0x20000);
  g.d = Addr(0x30000);
  return g;
}

TEST_CASE("ValidateMatmul: accepts a plain problem and rejects bad ones", "[blas]") {
  MatmulArgs g = ValidArgs();
  CHECK(ValidateMatmul(g).ok());

  SECTION("negative and oversized dimensions") {
    g.m = -1;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);
    g.m = int64_t{1} << 31;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);
  }
  SECTION("null operands") {
    g.d = nullptr;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);
    g = ValidArgs();
    g.a = nullptr;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);
    g.k = 0;  // no products: A and B are not read
    CHECK(ValidateMatmul(g).ok());
  }
  SECTION("row lengths shorter than the rows") {
    g.ldd = g.n - 1;
    const Status s = ValidateMatmul(g);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("ldd") != std::string::npos);
    g.ldd = g.n + 8;  // longer is a padded row: fine
    CHECK(ValidateMatmul(g).ok());
    g.lda = g.k - 1;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);
  }
  SECTION("empty output needs no pointers") {
    MatmulArgs e;
    e.m = 0;
    e.n = 3;
    e.k = 9;
    CHECK(ValidateMatmul(e).ok());
  }
  SECTION("epilogue inputs") {
    g.epilogue = Epilogue::kBias;
    const Status s = ValidateMatmul(g);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("bias") != std::string::npos);
    g.bias = Addr(0x40000);
    CHECK(ValidateMatmul(g).ok());
    g.epilogue = Epilogue::kGeluAuxBias;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);  // no aux
    g.aux = Addr(0x50000);
    CHECK(ValidateMatmul(g).ok());
    g.n = 12;  // aux rows must be a multiple of 8 elements
    const Status ld = ValidateMatmul(g);
    CHECK(ld.code() == StatusCode::kInvalidArgument);
    CHECK(ld.message().find("divisible by 8") != std::string::npos);
    g.epilogue = Epilogue::kGeluBias;  // no aux: any n
    CHECK(ValidateMatmul(g).ok());
  }
  SECTION("TF32 only for f32; integer types unsupported") {
    g.allow_tf32 = true;
    CHECK(ValidateMatmul(g).code() == StatusCode::kInvalidArgument);
    g.dtype = DType::kF32;
    CHECK(ValidateMatmul(g).ok());
    g.allow_tf32 = false;
    g.dtype = DType::kI32;
    CHECK(ValidateMatmul(g).code() == StatusCode::kUnimplemented);
  }
}

TEST_CASE("PointerAlignment: largest power of two up to 16", "[blas]") {
  CHECK(PointerAlignment(nullptr) == 16);
  CHECK(PointerAlignment(Addr(0x1000)) == 16);
  CHECK(PointerAlignment(Addr(0x1008)) == 8);
  CHECK(PointerAlignment(Addr(0x1004)) == 4);
  CHECK(PointerAlignment(Addr(0x1002)) == 2);
  CHECK(PointerAlignment(Addr(0x1001)) == 1);
}

TEST_CASE("MatmulKey: what changes the algorithm changes the key", "[blas]") {
  const MatmulArgs g = ValidArgs();
  const MatmulKey base = MakeMatmulKey(g, 0);
  CHECK(base == MakeMatmulKey(g, 0));
  CHECK(MatmulKeyHash()(base) == MatmulKeyHash()(MakeMatmulKey(g, 0)));

  // Same problem, other buffers with the same alignment: a cache hit.
  MatmulArgs moved = g;
  moved.a = Addr(0x90000);
  moved.d = Addr(0xa0010);
  CHECK(MakeMatmulKey(moved, 0) == base);

  std::vector<MatmulArgs> variants(9, g);
  variants[0].k = 8;
  variants[1].trans_a = true;
  variants[2].trans_b = true;
  variants[3].dtype = DType::kF16;
  variants[4].epilogue = Epilogue::kBias;
  variants[4].bias = Addr(0x40000);
  variants[5].beta = 1.f;
  variants[6].a = Addr(0x10002);  // 2-byte aligned A
  variants[7].d = Addr(0x30008);
  variants[8].ldd = g.n + 8;  // padded rows of D
  for (size_t i = 0; i < variants.size(); ++i) {
    CAPTURE(i);
    CHECK_FALSE(MakeMatmulKey(variants[i], 0) == base);
  }
  CHECK_FALSE(MakeMatmulKey(g, 1) == base);  // another device

  MatmulArgs f = g;
  f.dtype = DType::kF32;
  MatmulArgs t = f;
  t.allow_tf32 = true;
  CHECK(MakeMatmulKey(t, 0).tf32);
  CHECK_FALSE(MakeMatmulKey(t, 0) == MakeMatmulKey(f, 0));
  CHECK(base.ToString().find("m=5 n=16 k=7") != std::string::npos);
}

template <typename T>
T DescAttr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr) {
  T v{};
  size_t written = 0;
  REQUIRE(cublasLtMatmulDescGetAttribute(desc, attr, &v, sizeof(v), &written) ==
          CUBLAS_STATUS_SUCCESS);
  return v;
}

template <typename T>
T LayoutAttr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr) {
  T v{};
  size_t written = 0;
  REQUIRE(cublasLtMatrixLayoutGetAttribute(l, attr, &v, sizeof(v), &written) ==
          CUBLAS_STATUS_SUCCESS);
  return v;
}

template <typename T>
T PrefAttr(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr) {
  T v{};
  size_t written = 0;
  REQUIRE(cublasLtMatmulPreferenceGetAttribute(p, attr, &v, sizeof(v), &written) ==
          CUBLAS_STATUS_SUCCESS);
  return v;
}

// (rows, cols, ld) of a column-major layout.
void CheckLayout(cublasLtMatrixLayout_t l, uint64_t rows, uint64_t cols, int64_t ld,
                 cudaDataType_t type) {
  CHECK(LayoutAttr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_ROWS) == rows);
  CHECK(LayoutAttr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_COLS) == cols);
  CHECK(LayoutAttr<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_LD) == ld);
  CHECK(LayoutAttr<uint32_t>(l, CUBLASLT_MATRIX_LAYOUT_TYPE) == static_cast<uint32_t>(type));
}

TEST_CASE("MatmulRequest: the row-major problem as cuBLASLt's column-major one", "[blas]") {
  SECTION("linear forward: y [N, out] = x [N, in] W^T with bias") {
    MatmulArgs g = ValidArgs();  // m = N = 5, n = out = 16, k = in = 7
    g.trans_b = true;
    g.epilogue = Epilogue::kBias;
    g.bias = Addr(0x40000);
    g.a = Addr(0x10004);  // 4-byte aligned x
    StatusOr<MatmulRequest> r = MatmulRequest::Build(MakeMatmulKey(g, 0), 1 << 20);
    REQUIRE(r.ok());
    // cuBLASLt's A is W (stored [16, 7] -> col-major 7 x 16), transposed; its B is x.
    CHECK(DescAttr<int32_t>(r->op(), CUBLASLT_MATMUL_DESC_TRANSA) == CUBLAS_OP_T);
    CHECK(DescAttr<int32_t>(r->op(), CUBLASLT_MATMUL_DESC_TRANSB) == CUBLAS_OP_N);
    CHECK(DescAttr<uint32_t>(r->op(), CUBLASLT_MATMUL_DESC_EPILOGUE) == CUBLASLT_EPILOGUE_BIAS);
    CHECK(DescAttr<int32_t>(r->op(), CUBLASLT_MATMUL_DESC_COMPUTE_TYPE) == CUBLAS_COMPUTE_32F);
    CheckLayout(r->a(), 7, 16, 7, CUDA_R_16BF);
    CheckLayout(r->b(), 7, 5, 7, CUDA_R_16BF);
    CheckLayout(r->d(), 16, 5, 16, CUDA_R_16BF);
    CHECK(PrefAttr<uint64_t>(r->preference(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) ==
          (1u << 20));
    // x is cuBLASLt's B: its 4-byte alignment is what the heuristic must respect.
    CHECK(PrefAttr<uint32_t>(r->preference(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES) == 16);
    CHECK(PrefAttr<uint32_t>(r->preference(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES) == 4);
  }
  SECTION("weight gradient: dW [out, in] += dy^T x, f32 with TF32 allowed") {
    MatmulArgs g = ValidArgs();
    g.m = 16;  // out
    g.n = 7;   // in
    g.k = 5;   // N
    g.trans_a = true;
    g.dtype = DType::kF32;
    g.allow_tf32 = true;
    g.beta = 1.f;
    StatusOr<MatmulRequest> r = MatmulRequest::Build(MakeMatmulKey(g, 0), 0);
    REQUIRE(r.ok());
    CHECK(DescAttr<int32_t>(r->op(), CUBLASLT_MATMUL_DESC_TRANSA) == CUBLAS_OP_N);
    CHECK(DescAttr<int32_t>(r->op(), CUBLASLT_MATMUL_DESC_TRANSB) == CUBLAS_OP_T);
    CHECK(DescAttr<int32_t>(r->op(), CUBLASLT_MATMUL_DESC_COMPUTE_TYPE) ==
          CUBLAS_COMPUTE_32F_FAST_TF32);
    CheckLayout(r->a(), 7, 5, 7, CUDA_R_32F);    // x stored [N=5, in=7]
    CheckLayout(r->b(), 16, 5, 16, CUDA_R_32F);  // dy stored [N=5, out=16]
    CheckLayout(r->d(), 7, 16, 7, CUDA_R_32F);
  }
  SECTION("padded rows: the LM head's y [N, 50257] staged in rows of 50264") {
    MatmulArgs g = ValidArgs();
    g.m = 5;
    g.n = 50257;
    g.k = 7;
    g.trans_b = true;
    g.ldd = 50264;
    StatusOr<MatmulRequest> r = MatmulRequest::Build(MakeMatmulKey(g, 0), 0);
    REQUIRE(r.ok());
    CheckLayout(r->d(), 50257, 5, 50264, CUDA_R_16BF);
    CheckLayout(r->a(), 7, 50257, 7, CUDA_R_16BF);
    // dx += dy W with dy staged: our A [N, out] in rows of 50264.
    MatmulArgs b = ValidArgs();
    b.m = 5;
    b.n = 7;
    b.k = 50257;
    b.lda = 50264;
    StatusOr<MatmulRequest> rb = MatmulRequest::Build(MakeMatmulKey(b, 0), 0);
    REQUIRE(rb.ok());
    CheckLayout(rb->b(), 50257, 5, 50264, CUDA_R_16BF);
  }
  SECTION("GELU with aux: the aux leading dimension is n") {
    MatmulArgs g = ValidArgs();
    g.n = 24;
    g.epilogue = Epilogue::kGeluAuxBias;
    g.bias = Addr(0x40000);
    g.aux = Addr(0x50000);
    StatusOr<MatmulRequest> r = MatmulRequest::Build(MakeMatmulKey(g, 0), 0);
    REQUIRE(r.ok());
    CHECK(DescAttr<uint32_t>(r->op(), CUBLASLT_MATMUL_DESC_EPILOGUE) ==
          CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    CHECK(DescAttr<int64_t>(r->op(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) == 24);
    g.epilogue = Epilogue::kDGelu;
    StatusOr<MatmulRequest> back = MatmulRequest::Build(MakeMatmulKey(g, 0), 0);
    REQUIRE(back.ok());
    CHECK(DescAttr<uint32_t>(back->op(), CUBLASLT_MATMUL_DESC_EPILOGUE) == CUBLASLT_EPILOGUE_DGELU);
  }
}

TEST_CASE("LtMatmul: bad arguments fail before any device work", "[blas]") {
  LtMatmul lt;
  MatmulArgs g = ValidArgs();
  g.d = nullptr;
  CHECK(lt.Run(g, nullptr).code() == StatusCode::kInvalidArgument);
  MatmulArgs empty;
  empty.m = 0;
  empty.n = 4;
  CHECK(lt.Run(empty, nullptr).ok());
  CHECK(lt.cache_stats().misses == 0);
  CHECK(lt.workspace_bytes() == LtMatmul::kDefaultWorkspaceBytes);
  if (!cuda::CudaAvailable()) {
    // A valid problem needs the device: a clean error, no crash, nothing cached.
    const Status s = lt.Run(ValidArgs(), nullptr);
    CHECK_FALSE(s.ok());
    CHECK(lt.cache_stats().entries == 0);
  }
}

TEST_CASE("CUDA linear: registered for f32, bf16 and f16; shape errors are InvalidArgument",
          "[blas][linear]") {
  REQUIRE(FindKernel("linear", Device::kCuda, DType::kF32) != nullptr);
  REQUIRE(FindKernel("linear", Device::kCuda, DType::kBF16) != nullptr);
  CHECK(FindKernel("linear", Device::kCuda, DType::kF16) != nullptr);
  const Kernel* k = FindKernel("linear", Device::kCuda, DType::kBF16);
  float dummy[8];
  OpArgs args;
  // W expects 3 features, x has 4: rejected before anything is launched.
  args.in = {Tensor(dummy, {2, 4}, DType::kBF16), Tensor(dummy, {5, 3}, DType::kBF16)};
  args.out = {Tensor(dummy, {2, 5}, DType::kBF16)};
  const Status s = k->forward(args);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("features") != std::string::npos);
  // f32 tensors handed to the bf16 kernel.
  args.in = {Tensor(dummy, {2, 3}, DType::kF32), Tensor(dummy, {5, 3}, DType::kF32)};
  args.out = {Tensor(dummy, {2, 5}, DType::kF32)};
  CHECK(k->forward(args).code() == StatusCode::kInvalidArgument);
  // A bias of the wrong length.
  args.in = {Tensor(dummy, {2, 3}, DType::kBF16), Tensor(dummy, {5, 3}, DType::kBF16),
             Tensor(dummy, {4}, DType::kBF16)};
  args.out = {Tensor(dummy, {2, 5}, DType::kBF16)};
  CHECK(k->forward(args).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("LaunchBiasGrad: size checks", "[blas]") {
  CHECK(LaunchBiasGrad(nullptr, 0, 5, BiasGradType::kF32, nullptr, nullptr) == cudaSuccess);
  CHECK(LaunchBiasGrad(nullptr, 5, 0, BiasGradType::kBF16, nullptr, nullptr) == cudaSuccess);
  CHECK(LaunchBiasGrad(nullptr, -1, 5, BiasGradType::kF32, nullptr, nullptr) ==
        cudaErrorInvalidValue);
}

TEST_CASE("LaunchCopyRows: size checks before any launch", "[blas]") {
  CHECK(LaunchCopyRows(nullptr, 8, nullptr, 5, 0, 5, 2, nullptr) == cudaSuccess);
  CHECK(LaunchCopyRows(nullptr, 8, nullptr, 5, 3, 0, 2, nullptr) == cudaSuccess);
  CHECK(LaunchCopyRows(nullptr, 4, nullptr, 5, 3, 5, 2, nullptr) == cudaErrorInvalidValue);
  CHECK(LaunchCopyRows(nullptr, 8, nullptr, 4, 3, 5, 2, nullptr) == cudaErrorInvalidValue);
  CHECK(LaunchCopyRows(nullptr, 8, nullptr, 5, -1, 5, 2, nullptr) == cudaErrorInvalidValue);
  CHECK(LaunchCopyRows(nullptr, 8, nullptr, 5, 3, 5, 8, nullptr) == cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ds::kernels::blas
