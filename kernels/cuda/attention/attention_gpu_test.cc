// GPU test: the CUDA attention kernel (f32, bf16) against the CPU op: out, the saved lse
// and the accumulated dqkv, for multi-head, grouped-query and multi-query shapes, sequence
// lengths that are not multiples of the 64-row tiles, head dims 64 and 128 (the flash path
// in bf16) and 32 and 80 (the simple path in bf16). Also: both bf16 paths agree with each
// other, an undefined dqkv is skipped, and launches follow the current stream.
//
// Needs a GPU. Without one it prints "SKIPPED: no CUDA device (...)" and exits 77
// (kernels/cuda/README.md); any other probe failure exits 1.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/cuda/device.h"
#include "tests/testing/test_values.h"

#if DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/registry.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/stream_context.h"

namespace ds::kernels::attention {
namespace {

class DeviceTensor {
 public:
  DeviceTensor(const std::vector<float>& host, DType t) : n_(host.size()), t_(t) {
    REQUIRE(cudaMalloc(&ptr_, std::max<size_t>(1, n_ * DTypeSize(t))) == cudaSuccess);
    std::vector<uint8_t> bytes(n_ * DTypeSize(t));
    for (size_t i = 0; i < n_; ++i) StoreFloat(bytes.data(), t, i, host[i]);
    REQUIRE(cudaMemcpy(ptr_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(ptr_); }
  void* get() const { return ptr_; }
  Tensor view(Shape s) const { return Tensor(ptr_, std::move(s), t_); }
  std::vector<float> Download() const {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<uint8_t> bytes(n_ * DTypeSize(t_));
    REQUIRE(cudaMemcpy(bytes.data(), ptr_, bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<float> host(n_);
    for (size_t i = 0; i < n_; ++i) host[i] = LoadFloat(bytes.data(), t_, i);
    return host;
  }

 private:
  size_t n_;
  DType t_;
  void* ptr_ = nullptr;
};

struct Case {
  int64_t b, t, h, hkv, d;
};

// Passes when every |got - want| <= atol + rtol |want|, with atol = rel_to_max * max |scale|
// where `scale` is what the kernel computed (the gradient increment for dqkv, since dqkv
// starts from values of its own).
void ExpectClose(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                 const std::vector<float>& base, double rel_to_max, double rtol) {
  REQUIRE(got.size() == want.size());
  double max_mag = 0;
  for (size_t i = 0; i < want.size(); ++i)
    max_mag = std::max(max_mag, std::fabs(double(want[i]) - (base.empty() ? 0.0 : base[i])));
  const double atol = rel_to_max * max_mag + 1e-6;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = std::fabs(double(got[i]) - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (!(r <= worst)) {  // NaN sticks
      worst = std::isnan(r) ? 1e30 : r;
      at = i;
    }
  }
  INFO(what << ": worst ratio " << worst << " at " << at << " got " << got[at] << " want "
            << want[at] << " (max magnitude " << max_mag << ")");
  CHECK(worst <= 1.0);
}

// Runs the CPU op (fp32) and the CUDA kernel of type t on the same values.
void CompareWithCpu(const Case& c, DType t) {
  const int64_t width = (c.h + 2 * c.hkv) * c.d;
  const Shape qkv_shape{c.b, c.t, width}, out_shape{c.b, c.t, c.h * c.d}, lse_shape{c.b, c.h, c.t};
  const std::vector<float> qkv =
      testing::RoundedTo(testing::RandomValues(c.b * c.t * width, -1.5f, 1.5f, 1), t);
  const std::vector<float> dout =
      testing::RoundedTo(testing::RandomValues(c.b * c.t * c.h * c.d, -1, 1, 2), t);
  const std::vector<float> dqkv0 =
      testing::RoundedTo(testing::RandomValues(c.b * c.t * width, -0.05f, 0.05f, 3), t);
  Attrs attrs;
  attrs.SetInt("n_head", c.h);
  attrs.SetInt("n_kv_head", c.hkv);

  std::vector<float> out_ref(c.b * c.t * c.h * c.d), lse_ref(c.b * c.h * c.t), dqkv_ref = dqkv0;
  {
    const Kernel* cpu = FindKernel("attention", Device::kCpu, DType::kF32);
    REQUIRE(cpu != nullptr);
    auto host = [](const std::vector<float>& v, Shape s) {
      return Tensor(const_cast<float*>(v.data()), std::move(s), DType::kF32);
    };
    OpArgs a;
    a.attrs = &attrs;
    a.in = {host(qkv, qkv_shape)};
    a.out = {host(out_ref, out_shape)};
    a.saved = {host(lse_ref, lse_shape)};
    REQUIRE(cpu->forward(a).ok());
    a.grad_out = {host(dout, out_shape)};
    a.grad_in = {host(dqkv_ref, qkv_shape)};
    REQUIRE(cpu->backward(a).ok());
  }

  DeviceTensor d_qkv(qkv, t), d_out(std::vector<float>(out_ref.size(), 7.f), t),
      d_lse(std::vector<float>(lse_ref.size()), DType::kF32), d_dout(dout, t), d_dqkv(dqkv0, t);
  const Kernel* gpu = FindKernel("attention", Device::kCuda, t);
  REQUIRE(gpu != nullptr);
  OpArgs a;
  a.attrs = &attrs;
  a.in = {d_qkv.view(qkv_shape)};
  a.out = {d_out.view(out_shape)};
  a.saved = {d_lse.view(lse_shape)};
  REQUIRE(gpu->forward(a).ok());
  a.grad_out = {d_dout.view(out_shape)};
  a.grad_in = {d_dqkv.view(qkv_shape)};
  REQUIRE(gpu->backward(a).ok());

  // bf16: inputs are exact, but P and dS are rounded to bf16 before their products and the
  // results are rounded on store (2^-8 relative); fp32 differs only in summation order.
  const bool bf = t == DType::kBF16;
  ExpectClose("out", d_out.Download(), out_ref, {}, bf ? 2e-2 : 2e-5, bf ? 1e-2 : 1e-5);
  ExpectClose("lse", d_lse.Download(), lse_ref, {}, bf ? 2e-3 : 1e-5, bf ? 1e-3 : 1e-6);
  ExpectClose("dqkv", d_dqkv.Download(), dqkv_ref, dqkv0, bf ? 3e-2 : 1e-4, bf ? 1e-2 : 1e-5);
}

TEST_CASE("CUDA attention matches the CPU op", "[cuda][attention]") {
  const DType t = GENERATE(DType::kF32, DType::kBF16);
  const Case c = GENERATE(Case{1, 1, 1, 1, 64},     // one token
                          Case{2, 77, 4, 2, 64},    // GQA, T not a multiple of 64
                          Case{1, 200, 4, 4, 128},  // MHA, D 128
                          Case{2, 130, 6, 2, 128},  // GQA 3:1, D 128
                          Case{1, 300, 8, 1, 64},   // MQA, several key blocks
                          Case{1, 256, 2, 2, 128},  // T a multiple of the tiles
                          Case{2, 45, 4, 2, 32},    // bf16 simple path (D 32)
                          Case{1, 70, 2, 1, 80});   // bf16 simple path (D 80)
  CAPTURE(DTypeName(t), c.b, c.t, c.h, c.hkv, c.d);
  CompareWithCpu(c, t);
}

TEST_CASE("CUDA attention: bf16 flash and simple kernels agree", "[cuda][attention]") {
  AttentionShape s;
  s.batch = 2;
  s.seq = 150;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = GENERATE(int64_t{64}, int64_t{128});
  CAPTURE(s.head_dim);
  const int64_t n_qkv = s.batch * s.seq * s.row(), n_out = s.batch * s.seq * s.n_head * s.head_dim;
  const int64_t n_lse = s.batch * s.n_head * s.seq;
  const std::vector<float> qkv = testing::RandomValues(n_qkv, -1.5f, 1.5f, 9),
                           dout = testing::RandomValues(n_out, -1, 1, 10);
  DeviceTensor d_qkv(qkv, DType::kBF16), d_dout(dout, DType::kBF16);
  std::vector<std::vector<float>> outs, grads;
  for (AttentionPath path : {AttentionPath::kSimple, AttentionPath::kFlash}) {
    DeviceTensor d_out(std::vector<float>(n_out), DType::kBF16),
        d_lse(std::vector<float>(n_lse), DType::kF32),
        d_dqkv(std::vector<float>(n_qkv), DType::kBF16);
    DeviceTensor scratch(std::vector<float>(AttentionScratchBytes(s, path) / 4 + 1), DType::kF32);
    REQUIRE(LaunchAttentionForward(s, AttentionType::kBF16, path, d_qkv.get(), d_out.get(),
                                   static_cast<float*>(d_lse.get()), nullptr) == cudaSuccess);
    REQUIRE(LaunchAttentionBackward(s, AttentionType::kBF16, path, d_qkv.get(), d_out.get(),
                                    d_dout.get(), static_cast<float*>(d_lse.get()), d_dqkv.get(),
                                    scratch.get(), nullptr) == cudaSuccess);
    outs.push_back(d_out.Download());
    grads.push_back(d_dqkv.Download());
  }
  ExpectClose("out", outs[1], outs[0], {}, 2e-2, 1e-2);
  ExpectClose("dqkv", grads[1], grads[0], {}, 3e-2, 1e-2);
}

TEST_CASE("CUDA attention: undefined dqkv is skipped; the current stream is used",
          "[cuda][attention]") {
  const Case c{1, 70, 2, 1, 64};
  const int64_t width = (c.h + 2 * c.hkv) * c.d;
  Attrs attrs;
  attrs.SetInt("n_head", c.h);
  attrs.SetInt("n_kv_head", c.hkv);
  DeviceTensor d_qkv(testing::RandomValues(c.t * width, -1, 1, 4), DType::kBF16),
      d_out(std::vector<float>(c.t * c.h * c.d, 3.f), DType::kBF16),
      d_lse(std::vector<float>(c.h * c.t), DType::kF32),
      d_dout(testing::RandomValues(c.t * c.h * c.d, -1, 1, 5), DType::kBF16);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    cuda::ScopedStream scope(stream);
    const Kernel* gpu = FindKernel("attention", Device::kCuda, DType::kBF16);
    OpArgs a;
    a.attrs = &attrs;
    a.in = {d_qkv.view({1, c.t, width})};
    a.out = {d_out.view({1, c.t, c.h * c.d})};
    a.saved = {d_lse.view({1, c.h, c.t})};
    REQUIRE(gpu->forward(a).ok());
    a.grad_out = {d_dout.view({1, c.t, c.h * c.d})};
    a.grad_in = {Tensor()};
    REQUIRE(gpu->backward(a).ok());
  }
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> out = d_out.Download();
  // Row 0 attends to key 0 only: out equals v_0 of its kv head.
  std::vector<float> qkv = d_qkv.Download();
  for (int64_t d = 0; d < c.d; ++d)
    CHECK(out[d] == Approx(qkv[(c.h + 2 * c.hkv - 1) * c.d + d]).margin(1e-2));
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

}  // namespace
}  // namespace ds::kernels::attention
#endif  // DS_HAVE_CUDA
