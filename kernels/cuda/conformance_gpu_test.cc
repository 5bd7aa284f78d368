// Conformance (GPU): for EVERY op in kernels::RegisteredOps() and dtypes f32, bf16 and f16,
// the CUDA kernel against the CPU f32 reference on the same inputs (rounded for 16-bit),
// forward (outputs and saved buffers) and backward (gradients accumulated onto random
// initial values, as the executor's += contract allows). An op with a CUDA kernel but no case
// in Cases() below is a failure that names it; the ops of DS_CUDA_PENDING_OPS have no
// kernel yet (cuda_registration_test keeps that list exact).
//
// Bound: |cuda - cpu| <= tol * (|cpu| + rms(cpu)) elementwise, tol per op and dtype: fp32
// differences come from summation order, fast intrinsics and FMA; bf16 from one rounding
// per stored value (2^-8 relative) plus the accumulation into bf16 gradients.
//
// Needs a GPU: without one it prints one SKIPPED line and exits 77 (README.md).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "runtime/cuda/device.h"

#if DS_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/elementwise_launch.h"
#include "kernels/cuda/pending_ops_testing.h"
#include "kernels/registry.h"
#include "runtime/cuda/stream_context.h"

namespace ds::kernels {
namespace {

// What to feed one input.
struct InputGen {
  enum Kind { kFloat, kIds, kTargets } kind = kFloat;
  Shape shape;
  float lo = -1.f, hi = 1.f;  // kFloat range
  int32_t limit = 0;          // kIds / kTargets: values in [0, limit); targets get some -100
};

struct OpCase {
  std::string op;
  std::vector<InputGen> inputs;
  Attrs attrs;
  double tol_f32 = 1e-5;
  double tol_bf16 = 1e-2;
};

InputGen F(Shape s, float lo = -1.f, float hi = 1.f) { return {InputGen::kFloat, s, lo, hi, 0}; }
InputGen Ids(Shape s, int32_t limit) { return {InputGen::kIds, s, 0, 0, limit}; }
InputGen Targets(Shape s, int32_t limit) { return {InputGen::kTargets, s, 0, 0, limit}; }

Attrs MakeAttrs(std::vector<std::pair<std::string, double>> kv) {
  Attrs a;
  for (auto& [k, v] : kv) {
    if (v == std::floor(v) && k != "p" && k != "eps" && k != "theta")
      a.SetInt(k, static_cast<int64_t>(v));
    else
      a.SetFloat(k, v);
  }
  return a;
}

// Shapes are small but odd-sized (not multiples of 32, 256), with rows > one block.
std::vector<OpCase> Cases() {
  return {
      {"add", {F({3, 37, 129}), F({3, 37, 129})}, {}, 1e-6, 1e-2},
      {"mul", {F({3, 37, 129}), F({3, 37, 129})}, {}, 1e-6, 1e-2},
      {"gelu", {F({3, 37, 129}, -6.f, 6.f)}, {}, 1e-5, 2e-2},
      {"silu", {F({3, 37, 129}, -8.f, 8.f)}, {}, 1e-5, 2e-2},
      {"dropout", {F({5, 1001})}, MakeAttrs({{"p", 0.3}}), 1e-6, 1e-2},
      {"layernorm",
       {F({4, 33, 200}, -2.f, 3.f), F({200}, 0.5f, 1.5f), F({200})},
       MakeAttrs({{"eps", 1e-5}}),
       1e-4,
       3e-2},
      {"rmsnorm",
       {F({4, 33, 200}, -2.f, 3.f), F({200}, 0.5f, 1.5f)},
       MakeAttrs({{"eps", 1e-6}}),
       1e-4,
       3e-2},
      {"rope",
       {F({2, 19, (4 + 2 * 2) * 16})},
       MakeAttrs({{"n_head", 4}, {"n_kv_head", 2}}),
       1e-5,
       2e-2},
      {"embedding", {Ids({3, 41}, 500), F({500, 72})}, {}, 1e-6, 2e-2},
      {"position_embedding", {F({3, 41, 72}), F({64, 72})}, {}, 1e-6, 2e-2},
      {"cross_entropy",
       {F({3, 29, 1000}, -4.f, 4.f), Targets({3, 29}, 1000)},
       MakeAttrs({{"ignore_index", -100}}),
       1e-5,
       2e-2},
      {"linear", {F({3, 21, 96}), F({80, 96}, -0.2f, 0.2f), F({80})}, {}, 1e-4, 3e-2},
      {"attention",
       {F({2, 67, (4 + 2 * 2) * 32})},
       MakeAttrs({{"n_head", 4}, {"n_kv_head", 2}}),
       1e-4,
       3e-2},
  };
}

uint64_t Next(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}
float Uniform(uint64_t* s, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(Next(s) % (1u << 24)) / (1u << 24);
}

float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }
float RoundF16(float f) { return F16ToFloat(FloatToF16(f)); }

// A host tensor in f32 / i32 and its device twin in `dtype` (f32, bf16 or i32).
struct Pair {
  TensorSpec host_spec;
  std::vector<float> host_f;
  std::vector<int32_t> host_i;
  void* dev = nullptr;
  DType dev_dtype = DType::kF32;

  Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
  ~Pair() { cudaFree(dev); }

