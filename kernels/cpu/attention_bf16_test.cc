// attention's bf16 path (attention_bf16.h) against the fp32 kernel on the same bf16-exact inputs:
// scores accumulate in fp32 from bf16 values, so the log-sum-exp agrees to fp32 rounding; the
// output and the gradients carry P (and dO) rounded to bf16: within 5e-3 of the largest value
// (2.2e-3 measured on an AMX CPU; a dV scaled by 1.01 fails it).
// Sequences that are not a multiple of the 64-row block, grouped-query heads, batches of 2.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/batched_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/op_test_util.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

using testing::OpHarness;
using testing::RandomTensor;

struct Run {
  std::vector<float> out, lse, dqkv;
};

Run Attention(DType matmul, const OwnedTensor& qkv, const OwnedTensor& dout, int64_t heads,
              int64_t kv_heads) {
  Attrs a;
  a.SetInt("n_head", heads);
  a.SetInt("n_kv_head", kv_heads);
  OpHarness h("attention", a);
  h.matmul = matmul;
  h.inputs.push_back(testing::CopyOf(qkv.view()));
  REQUIRE(h.Forward().ok());
  OwnedTensor grad(qkv.view().shape(), DType::kF32);
  REQUIRE(h.Backward({dout.view()}, {grad.view()}).ok());
  const Tensor o = h.outputs[0].view(), l = h.saved[0].view(), g = grad.view();
  return {{o.f32(), o.f32() + o.numel()},
          {l.f32(), l.f32() + l.numel()},
          {g.f32(), g.f32() + g.numel()}};
}

// The largest |a - b| over the largest |b|.
double RelMax(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return err / scale;
}

TEST_CASE("attention's bf16 path follows the fp32 kernel within bf16 rounding",
          "[kernels][attention][bf16]") {
  if (!HasNativeBf16Gemm()) {
    WARN("oneDNN " << OneDnnIsa() << " has no native bf16 matmul: the bf16 path is not taken");
    return;
  }
  struct Shape {
    int64_t b, t, h, hkv, d;
  };
  for (const Shape& s :
       {Shape{2, 100, 4, 4, 32}, Shape{1, 130, 4, 2, 64}, Shape{2, 64, 2, 1, 16}}) {
    INFO("B " << s.b << " T " << s.t << " H " << s.h << " Hkv " << s.hkv << " D " << s.d);
    std::mt19937 rng(static_cast<uint32_t>(s.t));
    OwnedTensor qkv = RandomTensor({s.b, s.t, (s.h + 2 * s.hkv) * s.d}, rng, -2.f, 2.f);
    OwnedTensor dout = RandomTensor({s.b, s.t, s.h * s.d}, rng);
    for (OwnedTensor* t : {&qkv, &dout})  // bf16-exact values: only the path's own rounding
      for (int64_t i = 0; i < t->view().numel(); ++i)
        t->view().f32()[i] = Bf16ToFloat(FloatToBf16(t->view().f32()[i]));
    const int64_t made = BatchedGemmPrimitivesMade();
    const Run wide = Attention(DType::kF32, qkv, dout, s.h, s.hkv);
    const Run low = Attention(DType::kBF16, qkv, dout, s.h, s.hkv);
    CHECK(BatchedGemmPrimitivesMade() > made);  // the bf16 path ran
    CHECK(RelMax(low.lse, wide.lse) < 1e-5);
    CHECK(RelMax(low.out, wide.out) < 5e-3);
    CHECK(RelMax(low.dqkv, wide.dqkv) < 5e-3);
    // The gradients of every part: queries, keys, values.
    const int64_t row = (s.h + 2 * s.hkv) * s.d;
    for (int part = 0; part < 3; ++part) {
      const int64_t c0 = part == 0 ? 0 : (s.h + (part - 1) * s.hkv) * s.d;
      const int64_t w = (part == 0 ? s.h : s.hkv) * s.d;
      std::vector<float> a, b;
      for (int64_t r = 0; r < s.b * s.t; ++r)
        for (int64_t j = c0; j < c0 + w; ++j) {
          a.push_back(low.dqkv[r * row + j]);
          b.push_back(wide.dqkv[r * row + j]);
        }
      INFO("part " << part);
      CHECK(RelMax(a, b) < 5e-3);
    }
  }
}

}  // namespace
}  // namespace ds::kernels::cpu
