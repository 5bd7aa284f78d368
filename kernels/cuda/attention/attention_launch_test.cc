// CPU-side tests of the CUDA attention (toolkit needed, GPU not): which kernels a call takes,
// shape validation at the launcher and at the registry glue, scratch sizes, and that every
// error is reported before anything touches a device.
#include <catch2/catch.hpp>
#include <cstdint>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/registry.h"
#include "runtime/cuda/device.h"

namespace ds::kernels::attention {
namespace {

AttentionShape Shape4(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t d) {
  AttentionShape s;
  s.batch = b;
  s.seq = t;
  s.n_head = h;
  s.n_kv_head = hkv;
  s.head_dim = d;
  return s;
}

const void* Addr(uintptr_t v) { return reinterpret_cast<const void*>(v); }

TEST_CASE("ChooseAttentionPath: flash only for aligned bf16 with D 64 or 128", "[attention]") {
  const void* a = Addr(0x1000);
  CHECK(ChooseAttentionPath(Shape4(2, 100, 4, 2, 64), AttentionType::kBF16, a, a, nullptr,
                            nullptr) == AttentionPath::kFlash);
  CHECK(ChooseAttentionPath(Shape4(2, 100, 4, 2, 128), AttentionType::kBF16, a, a, a, a) ==
        AttentionPath::kFlash);
  CHECK(ChooseAttentionPath(Shape4(2, 100, 4, 2, 64), AttentionType::kF32, a, a, nullptr,
                            nullptr) == AttentionPath::kSimple);
  CHECK(ChooseAttentionPath(Shape4(2, 100, 4, 2, 64), AttentionType::kF16, a, a, nullptr,
                            nullptr) == AttentionPath::kSimple);  // fp16: the simple kernels
  CHECK(ChooseAttentionPath(Shape4(2, 100, 4, 2, 96), AttentionType::kBF16, a, a, nullptr,
                            nullptr) == AttentionPath::kSimple);
  // A view 8 bytes into a buffer cannot feed 16-byte cp.async copies.
  CHECK(ChooseAttentionPath(Shape4(2, 100, 4, 2, 64), AttentionType::kBF16, a, Addr(0x1008),
                            nullptr, nullptr) == AttentionPath::kSimple);
}

TEST_CASE("AttentionScratchBytes: D_i rows, plus the fp32 dQ accumulator for flash",
          "[attention]") {
  const AttentionShape s = Shape4(2, 100, 4, 2, 64);
  const size_t rows = 2 * 4 * 100 * sizeof(float);  // 3200 -> padded to 3328
  CHECK(AttentionScratchBytes(s, AttentionPath::kSimple) == (rows + 255) / 256 * 256);
  CHECK(AttentionScratchBytes(s, AttentionPath::kFlash) ==
        (rows + 255) / 256 * 256 + 2 * 4 * 100 * 64 * sizeof(float));
  CHECK(AttentionScratchBytes(Shape4(2, 100, 3, 2, 64), AttentionPath::kFlash) == 0);
}

TEST_CASE("Attention launchers reject shapes the kernels cannot take", "[attention]") {
  const AttentionType t = AttentionType::kF32;
  const AttentionPath simple = AttentionPath::kSimple;
  CHECK(LaunchAttentionForward(Shape4(1, 8, 3, 2, 64), t, simple, nullptr, nullptr, nullptr,
                               nullptr) == cudaErrorInvalidValue);  // 3 heads, 2 kv heads
  CHECK(LaunchAttentionForward(Shape4(1, 8, 2, 1, 300), t, simple, nullptr, nullptr, nullptr,
                               nullptr) == cudaErrorInvalidValue);  // D > 256
  CHECK(LaunchAttentionForward(Shape4(1, 8, 0, 1, 64), t, simple, nullptr, nullptr, nullptr,
                               nullptr) == cudaErrorInvalidValue);
  // Flash asked for f32 or a misaligned pointer: refused, not silently run.
  CHECK(LaunchAttentionForward(Shape4(1, 8, 2, 1, 64), t, AttentionPath::kFlash, Addr(0x1000),
                               const_cast<void*>(Addr(0x2000)), nullptr,
                               nullptr) == cudaErrorInvalidValue);
  CHECK(LaunchAttentionForward(Shape4(1, 8, 2, 1, 64), AttentionType::kBF16, AttentionPath::kFlash,
                               Addr(0x1002), const_cast<void*>(Addr(0x2000)), nullptr,
                               nullptr) == cudaErrorInvalidValue);
  // Empty batch or sequence: nothing to do.
  CHECK(LaunchAttentionForward(Shape4(0, 8, 2, 1, 64), t, simple, nullptr, nullptr, nullptr,
                               nullptr) == cudaSuccess);
  CHECK(LaunchAttentionBackward(Shape4(2, 0, 2, 1, 64), t, simple, nullptr, nullptr, nullptr,
                                nullptr, nullptr, nullptr, nullptr) == cudaSuccess);
}

TEST_CASE("CUDA attention: registered for f32 and bf16; bad calls are InvalidArgument",
          "[attention]") {
  REQUIRE(FindKernel("attention", Device::kCuda, DType::kF32) != nullptr);
  REQUIRE(FindKernel("attention", Device::kCuda, DType::kBF16) != nullptr);
  const Kernel* k = FindKernel("attention", Device::kCuda, DType::kBF16);
  Attrs attrs;
  attrs.SetInt("n_head", 4);
  attrs.SetInt("n_kv_head", 2);
  float dummy[4];
  OpArgs args;
  args.attrs = &attrs;
  // B=2, T=3, (4 + 2 * 2) * 16 = 128 wide: D = 16.
  args.in = {Tensor(dummy, {2, 3, 128}, DType::kBF16)};
  args.out = {Tensor(dummy, {2, 3, 64}, DType::kBF16)};
  args.saved = {Tensor(dummy, {2, 4, 3}, DType::kF32)};

  SECTION("width not a multiple of H + 2 Hkv") {
    args.in[0] = Tensor(dummy, {2, 3, 100}, DType::kBF16);
    const Status s = k->forward(args);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("multiple") != std::string::npos);
  }
  SECTION("heads not grouped evenly") {
    attrs.SetInt("n_kv_head", 3);
    CHECK(k->forward(args).code() == StatusCode::kInvalidArgument);
  }
  SECTION("saved lse of the wrong shape or type") {
    args.saved[0] = Tensor(dummy, {2, 3, 4}, DType::kF32);
    CHECK(k->forward(args).code() == StatusCode::kInvalidArgument);
    args.saved[0] = Tensor(dummy, {2, 4, 3}, DType::kBF16);
    CHECK(k->forward(args).code() == StatusCode::kInvalidArgument);
  }
  SECTION("f32 tensors to the bf16 kernel") {
    args.in[0] = Tensor(dummy, {2, 3, 128}, DType::kF32);
    CHECK(k->forward(args).code() == StatusCode::kInvalidArgument);
  }
  SECTION("backward with dqkv undefined does nothing, even without a device") {
    args.grad_out = {Tensor(dummy, {2, 3, 64}, DType::kBF16)};
    args.grad_in = {Tensor()};
    CHECK(k->backward(args).ok());
  }
  SECTION("backward with a dout of the wrong shape") {
    args.grad_out = {Tensor(dummy, {2, 3, 32}, DType::kBF16)};
    args.grad_in = {Tensor(dummy, {2, 3, 128}, DType::kBF16)};
    CHECK(k->backward(args).code() == StatusCode::kInvalidArgument);
  }
  SECTION("without a device a valid call fails cleanly") {
    if (!cuda::CudaAvailable()) CHECK_FALSE(k->forward(args).ok());
  }
}

}  // namespace
}  // namespace ds::kernels::attention
