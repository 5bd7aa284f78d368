#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "runtime/core/cpu_isa.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

using dnnl::memory;

std::atomic<GemmLibrary> g_library{GemmLibrary::kAuto};
constexpr int64_t kAutoPlainBColumns = 768;  // GemmLibrary::kAuto's rule
std::atomic<int64_t> g_made{0};

// DS_CPU_ISA's cap (runtime/core/cpu_isa.h) reaches oneDNN before its first primitive: oneDNN
// fixes its ISA at first use, so this runs while the program starts.
[[maybe_unused]] const bool g_onednn_capped = [] {
  if (!CpuIsaCapped()) return false;
  try {
    dnnl::set_max_cpu_isa(HostCpuIsa() == CpuIsa::kAvx2 ? dnnl::cpu_isa::avx2
                                                        : dnnl::cpu_isa::avx512_core);
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "DS_CPU_ISA: oneDNN kept its ISA (%s)\n", e.what());
  }
  return true;
}();

struct Key {
  GemmShape s;
  uint32_t alpha = 0, beta = 0;  // bit patterns
  bool bf16 = false;
  bool bias = false;      // a bias row added in the epilogue
  bool bf16_out = false;  // C in bf16, rounded once from the fp32 accumulator
  bool operator==(const Key& o) const {
    return s.trans_a == o.s.trans_a && s.trans_b == o.s.trans_b && s.m == o.s.m && s.n == o.s.n &&
           s.k == o.s.k && s.lda == o.s.lda && s.ldb == o.s.ldb && s.ldc == o.s.ldc &&
           alpha == o.alpha && beta == o.beta && bf16 == o.bf16 && bias == o.bias &&
           bf16_out == o.bf16_out;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v :
         {k.s.m, k.s.n, k.s.k, k.s.lda, k.s.ldb, k.s.ldc, int64_t{k.alpha}, int64_t{k.beta},
          int64_t{k.s.trans_a * 16 + k.s.trans_b * 8 + k.bf16 * 4 + k.bias * 2 + k.bf16_out}})
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Prim {
  dnnl::matmul matmul;
  memory::desc a, b, c, bias, scratchpad;
};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::mutex g_mu;
std::unordered_map<Key, std::shared_ptr<const Prim>, KeyHash>& Cache() {
  static auto* cache = new std::unordered_map<Key, std::shared_ptr<const Prim>, KeyHash>();
  return *cache;
}

std::string Describe(const Key& k) {
  return std::string(k.bf16 ? "bf16" : "f32") + (k.bf16_out ? " (bf16 output)" : "") + " matmul " +
         (k.s.trans_a ? "A^T" : "A") + (k.s.trans_b ? " B^T" : " B") +
         " m=" + std::to_string(k.s.m) + " n=" + std::to_string(k.s.n) +
         " k=" + std::to_string(k.s.k);
}

StatusOr<std::shared_ptr<const Prim>> Make(const Key& key) {
  const GemmShape& s = key.s;
  const memory::data_type in = key.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  auto prim = std::make_shared<Prim>();
  prim->a =
      memory::desc({s.m, s.k}, in, s.trans_a ? memory::dims{1, s.lda} : memory::dims{s.lda, 1});
  prim->b =
      memory::desc({s.k, s.n}, in, s.trans_b ? memory::dims{1, s.ldb} : memory::dims{s.ldb, 1});
  prim->c =
      memory::desc({s.m, s.n}, key.bf16_out ? memory::data_type::bf16 : memory::data_type::f32,
                   memory::dims{s.ldc, 1});
  if (key.bias) prim->bias = memory::desc({1, s.n}, memory::data_type::f32, memory::dims{s.n, 1});
  try {
    dnnl::primitive_attr attr;
    // Our scratchpad, per calling thread: oneDNN's own is shared by every primitive of the
    // process unless it was built for concurrent execution, and ranks run as threads (the
    // trainer tests) multiply at the same time.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    float alpha, beta;
    std::memcpy(&alpha, &key.alpha, sizeof(alpha));
    std::memcpy(&beta, &key.beta, sizeof(beta));
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc desc = key.bias
                                        ? dnnl::matmul::desc(prim->a, prim->b, prim->bias, prim->c)
                                        : dnnl::matmul::desc(prim->a, prim->b, prim->c);
    dnnl::matmul::primitive_desc pd(desc, attr, Engine());
    prim->scratchpad = pd.scratchpad_desc();
    prim->matmul = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    return InternalError("oneDNN cannot make the " + Describe(key) + ": " + e.what());
  }
  g_made.fetch_add(1);
  return std::shared_ptr<const Prim>(std::move(prim));
}

StatusOr<std::shared_ptr<const Prim>> Find(const Key& key) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Cache().find(key);
  if (it != Cache().end()) return it->second;
  DS_ASSIGN_OR_RETURN(auto prim, Make(key));
  Cache().emplace(key, prim);
  return prim;
}

