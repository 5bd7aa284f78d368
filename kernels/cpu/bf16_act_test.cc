// Kernel::bf16_act_inputs / bf16_act_outputs: in a bf16 step the kernels that declare them read
// and write bf16 activations, and (bf16_grad_inputs / outputs) their gradients. Each computes
// what its fp32 form computes on the widened inputs, each output rounded once: bit for bit
// against the fp32 kernel run on widened copies, fresh bf16 gradients written whole (linear's
// outputs within one bf16 step: oneDNN writes them from other primitives).
#include <cmath>
#include <cstring>
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

OwnedTensor Round(const Tensor& f32) {
  OwnedTensor b(f32.shape(), DType::kBF16);
  ConvertF32ToBf16(f32.f32(), static_cast<uint16_t*>(b.view().data()), f32.numel());
  return b;
}

OwnedTensor Widen(const Tensor& bf16) {
  OwnedTensor f(bf16.shape(), DType::kF32);
  ConvertBf16ToF32(static_cast<const uint16_t*>(bf16.data()), f.view().f32(), bf16.numel());
  return f;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The largest distance of a bf16 tensor from an fp32 one, in bf16 steps (the spacing of bf16
// values at the fp32 value: 8 significant bits); rounding once is at most half a step.
double BfSteps(const Tensor& got, const Tensor& want) {
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.f32()[i];
    const double g = Bf16ToFloat(static_cast<const uint16_t*>(got.data())[i]);
    int e = 0;
    std::frexp(w, &e);  // |w| in [2^(e-1), 2^e)
    worst = std::max(worst, std::fabs(g - w) / std::ldexp(1.0, std::max(e, -120) - 8));
  }
  return worst;
}

struct Case {
  std::string op;
  Attrs attrs;
  std::vector<OwnedTensor> inputs;  // fp32 (ints as they are)
  uint32_t bf16_in = 0, bf16_out = 0;
  uint32_t bf16_grad_in = 0, bf16_grad_out = 0;  // gradients: written fresh / read in bf16
  DType matmul = DType::kBF16;
  // fp32 gradients bit for bit (0), or within this of the largest: the norms' bf16-dy instance
  // sums its rows in another order than the fp32 one, which stays as it was.
  double fp32_grad_tol = 0;
};

double MaxRelError(const Tensor& got, const Tensor& want) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::fabs(double(got.f32()[i]) - want.f32()[i]));
    scale = std::max(scale, std::fabs(double(want.f32()[i])));
  }
  return err / scale;
}

// Backward of the case after Check's forward: into a's and ref's gradients.
void CheckBackward(const Case& c, const Kernel* k, OpHarness& ref, OpArgs& a, double out_steps) {
  std::vector<OwnedTensor> grads, ref_grads, dys;
  // Backward: dy (bf16 where the kernel reads it so, widened for the reference) into zeroed
  // fp32 gradients, or into bf16 ones full of NaN marked fresh, which must be written whole.
  std::mt19937 rng(11);
  std::vector<Tensor> ref_dy, ref_gin;
  std::vector<OwnedTensor> low_dys;
  for (size_t i = 0; i < ref.outputs.size(); ++i) {
    dys.push_back(RandomTensor(ref.outputs[i].view().shape(), rng));
    if (c.bf16_grad_out >> i & 1u) {
      low_dys.push_back(Round(dys.back().view()));
      dys.back() = Widen(low_dys.back().view());
      a.grad_out.push_back(low_dys.back().view());
    } else {
      a.grad_out.push_back(dys.back().view());
    }
    ref_dy.push_back(dys.back().view());
  }
  for (size_t i = 0; i < ref.inputs.size(); ++i) {
    const Tensor& in = ref.inputs[i].view();
    const bool diff = in.dtype() == DType::kF32, bf = c.bf16_grad_in >> i & 1u;
    ref_grads.emplace_back(in.shape(), DType::kF32);
    grads.emplace_back(in.shape(), bf ? DType::kBF16 : DType::kF32);
    if (bf) {
      std::memset(grads.back().view().data(), 0xff, grads.back().view().nbytes());  // NaNs
      a.fresh_grads |= 1u << i;
    }
    ref_gin.push_back(diff ? ref_grads.back().view() : Tensor());
    a.grad_in.push_back(diff ? grads.back().view() : Tensor());
  }
  REQUIRE(ref.Backward(ref_dy, ref_gin).ok());
  REQUIRE(k->backward(a).ok());
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("gradient of input " << i);
    if (c.bf16_grad_in >> i & 1u) {
      if (out_steps == 0) CHECK(SameBits(grads[i].view(), Round(ref_grads[i].view()).view()));
      CHECK(BfSteps(grads[i].view(), ref_grads[i].view()) <= std::max(out_steps, 0.5));
    } else if (c.fp32_grad_tol > 0) {
      CHECK(MaxRelError(grads[i].view(), ref_grads[i].view()) <= c.fp32_grad_tol);
    } else {
      CHECK(SameBits(grads[i].view(), ref_grads[i].view()));
    }
  }
}

