// Kernel::overwrites_fresh_grads and Kernel::bf16_inputs: a kernel told that its gradients are
// fresh (OpArgs::fresh_grads) writes them whole, so buffers full of NaN give what zeroed buffers
// accumulate; without the bits it adds into them. linear reads a bf16 weight as stored with the
// products its widened fp32 copy gives, and embedding (Kernel::bf16_reads) gathers its rows; both
// add into a bf16 gradient where it is stored (Kernel::bf16_param_grads) what the fp32 gradient
// added in with AddF32IntoBf16 gives.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/op_test_util.h"
#include "kernels/registry.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;

OwnedTensor Filled(const Shape& shape, float v) {
  OwnedTensor t(shape, DType::kF32);
  float* p = t.view().f32();
  for (int64_t i = 0; i < t.view().numel(); ++i) p[i] = v;
  return t;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The op's input gradients from zeroed buffers (accumulating) and from NaN-filled ones marked
// fresh, after one forward; grad_out is dy.
struct TwoWays {
  std::vector<OwnedTensor> accumulated, fresh;
};

TwoWays BackwardBothWays(OpHarness& h, const Tensor& dy, const std::vector<bool>& wanted) {
  REQUIRE(h.Forward().ok());
  TwoWays r;
  std::vector<Tensor> zero_views, nan_views;
  for (size_t k = 0; k < h.inputs.size(); ++k) {
    const Shape& s = h.inputs[k].view().shape();
    const bool want = wanted[k];
    r.accumulated.push_back(Filled(want ? s : Shape{1}, 0.f));
    r.fresh.push_back(Filled(want ? s : Shape{1}, std::numeric_limits<float>::quiet_NaN()));
    zero_views.push_back(want ? r.accumulated.back().view() : Tensor());
    nan_views.push_back(want ? r.fresh.back().view() : Tensor());
  }
  h.fresh_grads = 0;
  REQUIRE(h.Backward({dy}, zero_views).ok());
  h.fresh_grads = ~0u;
  REQUIRE(h.Backward({dy}, nan_views).ok());
  h.fresh_grads = 0;
  return r;
}

// What the executor reads off the registry: the bits above are only used where the kernel says
// so (a positional initializer once shifted them into bf16_reads, and the executor zeroed every
// gradient again without any test failing).
TEST_CASE("linear and cross_entropy declare fresh gradients; only linear's weight is bf16",
          "[kernels][fresh]") {
  const Kernel* linear = FindKernel("linear", Device::kCpu, DType::kF32);
  const Kernel* ce = FindKernel("cross_entropy", Device::kCpu, DType::kF32);
  REQUIRE(linear);
  REQUIRE(ce);
  CHECK(linear->overwrites_fresh_grads);
  CHECK(linear->bf16_inputs == 1u << 1);
  CHECK(linear->bf16_reads == 0u);
  CHECK(ce->overwrites_fresh_grads);
  CHECK(ce->bf16_inputs == 0u);
  CHECK(ce->bf16_reads == 0u);
  const Kernel* embedding = FindKernel("embedding", Device::kCpu, DType::kF32);
  REQUIRE(embedding);
  CHECK(embedding->bf16_reads == 1u << 1);
  CHECK_FALSE(embedding->overwrites_fresh_grads);
}

TEST_CASE("linear writes fresh gradients whole, fp32 and bf16 products", "[kernels][fresh]") {
  for (DType matmul : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(7);
    OpHarness h("linear", Attrs());
    h.matmul = matmul;
    h.inputs.push_back(RandomTensor({6, 5, 24}, rng));
    h.inputs.push_back(RandomTensor({40, 24}, rng));
    h.inputs.push_back(RandomTensor({40}, rng));
    OwnedTensor dy = RandomTensor({6, 5, 40}, rng);
    TwoWays r = BackwardBothWays(h, dy.view(), {true, true, true});
    for (size_t k = 0; k < 3; ++k) {
      INFO("matmul " << DTypeName(matmul) << ", input " << k);
      CHECK(SameBits(r.accumulated[k].view(), r.fresh[k].view()));
    }
    // Without the bits the same backward adds: twice the gradient.
    REQUIRE(h.Backward({dy.view()}, {r.accumulated[0].view(), Tensor(), Tensor()}).ok());
    CHECK(std::fabs(r.accumulated[0].view().f32()[3] - 2 * r.fresh[0].view().f32()[3]) <
          1e-5f * (1 + std::fabs(r.fresh[0].view().f32()[3])));
  }
}

TEST_CASE("gelu, silu, add and mul write fresh gradients whole", "[kernels][fresh]") {
  std::mt19937 rng(17);
  for (const char* op : {"gelu", "silu", "add", "mul"}) {
    INFO(op);
    const bool binary = std::string(op) == "add" || std::string(op) == "mul";
    OpHarness h(op, Attrs());
    h.inputs.push_back(RandomTensor({7, 301}, rng, -3.f, 3.f));
    if (binary) h.inputs.push_back(RandomTensor({7, 301}, rng));
    OwnedTensor dy = RandomTensor({7, 301}, rng);
    TwoWays r = BackwardBothWays(h, dy.view(), std::vector<bool>(h.inputs.size(), true));
    for (size_t k = 0; k < h.inputs.size(); ++k) {
      INFO("input " << k);
      CHECK(SameBits(r.accumulated[k].view(), r.fresh[k].view()));
    }
    CHECK(FindKernel(op, Device::kCpu, DType::kF32)->overwrites_fresh_grads);
  }
}

TEST_CASE("cross_entropy writes a fresh gradient whole, ignored rows as zeros",
          "[kernels][fresh]") {
  std::mt19937 rng(3);
  OpHarness h("cross_entropy", Attrs());
  h.inputs.push_back(RandomTensor({4, 300}, rng, -3.f, 3.f));
  h.inputs.push_back(IntTensor({4}, {5, -100, 299, 0}));
  OwnedTensor dl = Filled({}, 1.f);
  TwoWays r = BackwardBothWays(h, dl.view(), {true, false});
  CHECK(SameBits(r.accumulated[0].view(), r.fresh[0].view()));
  CHECK(r.fresh[0].view().f32()[300 + 7] == 0.f);  // the ignored row

  // Every row ignored: nothing to score, a fresh gradient is all zeros.
  OpHarness none("cross_entropy", Attrs());
  none.inputs.push_back(RandomTensor({2, 300}, rng));
  none.inputs.push_back(IntTensor({2}, {-100, -100}));
  TwoWays z = BackwardBothWays(none, dl.view(), {true, false});
  CHECK(SameBits(z.accumulated[0].view(), z.fresh[0].view()));
}

TEST_CASE("linear multiplies a bf16 weight as stored, as its widened copy", "[kernels][bf16]") {
  const Kernel* k = FindKernel("linear", Device::kCpu, DType::kF32);
  REQUIRE(k);
  CHECK(k->bf16_inputs == (1u << 1));  // the weight, not x or the bias
  std::mt19937 rng(5);
  OwnedTensor x = RandomTensor({8, 32}, rng), w32 = RandomTensor({16, 32}, rng);
  OwnedTensor w16({16, 32}, DType::kBF16), dy = RandomTensor({8, 16}, rng);
  ConvertF32ToBf16(w32.view().f32(), static_cast<uint16_t*>(w16.view().data()), 16 * 32);
  ConvertBf16ToF32(static_cast<const uint16_t*>(w16.view().data()), w32.view().f32(), 16 * 32);
  std::vector<OwnedTensor> y, dx, dw;
  for (const OwnedTensor* w : {&w32, &w16}) {
    OpHarness h("linear", Attrs());
    h.matmul = DType::kBF16;
    h.inputs.push_back(testing::CopyOf(x.view()));
    h.inputs.push_back(testing::CopyOf(w->view()));
    REQUIRE(h.Forward().ok());
    y.push_back(testing::CopyOf(h.outputs[0].view()));
    dx.push_back(Filled({8, 32}, 0.f));
    dw.push_back(Filled({16, 32}, 0.f));
    REQUIRE(h.Backward({dy.view()}, {dx.back().view(), dw.back().view()}).ok());
  }
  CHECK(SameBits(y[0].view(), y[1].view()));
  CHECK(SameBits(dx[0].view(), dx[1].view()));
  CHECK(SameBits(dw[0].view(), dw[1].view()));
}

TEST_CASE("embedding gathers a bf16 table as stored, as its widened copy", "[kernels][bf16]") {
  const Kernel* k = FindKernel("embedding", Device::kCpu, DType::kF32);
  REQUIRE(k);
  CHECK(k->bf16_reads == (1u << 1));  // the table, in any product mode
  CHECK(k->bf16_inputs == 0u);
  std::mt19937 rng(6);
  OwnedTensor w32 = RandomTensor({50, 24}, rng), w16({50, 24}, DType::kBF16);
  ConvertF32ToBf16(w32.view().f32(), static_cast<uint16_t*>(w16.view().data()), 50 * 24);
  ConvertBf16ToF32(static_cast<const uint16_t*>(w16.view().data()), w32.view().f32(), 50 * 24);
  OwnedTensor dy = RandomTensor({2, 3, 24}, rng);
  std::vector<OwnedTensor> y, dw;
  for (const OwnedTensor* w : {&w32, &w16}) {
    OpHarness h("embedding", Attrs());
    h.inputs.push_back(IntTensor({2, 3}, {0, 49, 7, 7, 13, 0}));
    h.inputs.push_back(testing::CopyOf(w->view()));
    h.outputs.emplace_back(Shape{2, 3, 24}, DType::kF32);  // host activations are fp32
    REQUIRE(h.Forward().ok());
    y.push_back(testing::CopyOf(h.outputs[0].view()));
    dw.push_back(Filled({50, 24}, 0.f));
    REQUIRE(h.Backward({dy.view()}, {Tensor(), dw.back().view()}).ok());
  }
  CHECK(SameBits(y[0].view(), y[1].view()));
  CHECK(SameBits(dw[0].view(), dw[1].view()));
  CHECK(y[1].view().f32()[24 + 5] == w32.view().f32()[49 * 24 + 5]);  // token 1 is id 49
}

// The fp32 gradient of one backward (from zero) added into `start` with AddF32IntoBf16, and the
// bf16 gradient the kernel adds into a copy of `start` itself.
struct BothGrads {
  std::vector<uint16_t> via_fp32, direct;
};

BothGrads ParamGradBothWays(const std::string& op, const Attrs& attrs, std::vector<OwnedTensor> in,
                            const OwnedTensor& dy, int k, const std::vector<uint16_t>& start) {
  BothGrads r{start, start};
  for (bool direct : {false, true}) {
    OpHarness h(op, attrs);
    h.matmul = DType::kBF16;
    for (const OwnedTensor& t : in) h.inputs.push_back(testing::CopyOf(t.view()));
    REQUIRE(h.Forward().ok());
    const Shape& shape = in[k].view().shape();
    OwnedTensor g32 = Filled(shape, 0.f);
    Tensor g16(direct ? r.direct.data() : nullptr, shape, DType::kBF16);
    std::vector<Tensor> grads(in.size());
    grads[k] = direct ? g16 : g32.view();
    REQUIRE(h.Backward({dy.view()}, grads).ok());
    if (!direct)
      AddF32IntoBf16(g32.view().f32(), r.via_fp32.data(), static_cast<int64_t>(start.size()));
  }
  return r;
}

std::vector<uint16_t> RandomBf16(int64_t n, std::mt19937& rng) {
  OwnedTensor f = RandomTensor({n}, rng);
  std::vector<uint16_t> b(static_cast<size_t>(n));
  ConvertF32ToBf16(f.view().f32(), b.data(), n);
  return b;
}

TEST_CASE("linear and embedding add into a bf16 parameter gradient as stored", "[kernels][bf16]") {
  const Kernel* linear = FindKernel("linear", Device::kCpu, DType::kF32);
  const Kernel* embedding = FindKernel("embedding", Device::kCpu, DType::kF32);
  REQUIRE((linear && embedding));
  CHECK(linear->bf16_param_grads == (1u << 1));  // dW, not the bias's
  CHECK(embedding->bf16_param_grads == (1u << 1));
  std::mt19937 rng(8);
  {
    std::vector<OwnedTensor> in;
    in.push_back(RandomTensor({24, 40}, rng));
    in.push_back(RandomTensor({48, 40}, rng));
    const OwnedTensor dy = RandomTensor({24, 48}, rng);
    const BothGrads g =
        ParamGradBothWays("linear", Attrs(), std::move(in), dy, 1, RandomBf16(48 * 40, rng));
    int64_t exact = 0, far = 0;
    for (size_t i = 0; i < g.direct.size(); ++i) {
      exact += g.direct[i] == g.via_fp32[i];
      far += std::abs(int(g.direct[i]) - int(g.via_fp32[i])) > 1;  // more than one bf16 step
    }
    CHECK(far == 0);  // oneDNN's bf16-output primitive may sum in another order
    CHECK(exact >= static_cast<int64_t>(g.direct.size()) * 95 / 100);
  }
  // Repeated ids, ids outside a vocab-parallel slice [10, 60): bit for bit, untouched rows kept.
  Attrs slice;
  slice.SetInt("vocab_start", 10);
  slice.SetInt("vocab_size", 100);
  for (const Attrs& attrs : {Attrs(), slice}) {
    std::vector<OwnedTensor> in;
    in.push_back(IntTensor({2, 4}, {12, 49, 7, 12, 40, 12, 3, 49}));
    in.push_back(RandomTensor({50, 24}, rng));
    const OwnedTensor dy = RandomTensor({2, 4, 24}, rng);
    const std::vector<uint16_t> start = RandomBf16(50 * 24, rng);
    const BothGrads g = ParamGradBothWays("embedding", attrs, std::move(in), dy, 1, start);
    CHECK(g.direct == g.via_fp32);
    CHECK(g.direct[20 * 24 + 3] == start[20 * 24 + 3]);  // row 20 is no token's
  }
  // Enough ids for the rows to go to several threads (ParallelFor's grain).
  std::vector<int32_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 1000);
  std::vector<OwnedTensor> in;
  in.push_back(IntTensor({4, 1024}, ids));
  in.push_back(RandomTensor({1000, 256}, rng));
  const OwnedTensor dy = RandomTensor({4, 1024, 256}, rng);
  const BothGrads g =
      ParamGradBothWays("embedding", Attrs(), std::move(in), dy, 1, RandomBf16(1000 * 256, rng));
  CHECK(g.direct == g.via_fp32);
}

}  // namespace
}  // namespace ds::kernels::cpu