// Whether oneDNN's gemm:jit kernels take this product as two halves of C's columns (PartsOf
// below), on avx512_core_bf16: in bf16, input gradients (A and B plain) with a reduction 8x
// longer than C is wide and forward products (x W^T) 3072 or more wide; in fp32, the products
// with a plain B kAuto would send to OpenBLAS (768+ columns), which gemm:jit ran at 218-225
// GFLOP/s on GPT-2 124M's input gradients against OpenBLAS's 189-201 and brgemm's 174-216
// (caches evicted, 2 threads).
bool JitIsa() {
  static const bool jit = OneDnnIsa() == "avx512_core_bf16";
  return jit;
}
bool SplitsColumns(const GemmShape& s, bool bf16) {
  if (!JitIsa() || s.trans_a) return false;
  if (s.trans_b) return bf16 && s.n >= 3072;
  return bf16 ? s.n >= 64 && s.k >= 8 * s.n : s.n >= kAutoPlainBColumns;
}

// Shapes oneDNN takes: GEMV-like products stay on the few-rows / sgemv path.
bool ToOneDnn(const GemmShape& s) {
  const GemmLibrary lib = CurrentGemmLibrary();
  if (lib == GemmLibrary::kOpenBlas || !(s.m > 1 && s.n > 1 && s.k > 0)) return false;
  return lib == GemmLibrary::kOneDnn || s.trans_b || s.n < kAutoPlainBColumns ||
         SplitsColumns(s, false);
}

void Run(const Prim& p, const void* a, const void* b, void* c, const float* bias) {
  thread_local dnnl::stream stream(Engine());
  thread_local std::vector<char> scratch;
  if (scratch.size() < p.scratchpad.get_size()) scratch.resize(p.scratchpad.get_size());
  memory am(p.a, Engine(), const_cast<void*>(a));
  memory bm(p.b, Engine(), const_cast<void*>(b));
  memory cm(p.c, Engine(), c);
  memory sm(p.scratchpad, Engine(), scratch.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, Engine(), const_cast<float*>(bias)));
  p.matmul.execute(stream, args);
  stream.wait();
}

void Abort(const Status& s) {
  std::fprintf(stderr, "ds: %s\n", s.ToString().c_str());
  std::abort();  // a shape oneDNN refused after PrepareGemm accepted its kind: a bug
}

// oneDNN 2.6 on avx512_core_bf16 (AVX512_BF16 without AMX) has two bf16 matmul kernels: brgemm,
// which it takes where the operands are dense, and gemm:jit, which it takes where one is a
// strided view. Over GPT-2 124M's bf16 step (DNNL_VERBOSE's times, 2 threads, one Zen 4 VM),
// gemm:jit ran the logits' weight gradient (op(A) = dy^T, 50257 rows) in 194 ms against 237,
// its input gradient (a reduction over 50257) in 188 against 198, its forward product in 195
// against 204 and mlp.fc's in 136 against 150; the blocks' weight gradients 0-5% faster, the
// other input gradients and the narrower forward products no faster or slower. So weight
// gradients run as two halves of C's rows and the products SplitsColumns names as two halves
// of its columns, each half a strided view: a rule on the shape and the ISA, never a timing, so
// every run sums alike. On AMX brgemm's tiles are far ahead: no split there.
struct Part {
  Key key;
  int64_t a = 0, b = 0, c = 0, bias = 0;  // the half's offsets, in elements
};