// Runs the case's kernel with the masked inputs and outputs in bf16 and compares forward and
// backward with the fp32 kernel on the widened inputs. out_steps: linear's output tolerance.
void Check(Case& c, double out_steps = 0) {
  INFO("op " << c.op);
  const Kernel* k = FindKernel(c.op, Device::kCpu, DType::kF32);
  REQUIRE(k);
  CHECK(k->bf16_act_inputs == c.bf16_in);
  CHECK(k->bf16_act_outputs == c.bf16_out);
  CHECK(k->bf16_grad_inputs == c.bf16_grad_in);
  CHECK(k->bf16_grad_outputs == c.bf16_grad_out);
  if (c.bf16_grad_in) CHECK(k->overwrites_fresh_grads);
  OpHarness ref(c.op, c.attrs);
  std::vector<OwnedTensor> low;  // the bf16 inputs
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const bool bf = c.bf16_in >> i & 1u;
    low.push_back(bf ? Round(c.inputs[i].view()) : testing::CopyOf(c.inputs[i].view()));
    ref.inputs.push_back(bf ? Widen(low.back().view()) : testing::CopyOf(c.inputs[i].view()));
  }
  ref.matmul = c.matmul;
  REQUIRE(ref.Forward().ok());
  OpArgs a;
  a.attrs = &c.attrs;
  a.matmul = c.matmul;
  std::vector<OwnedTensor> outs, saved;
  for (const OwnedTensor& t : low) a.in.push_back(t.view());
  for (size_t i = 0; i < ref.outputs.size(); ++i) {
    const bool bf = c.bf16_out >> i & 1u;
    outs.emplace_back(ref.outputs[i].view().shape(), bf ? DType::kBF16 : DType::kF32);
    a.out.push_back(outs.back().view());
  }
  for (const OwnedTensor& t : ref.saved) {
    saved.emplace_back(t.view().shape(), t.view().dtype());
    a.saved.push_back(saved.back().view());
  }
  REQUIRE(k->forward(a).ok());
  for (size_t i = 0; i < outs.size(); ++i) {
    INFO("output " << i);
    if (c.bf16_out >> i & 1u) {
      if (out_steps == 0) CHECK(SameBits(outs[i].view(), Round(ref.outputs[i].view()).view()));
      CHECK(BfSteps(outs[i].view(), ref.outputs[i].view()) <= std::max(out_steps, 0.5));
    } else {
      CHECK(SameBits(outs[i].view(), ref.outputs[i].view()));
    }
  }
  for (size_t i = 0; i < saved.size(); ++i) CHECK(SameBits(saved[i].view(), ref.saved[i].view()));
  CheckBackward(c, k, ref, a, out_steps);
}