  bool is_int() const { return host_spec.dtype == DType::kI32; }
  Tensor host() {
    return is_int() ? Tensor(host_i.data(), host_spec.shape, DType::kI32)
                    : Tensor(host_f.data(), host_spec.shape, DType::kF32);
  }
  Tensor device() const { return Tensor(dev, host_spec.shape, dev_dtype); }

  // Allocates both sides; float values are rounded to the device dtype on both.
  void Init(const Shape& shape, DType dtype, bool is_int_tensor) {
    host_spec = {shape, is_int_tensor ? DType::kI32 : DType::kF32};
    dev_dtype = dtype;
    const int64_t n = NumElements(shape);
    if (is_int_tensor)
      host_i.assign(n, 0);
    else
      host_f.assign(n, 0.f);
    REQUIRE(cudaMalloc(&dev, std::max<size_t>(1, n * DTypeSize(dtype))) == cudaSuccess);
  }
  void Upload() {
    const int64_t n = host_spec.numel();
    if (is_int()) {
      REQUIRE(cudaMemcpy(dev, host_i.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    } else if (dev_dtype == DType::kBF16 || dev_dtype == DType::kF16) {
      const bool bf = dev_dtype == DType::kBF16;
      std::vector<uint16_t> b(n);
      for (int64_t i = 0; i < n; ++i) {
        host_f[i] = bf ? RoundBf16(host_f[i]) : RoundF16(host_f[i]);
        b[i] = bf ? FloatToBf16(host_f[i]) : FloatToF16(host_f[i]);
      }
      REQUIRE(cudaMemcpy(dev, b.data(), n * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    } else {
      REQUIRE(cudaMemcpy(dev, host_f.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    }
  }
  std::vector<float> DownloadF() const {
    const int64_t n = host_spec.numel();
    std::vector<float> out(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    if (dev_dtype == DType::kBF16 || dev_dtype == DType::kF16) {
      std::vector<uint16_t> b(n);
      REQUIRE(cudaMemcpy(b.data(), dev, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
      for (int64_t i = 0; i < n; ++i)
        out[i] = dev_dtype == DType::kBF16 ? Bf16ToFloat(b[i]) : F16ToFloat(b[i]);
    } else {
      REQUIRE(cudaMemcpy(out.data(), dev, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    return out;
  }
  void Fill(uint64_t* rng, float lo, float hi) {
    for (float& v : host_f) v = Uniform(rng, lo, hi);
    Upload();
  }
};

// Compares and reports the worst element; returns true when within the bound.
bool Close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
           double tol) {
  double ss = 0;
  for (float r : ref) ss += static_cast<double>(r) * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(ss / ref.size());
  double worst = 0;
  size_t at = 0;
  bool ok = got.size() == ref.size();
  for (size_t i = 0; ok && i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double bound = tol * (std::fabs(ref[i]) + rms) + 1e-30;
    const double ratio = std::isnan(err) ? INFINITY : err / bound;
    if (ratio > worst) {
      worst = ratio;
      at = i;
    }
  }
  ok = ok && worst <= 1.0;
  if (!ok && !ref.empty())
    UNSCOPED_INFO(what << ": worst element " << at << " cuda " << got[at] << " cpu " << ref[at]
                       << " (" << worst << "x the bound, tol " << tol << ", rms " << rms << ")");
  return ok;
}

void RunCase(const OpCase& c, DType dt) {
  const std::string tag = c.op + "/" + DTypeName(dt);
  const OpDef* def = FindOp(c.op);
  REQUIRE(def != nullptr);
  const Kernel* cpu = FindKernel(c.op, Device::kCpu, DType::kF32);
  const Kernel* cuda = FindKernel(c.op, Device::kCuda, dt);
  REQUIRE(cpu != nullptr);
  if (cuda == nullptr) FAIL("no CUDA kernel registered for " << tag);

  uint64_t rng = std::hash<std::string>()(tag);
  const size_t n_in = c.inputs.size();
  std::vector<Pair> in(n_in);
  std::vector<TensorSpec> cpu_specs, dev_specs;
  for (size_t i = 0; i < n_in; ++i) {
    const InputGen& g = c.inputs[i];
    const bool is_int = g.kind != InputGen::kFloat;
    in[i].Init(g.shape, is_int ? DType::kI32 : dt, is_int);
    if (g.kind == InputGen::kFloat) {
      in[i].Fill(&rng, g.lo, g.hi);
    } else {
      for (int32_t& v : in[i].host_i) {
        v = static_cast<int32_t>(Next(&rng) % g.limit);
        if (g.kind == InputGen::kTargets && Next(&rng) % 7 == 0) v = -100;
      }
      in[i].Upload();
    }
    cpu_specs.push_back(in[i].host_spec);
    dev_specs.push_back({g.shape, in[i].dev_dtype});
  }
  std::vector<TensorSpec> cpu_out, dev_out;
  REQUIRE(def->infer(c.attrs, cpu_specs, &cpu_out).ok());
  REQUIRE(def->infer(c.attrs, dev_specs, &dev_out).ok());
  const std::vector<TensorSpec> saved_specs =
      def->saved ? def->saved(c.attrs, cpu_specs) : std::vector<TensorSpec>{};

  std::vector<Pair> out(cpu_out.size()), saved(saved_specs.size());
  for (size_t i = 0; i < out.size(); ++i) out[i].Init(cpu_out[i].shape, dev_out[i].dtype, false);
  for (size_t i = 0; i < saved.size(); ++i) saved[i].Init(saved_specs[i].shape, DType::kF32, false);

  OpArgs host, dev;
  host.attrs = dev.attrs = &c.attrs;
  host.seed = dev.seed = 0x5eed1234ull;
  for (auto& p : in) {
    host.in.push_back(p.host());
    dev.in.push_back(p.device());
  }
  for (auto& p : out) {
    host.out.push_back(p.host());
    dev.out.push_back(p.device());
  }
  for (auto& p : saved) {
    host.saved.push_back(p.host());
    dev.saved.push_back(p.device());
  }
  // fp16 keeps 3 more mantissa bits than bf16 (2^-11 relative per rounding): bf16's bounds hold.
  const double tol = dt == DType::kF32 ? c.tol_f32 : c.tol_bf16;

  // Forward.
  REQUIRE(cpu->forward(host).ok());
  const Status fs = cuda->forward(dev);
  INFO(tag << " forward: " << fs.ToString());
  REQUIRE(fs.ok());
  bool ok = true;
  for (size_t i = 0; i < out.size(); ++i)
    ok &= Close(tag + " out[" + std::to_string(i) + "]", out[i].DownloadF(), out[i].host_f, tol);
  for (size_t i = 0; i < saved.size(); ++i)
    ok &= Close(tag + " saved[" + std::to_string(i) + "]", saved[i].DownloadF(), saved[i].host_f,
                tol);
  CHECK(ok);

  // Backward with every differentiable gradient wanted, on random initial values.
  std::vector<Pair> gout(out.size()), gin(n_in);
  for (size_t i = 0; i < out.size(); ++i) {
    gout[i].Init(cpu_out[i].shape, dev_out[i].dtype, false);
    gout[i].Fill(&rng, -1.f, 1.f);
    host.grad_out.push_back(gout[i].host());
    dev.grad_out.push_back(gout[i].device());
  }
  for (size_t i = 0; i < n_in; ++i) {
    const bool wanted =
        !(def->non_differentiable_inputs & (1u << i)) && c.inputs[i].kind == InputGen::kFloat;
    if (wanted) {
      gin[i].Init(c.inputs[i].shape, dt, false);
      gin[i].Fill(&rng, -0.5f, 0.5f);
      host.grad_in.push_back(gin[i].host());
      dev.grad_in.push_back(gin[i].device());
    } else {
      host.grad_in.emplace_back();
      dev.grad_in.emplace_back();
    }
  }
  REQUIRE(cpu->backward(host).ok());
  const Status bs = cuda->backward(dev);
  INFO(tag << " backward: " << bs.ToString());
  REQUIRE(bs.ok());
  ok = true;
  for (size_t i = 0; i < n_in; ++i)
    if (gin[i].dev)
      ok &= Close(tag + " grad_in[" + std::to_string(i) + "]", gin[i].DownloadF(), gin[i].host_f,
                  tol);
  CHECK(ok);

  // No gradient wanted: must succeed and write nothing.
  for (Tensor& t : dev.grad_in) t = Tensor();
  CHECK(cuda->backward(dev).ok());
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("every op with a CUDA kernel has a conformance case", "[cuda]") {
  std::set<std::string> covered;
  for (const OpCase& c : Cases()) covered.insert(c.op);
  const std::set<std::string> pending = PendingCudaOps();
  for (const std::string& op : RegisteredOps()) {
    if (pending.count(op)) continue;
    INFO("op " << op << " has no conformance case in Cases()");
    CHECK(covered.count(op) == 1);
  }
  for (const std::string& op : pending) {
    INFO("pending op " << op << " has a conformance case: drop it from PENDING_CUDA_OPS");
    CHECK(covered.count(op) == 0);
  }
}

TEST_CASE("every op with a CUDA kernel matches the CPU reference", "[cuda]") {
  for (const OpCase& c : Cases()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      DYNAMIC_SECTION(c.op << "/" << DTypeName(dt)) { RunCase(c, dt); }
    }
  }
}

TEST_CASE("fused SwiGLU matches the CPU silu and mul composition", "[cuda]") {
  const int64_t n = 100003;
  const Kernel* silu = FindKernel("silu", Device::kCpu, DType::kF32);
  const Kernel* mul = FindKernel("mul", Device::kCpu, DType::kF32);
  REQUIRE((silu && mul));
  uint64_t rng = 42;
  Pair a, b, y, dy, da, db;
  for (Pair* p : {&a, &b, &y, &dy, &da, &db}) p->Init({n}, DType::kF32, false);
  a.Fill(&rng, -6.f, 6.f);
  b.Fill(&rng, -2.f, 2.f);
  dy.Fill(&rng, -1.f, 1.f);
  da.Fill(&rng, -0.5f, 0.5f);
  db.Fill(&rng, -0.5f, 0.5f);
  // CPU: s = silu(a); y = s * b; backward through mul then silu.
  std::vector<float> s(n), ds(n, 0.f), cda = da.host_f, cdb = db.host_f;
  OpArgs sa, ma;
  sa.in = {a.host()};
  sa.out = {Tensor(s.data(), {n}, DType::kF32)};
  REQUIRE(silu->forward(sa).ok());
  ma.in = {Tensor(s.data(), {n}, DType::kF32), b.host()};
  ma.out = {y.host()};
  REQUIRE(mul->forward(ma).ok());
  ma.grad_out = {dy.host()};
  ma.grad_in = {Tensor(ds.data(), {n}, DType::kF32), Tensor(cdb.data(), {n}, DType::kF32)};
  REQUIRE(mul->backward(ma).ok());
  sa.grad_out = {Tensor(ds.data(), {n}, DType::kF32)};
  sa.grad_in = {Tensor(cda.data(), {n}, DType::kF32)};
  REQUIRE(silu->backward(sa).ok());
  const float* no = nullptr;
  REQUIRE(LaunchSwiGluForward(static_cast<const float*>(a.dev), static_cast<const float*>(b.dev),
                              static_cast<float*>(y.dev), n, nullptr) == cudaSuccess);
  REQUIRE(LaunchSwiGluBackward(static_cast<const float*>(a.dev), static_cast<const float*>(b.dev),
                               static_cast<const float*>(dy.dev), static_cast<float*>(da.dev),
                               static_cast<float*>(db.dev), n, nullptr) == cudaSuccess);
  CHECK(Close("swiglu y", y.DownloadF(), y.host_f, 1e-5));
  CHECK(Close("swiglu da", da.DownloadF(), cda, 1e-5));
  CHECK(Close("swiglu db", db.DownloadF(), cdb, 1e-5));
  CHECK(LaunchSwiGluForward(no, no, nullptr, 0, nullptr) == cudaSuccess);
}

TEST_CASE("CUDA kernels run on the thread's current stream", "[cuda]") {
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const Kernel* k = FindKernel("add", Device::kCuda, DType::kF32);
  REQUIRE(k != nullptr);
  const int64_t n = 1 << 20;
  float *a, *b, *y;
  REQUIRE(cudaMalloc(&a, n * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, n * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, n * 4) == cudaSuccess);
  std::vector<float> ones(n, 1.f);
  REQUIRE(cudaMemcpy(a, ones.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(b, ones.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  OpArgs args;
  args.in = {Tensor(a, {n}, DType::kF32), Tensor(b, {n}, DType::kF32)};
  args.out = {Tensor(y, {n}, DType::kF32)};
  {
    cuda::ScopedStream scope(stream);
    CHECK(cuda::CurrentStream() == stream);
    REQUIRE(k->forward(args).ok());
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  }
  CHECK(cuda::CurrentStream() == nullptr);
  std::vector<float> host(n);
  REQUIRE(cudaMemcpy(host.data(), y, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host.front() == 2.f);
  CHECK(host.back() == 2.f);
  cudaFree(a);
  cudaFree(b);
  cudaFree(y);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace ds::kernels
#endif  // DS_HAVE_CUDA