struct Parts {
  Part part[2];
  int n = 1;
  const Part* begin() const { return part; }
  const Part* end() const { return part + n; }
};

Parts PartsOf(const Key& key) {
  const GemmShape& s = key.s;
  const bool rows = key.bf16 && JitIsa() && s.trans_a && s.m >= 64;
  const bool cols = SplitsColumns(s, key.bf16);
  Parts out;
  out.part[0].key = key;
  if (!(rows || cols)) return out;
  const int64_t whole = rows ? s.m : s.n, half = std::min(whole - 16, (whole / 2 + 15) / 16 * 16);
  Part& first = out.part[0];
  Part& second = out.part[1];
  second.key = key;
  out.n = 2;
  if (rows) {
    first.key.s.m = half;
    second.key.s.m = s.m - half;
    second.a = half;  // A is stored [k, m]: column `half` of every row
    second.c = half * s.ldc;
  } else {
    first.key.s.n = half;
    second.key.s.n = s.n - half;
    second.b = s.trans_b ? half * s.ldb : half;
    second.c = half;
    second.bias = half;
  }
  return out;
}

// A product (inputs fp32 or bf16, C fp32 or bf16 as the key says) in its parts.
void RunParts(const Key& key, const void* a, const void* b, void* c, const float* bias) {
  const size_t in = key.bf16 ? 2 : 4, out = key.bf16_out ? 2 : 4;
  for (const Part& part : PartsOf(key)) {
    auto prim = Find(part.key);
    if (!prim.ok()) Abort(prim.status());
    Run(**prim, static_cast<const char*>(a) + part.a * in,
        static_cast<const char*>(b) + part.b * in, static_cast<char*>(c) + part.c * out,
        bias ? bias + part.bias : nullptr);
  }
}

// c[i, j] += bias[j] over m rows (the OpenBLAS path's bias, after its product).
void AddBiasRows(const float* bias, int64_t m, int64_t n, int64_t ldc, float* c) {
  ParallelFor(m, kElementwiseGrain / std::max<int64_t>(n, 1) + 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
  });
}

// A stored bf16 matrix (rows x cols of op(X), leading dimension ld) widened into fp32 with the
// same layout.
void Widen(const uint16_t* x, bool trans, int64_t rows, int64_t cols, int64_t ld,
           std::vector<float>* out) {
  const int64_t r = trans ? cols : rows, c = trans ? rows : cols;  // as stored
  const int64_t span = r > 0 ? (r - 1) * ld + c : 0;
  out->resize(static_cast<size_t>(span));
  ConvertBf16ToF32(x, out->data(), span);
}

}  // namespace

void SetGemmLibrary(GemmLibrary library) { g_library.store(library); }
GemmLibrary CurrentGemmLibrary() { return g_library.load(); }

bool ParseGemmLibrary(const std::string& name, GemmLibrary* library) {
  if (name == "onednn")
    *library = GemmLibrary::kOneDnn;
  else if (name == "openblas")
    *library = GemmLibrary::kOpenBlas;
  else if (name == "auto")
    *library = GemmLibrary::kAuto;
  else
    return false;
  return true;
}

const char* GemmLibraryName(GemmLibrary library) {
  switch (library) {
    case GemmLibrary::kOneDnn:
      return "onednn";
    case GemmLibrary::kOpenBlas:
      return "openblas";
    default:
      return "auto";
  }
}

std::string OneDnnIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    default:
      return "other";
  }
}