TEST_CASE("bf16 activations: elementwise ops and norms as their fp32 forms, rounded once",
          "[kernels][bf16]") {
  std::mt19937 rng(5);
  for (const char* op : {"gelu", "silu"}) {
    Case c{op, Attrs()};
    c.inputs.push_back(RandomTensor({3, 7, 300}, rng, -4.f, 4.f));
    c.bf16_in = c.bf16_out = c.bf16_grad_in = c.bf16_grad_out = 1u;
    Check(c);
  }
  for (const char* op : {"add", "mul"}) {
    Case c{op, Attrs()};
    c.inputs.push_back(RandomTensor({5, 333}, rng));
    c.inputs.push_back(RandomTensor({5, 333}, rng));
    c.bf16_in = c.bf16_grad_in = 3u;
    c.bf16_out = c.bf16_grad_out = 1u;
    Check(c);
  }
  Case ln{"layernorm", Attrs()};
  ln.inputs.push_back(RandomTensor({6, 4, 96}, rng, -2.f, 2.f));  // x: the fp32 residual stream
  ln.inputs.push_back(RandomTensor({96}, rng));
  ln.inputs.push_back(RandomTensor({96}, rng));
  ln.bf16_out = ln.bf16_grad_out = 1u;
  ln.fp32_grad_tol = 1e-6;
  Check(ln);
  Case rms{"rmsnorm", Attrs()};
  rms.inputs.push_back(RandomTensor({6, 4, 96}, rng, -2.f, 2.f));
  rms.inputs.push_back(RandomTensor({96}, rng));
  rms.bf16_out = rms.bf16_grad_out = 1u;
  rms.fp32_grad_tol = 1e-6;
  Check(rms);
}

// Where the CPU has AVX-512, bf16 rows are read and written 16 values at a time in registers,
// and the last V % 16 of each chunk of 256 as the fp32 loop takes them (8 lanes, then one by
// one): V 1024 has no such tail, 1000 one of 8, 1003 one of 11 with a target in it, 37 a row
// shorter than a chunk, 7 no whole group of 16. The targets sit at either end of a 16-value
// group and in its middle.
TEST_CASE("bf16 activations: cross_entropy on bf16 logits", "[kernels][bf16]") {
  std::mt19937 rng(9);
  for (int64_t v : {1000, 1024, 1003, 37, 7}) {
    INFO("V " << v);
    Case c{"cross_entropy", Attrs()};
    c.inputs.push_back(RandomTensor({2, 3, v}, rng, -6.f, 6.f));
    if (v > 1000)
      c.inputs.push_back(IntTensor({2, 3}, {4, -100, 1001, 0, 517, 15}));
    else
      c.inputs.push_back(IntTensor({2, 3}, {4, -100, static_cast<int32_t>(v - 1), 0, 5, 1}));
    c.bf16_in = c.bf16_grad_in = 1u;
    Check(c);
  }
}

TEST_CASE("bf16 activations: linear reads and writes bf16, with and without a bias",
          "[kernels][bf16]") {
  std::mt19937 rng(13);
  // 300 outputs: the bias gradient's 256-column slice summed in registers (AVX-512) and its
  // remainder by the loop, each bit for bit the fp32 form's.
  for (int64_t out : {80, 300}) {
    for (bool bias : {false, true}) {
      INFO("out " << out << " bias " << bias);
      Case c{"linear", Attrs()};
      c.inputs.push_back(RandomTensor({4, 9, 48}, rng));
      c.inputs.push_back(RandomTensor({out, 48}, rng));
      if (bias) c.inputs.push_back(RandomTensor({out}, rng));
      c.bf16_in = c.bf16_out = c.bf16_grad_in = c.bf16_grad_out = 1u;
      Check(c, 1.0);
    }
  }
}

// A bf16 gradient can only be written whole: one not marked fresh is refused, naming the op.
TEST_CASE("bf16 activations: a bf16 gradient that is not fresh is refused", "[kernels][bf16]") {
  std::mt19937 rng(21);
  OwnedTensor x = RandomTensor({4, 64}, rng), dy = RandomTensor({4, 64}, rng);
  OwnedTensor dx(x.view().shape(), DType::kBF16);
  for (const char* op : {"gelu", "linear"}) {
    OpArgs a;
    Attrs attrs;
    a.attrs = &attrs;
    a.matmul = DType::kBF16;
    OwnedTensor w = RandomTensor({64, 64}, rng), y({4, 64}, DType::kF32);
    a.in = {x.view()};
    if (std::string(op) == "linear") a.in.push_back(w.view());
    a.out = {y.view()};
    a.grad_out = {dy.view()};
    a.grad_in = {dx.view()};
    if (a.in.size() > 1) a.grad_in.push_back(Tensor());
    const Status s = FindKernel(op, Device::kCpu, DType::kF32)->backward(a);
    INFO(op << ": " << s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(s.ToString().find(op) != std::string::npos);
    a.fresh_grads = 1u;
    CHECK(FindKernel(op, Device::kCpu, DType::kF32)->backward(a).ok());
  }
}

}  // namespace
}  // namespace ds::kernels::cpu
