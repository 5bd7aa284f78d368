// The CPU kernels' matrix products: C = alpha op(A) op(B) + beta C, row-major, with fp32 or bf16
// inputs and fp32 accumulation and output, through oneDNN's matmul or OpenBLAS.
//
// Library: oneDNN's fp32 matmul (brgemm, avx512_core / avx2) takes most. Product by product
// (tools/bench/cpu_gemm.sh) it beats OpenBLAS's sgemm, split over the same threads, on most
// forward shapes (x W^T, up to 1.7x) and loses on some gradient shapes (B not transposed: it
// repacks B per call); over whole training steps it was ahead in every alternating run
// (L4 C256: 193-208 ms against OpenBLAS's 220-263), also against oneDNN for the forward only.
// `device.cpu_gemm: openblas` keeps the old path, `onednn` takes every product to oneDNN, and
// `auto` (the default) sends the shapes oneDNN is slow on to OpenBLAS (GemmLibrary::kAuto). The
// choice is per process and by shape, never timed per run: two runs of one job (a resume) must
// sum in the same order.
//
// bf16 inputs: oneDNN multiplies bf16 natively where the CPU has AVX512_BF16 (vdpbf16ps) or AMX
// (Cooper Lake, Sapphire Rapids, Zen 4 and later): twice fp32's rate or more. Elsewhere oneDNN
// emulates it (avx512_core: about a quarter of its fp32 rate) or refuses it (AVX2), so GemmBf16
// widens the inputs and multiplies in fp32 there: the same products (a bf16 times a bf16 is
// exact in fp32), the same fp32 accumulation, other summation order.
//
// Primitives: one per call shape (transposes, sizes, strides, alpha, beta, input type), made by
// PrepareGemm at plan time (the executor's creation) or on first use, then looked up.
//
//   Gemm({false, true, n, out, in, in, in, out}, 1.f, x, w, 0.f, y);   // y = x W^T
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace ds::kernels::cpu {

// kAuto (the default): oneDNN, except fp32 products whose B is not transposed and has 768
// columns or more, which go to OpenBLAS: oneDNN 2.6 repacks such a B on every call and ran them
// at 0.57-0.83x OpenBLAS's rate on two CPUs (avx512_core_vnni, avx512_core_amx: GPT-2's
// mlp.proj and logits gradients), while it wins most other shapes. On avx512_core_bf16 (AVX512_BF16
// without AMX) those go to oneDNN's gemm:jit kernels instead, as two strided halves (gemm.cc's
// PartsOf: faster than both there). A rule on the shape and ISA, never a timing, so every run
// of a job sums in the same order.
enum class GemmLibrary { kOneDnn, kOpenBlas, kAuto };

// How bf16 products run: kNative through oneDNN's bf16 kernels (emulated by oneDNN on
// avx512_core without AVX512_BF16: slow, for tests), kWiden as fp32 products of the widened
// inputs.
enum class Bf16Gemm { kNative, kWiden };

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// Process-wide; set once at start (the worker, from device.cpu_gemm), before any kernel runs.
void SetGemmLibrary(GemmLibrary library);
GemmLibrary CurrentGemmLibrary();
// "onednn" / "openblas" / "auto"; false for any other name.
bool ParseGemmLibrary(const std::string& name, GemmLibrary* library);
const char* GemmLibraryName(GemmLibrary library);

// The instruction set oneDNN dispatches to on this CPU ("avx512_core", "avx512_core_bf16",
// "avx512_core_amx", "avx2", ...), and whether it multiplies bf16 natively there.
std::string OneDnnIsa();
bool HasNativeBf16Gemm();
// Whether oneDNN has a bf16 matmul at all here (natively or emulated): false on AVX2-only CPUs.
bool OneDnnSupportsBf16();

// C = alpha op(A) op(B) + beta C in fp32 (the current library); with `bias` (n floats), bias[j]
// is added to column j of every row (oneDNN in its epilogue where alpha is 1, else and under
// OpenBLAS in a pass after).
void Gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c,
          const float* bias = nullptr);
// The same with A and B in bf16 (their bit patterns) and C in fp32, the way `mode` says.
// kNative where oneDNN has no bf16 matmul (OneDnnSupportsBf16() false) runs kWiden.
void GemmBf16(const GemmShape& s, float alpha, const uint16_t* a, const uint16_t* b, float beta,
              float* c, Bf16Gemm mode, const float* bias = nullptr);

// C = op(A) op(B) (+ bias) with A, B and C in bf16: accumulated in fp32 and rounded once (the
// products a bf16 step stores as bf16 activations, Kernel::bf16_act_outputs). oneDNN writes C
// in bf16 itself, which halves the output's bytes; kWiden (or no bf16 matmul) rounds an fp32
// product.
void GemmBf16Out(const GemmShape& s, const uint16_t* a, const uint16_t* b, uint16_t* c,
                 Bf16Gemm mode, const float* bias = nullptr);

// C = C + op(A) op(B) with A, B and C in bf16: the fp32 product added to the widened C and
// rounded once, which is what an fp32 product followed by AddF32IntoBf16 gives (a bf16 model's
// weight gradient accumulated where it is stored, Kernel::bf16_param_grads). oneDNN adds C in
// its epilogue (a sum post-op on a bf16 destination); kWiden (or no bf16 matmul) adds an fp32
// product.
void GemmBf16Add(const GemmShape& s, const uint16_t* a, const uint16_t* b, uint16_t* c,
                 Bf16Gemm mode);

// Makes the oneDNN primitive of this call now (no-op under OpenBLAS or for shapes that do not
// go to oneDNN). An error names the shape. bf16_out: GemmBf16Out's (alpha 1, beta 0) or, with
// beta 1, GemmBf16Add's.
Status PrepareGemm(const GemmShape& s, float alpha, float beta, bool bf16, bool bias = false,
                   bool bf16_out = false);
// Primitives made so far: what a test reads before and after a step to see that none was made
// inside it.
int64_t GemmPrimitivesMade();

}  // namespace ds::kernels::cpu