bool HasNativeBf16Gemm() {
  if (HostCpuIsa() != CpuIsa::kAvx512Bf16) return false;
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool OneDnnSupportsBf16() {
  static const bool supported = [] {
    const Key key{{false, false, 8, 8, 8, 8, 8, 8}, Bits(1.f), Bits(0.f), true};
    return Find(key).ok();
  }();
  return supported;
}

void Gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c,
          const float* bias) {
  if (!ToOneDnn(s)) {
    ParallelSgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, alpha, a, s.lda, b, s.ldb, beta, c, s.ldc);
    if (bias) AddBiasRows(bias, s.m, s.n, s.ldc, c);
    return;
  }
  const bool epilogue = bias && alpha == 1.f;  // oneDNN's output scale would scale the bias too
  RunParts({s, Bits(alpha), Bits(beta), false, epilogue}, a, b, c, epilogue ? bias : nullptr);
  if (bias && !epilogue) AddBiasRows(bias, s.m, s.n, s.ldc, c);
}

void GemmBf16(const GemmShape& s, float alpha, const uint16_t* a, const uint16_t* b, float beta,
              float* c, Bf16Gemm mode, const float* bias) {
  if (mode == Bf16Gemm::kNative && s.m > 1 && s.n > 1 && OneDnnSupportsBf16()) {
    const bool epilogue = bias && alpha == 1.f;
    RunParts({s, Bits(alpha), Bits(beta), true, epilogue}, a, b, c, epilogue ? bias : nullptr);
    if (bias && !epilogue) AddBiasRows(bias, s.m, s.n, s.ldc, c);
    return;
  }
  thread_local std::vector<float> wa, wb;
  Widen(a, s.trans_a, s.m, s.k, s.lda, &wa);
  Widen(b, s.trans_b, s.k, s.n, s.ldb, &wb);
  Gemm(s, alpha, wa.data(), wb.data(), beta, c, bias);
}

void GemmBf16Out(const GemmShape& s, const uint16_t* a, const uint16_t* b, uint16_t* c,
                 Bf16Gemm mode, const float* bias) {
  if (mode == Bf16Gemm::kNative && s.m > 1 && s.n > 1 && OneDnnSupportsBf16()) {
    RunParts({s, Bits(1.f), Bits(0.f), true, bias != nullptr, true}, a, b, c, bias);
    return;
  }
  thread_local std::vector<float> wide;  // the fp32 product, rounded row by row
  wide.resize(static_cast<size_t>(s.m * s.ldc));
  GemmBf16(s, 1.f, a, b, 0.f, wide.data(), mode, bias);
  if (s.ldc == s.n) return ConvertF32ToBf16(wide.data(), c, s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i) ConvertF32ToBf16(wide.data() + i * s.ldc, c + i * s.ldc, s.n);
}

void GemmBf16Add(const GemmShape& s, const uint16_t* a, const uint16_t* b, uint16_t* c,
                 Bf16Gemm mode) {
  if (mode == Bf16Gemm::kNative && s.m > 1 && s.n > 1 && OneDnnSupportsBf16()) {
    RunParts({s, Bits(1.f), Bits(1.f), true, false, true}, a, b, c, nullptr);
    return;
  }
  thread_local std::vector<float> wide;  // the fp32 product, added row by row
  wide.resize(static_cast<size_t>(s.m * s.ldc));
  GemmBf16(s, 1.f, a, b, 0.f, wide.data(), mode);
  if (s.ldc == s.n) return AddF32IntoBf16(wide.data(), c, s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i) AddF32IntoBf16(wide.data() + i * s.ldc, c + i * s.ldc, s.n);
}

Status PrepareGemm(const GemmShape& s, float alpha, float beta, bool bf16, bool bias,
                   bool bf16_out) {
  if (bf16 ? !(s.m > 1 && s.n > 1 && OneDnnSupportsBf16()) : !ToOneDnn(s)) return OkStatus();
  const Key key{s, Bits(alpha), Bits(beta), bf16, bias && (alpha == 1.f || bf16_out), bf16_out};
  for (const Part& part : PartsOf(key)) DS_RETURN_IF_ERROR(Find(part.key).status());
  return OkStatus();
}

int64_t GemmPrimitivesMade() { return g_made.load(); }

}  // namespace ds::kernels::cpu
