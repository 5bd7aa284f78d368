// attention's bf16 path (attention_bf16.h) against the fp32 kernel on the same bf16-exact inputs:
// scores accumulate in fp32 from bf16 values, so the log-sum-exp agrees to fp32 rounding; the
// output and the gradients carry P (and dO) rounded to bf16: within 5e-3 of the largest value
// (2.2e-3 measured on an AMX CPU; a dV scaled by 1.01 fails it).
// Every path (the fused one's 32-row blocks in registers, causal blocks of 64 against the keys
// they see, AMX's blocks of 128 against all keys); sequences that are not a multiple of any block
// (one to five blocks, odd lengths), grouped-query heads, heads 16 to 128 wide, batches of 1-3.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/batched_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/registry.h"
#include "runtime/core/cpu_isa.h"
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
  const Bf16AttentionPath path =
      GENERATE(Bf16AttentionPath::kFused, Bf16AttentionPath::kCausal, Bf16AttentionPath::kWhole);
  SetBf16AttentionPath(path);
  const char* names[] = {"fused", "causal", "whole keys"};
  for (const Shape& s : {Shape{2, 100, 4, 4, 32}, Shape{1, 130, 4, 2, 64}, Shape{2, 64, 2, 1, 16},
                         Shape{1, 47, 2, 2, 128}, Shape{3, 33, 3, 1, 48}}) {
    const Bf16AttentionShape shape{s.b, s.t, s.h, s.hkv, s.d, 1.f};
    const Bf16AttentionPath taken = Bf16AttentionPathFor(shape);
    INFO(names[static_cast<int>(path)] << " (taken: " << names[static_cast<int>(taken)] << ") B "
                                       << s.b << " T " << s.t << " H " << s.h << " Hkv " << s.hkv
                                       << " D " << s.d);
    // Forced fused runs fused where the CPU has AVX512_BF16 (the heads here are all 16s).
    if (path == Bf16AttentionPath::kFused && HostCpuIsa() >= CpuIsa::kAvx512Bf16)
      CHECK(taken == Bf16AttentionPath::kFused);
    if (path != Bf16AttentionPath::kFused) CHECK(taken == path);
    std::mt19937 rng(static_cast<uint32_t>(s.t));
    OwnedTensor qkv = RandomTensor({s.b, s.t, (s.h + 2 * s.hkv) * s.d}, rng, -2.f, 2.f);
    OwnedTensor dout = RandomTensor({s.b, s.t, s.h * s.d}, rng);
    for (OwnedTensor* t : {&qkv, &dout})  // bf16-exact values: only the path's own rounding
      for (int64_t i = 0; i < t->view().numel(); ++i)
        t->view().f32()[i] = Bf16ToFloat(FloatToBf16(t->view().f32()[i]));
    const int64_t made = BatchedGemmPrimitivesMade();
    const Run wide = Attention(DType::kF32, qkv, dout, s.h, s.hkv);
    const Run low = Attention(DType::kBF16, qkv, dout, s.h, s.hkv);
    // The batched paths ran (made their primitives; a sequence of one 64-row block is the same
    // product under both blockings, made already); the fused one made none.
    if (taken == Bf16AttentionPath::kFused)
      CHECK(BatchedGemmPrimitivesMade() == made);
    else if (taken == Bf16AttentionPath::kCausal || s.t > 64)
      CHECK(BatchedGemmPrimitivesMade() > made);
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

// qkv and out as bf16 activations (Kernel::bf16_act_inputs / outputs): the output is the fp32
// output rounded once, bit for bit, on both paths (the bf16 path; the fp32 path, which a window
// forces, on a widened copy), and the log-sum-exp is the same.
TEST_CASE("attention reads a bf16 qkv and writes a bf16 out on both paths",
          "[kernels][attention][bf16]") {
  const Kernel* kernel = FindKernel("attention", Device::kCpu, DType::kF32);
  REQUIRE(kernel);
  CHECK(kernel->bf16_act_inputs == 1u);
  CHECK(kernel->bf16_act_outputs == 1u);
  for (int64_t window : {0, 40}) {
    INFO("window " << window << (window ? " (the fp32 path)" : " (the bf16 path where native)"));
    Attrs a;
    a.SetInt("n_head", 4);
    a.SetInt("n_kv_head", 2);
    if (window) a.SetInt("window", window);
    std::mt19937 rng(7);
    OwnedTensor wide = RandomTensor({2, 90, 8 * 32}, rng, -2.f, 2.f);
    OwnedTensor low(wide.view().shape(), DType::kBF16);
    ConvertF32ToBf16(wide.view().f32(), static_cast<uint16_t*>(low.view().data()),
                     wide.view().numel());
    ConvertBf16ToF32(static_cast<const uint16_t*>(low.view().data()), wide.view().f32(),
                     wide.view().numel());
    OpHarness ref("attention", a);  // fp32 tensors, the same kernel and products
    ref.matmul = DType::kBF16;
    ref.inputs.push_back(testing::CopyOf(wide.view()));
    REQUIRE(ref.Forward().ok());
    OwnedTensor out(ref.outputs[0].view().shape(), DType::kBF16);
    OwnedTensor lse(ref.saved[0].view().shape(), DType::kF32);
    OpArgs args;
    args.attrs = &a;
    args.matmul = DType::kBF16;
    args.in = {low.view()};
    args.out = {out.view()};
    args.saved = {lse.view()};
    REQUIRE(kernel->forward(args).ok());
    std::vector<uint16_t> want(static_cast<size_t>(out.view().numel()));
    ConvertF32ToBf16(ref.outputs[0].view().f32(), want.data(), out.view().numel());
    CHECK(std::equal(want.begin(), want.end(), static_cast<const uint16_t*>(out.view().data())));
    CHECK(std::equal(lse.view().f32(), lse.view().f32() + lse.view().numel(),
                     ref.saved[0].view().f32()));
  }
}

}  // namespace
}  // namespace ds::kernels::cpu
