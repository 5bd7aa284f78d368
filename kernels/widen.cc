#include "kernels/widen.h"

#include <vector>

namespace ds::kernels {
namespace {

bool Is16(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16);
}

// fp32 copies of the 16-bit tensors of one call; the rest are the caller's tensors.
class Scratch {
 public:
  // `t` as the fp32 kernel sees it; `load`: widen the current values (else left zero).
  Tensor Widen(const Tensor& t, bool load) {
    if (!Is16(t)) return t;
    buffers_.emplace_back(static_cast<size_t>(t.numel()), 0.0f);
    std::vector<float>& b = buffers_.back();
    if (load) {
      if (t.dtype() == DType::kBF16)
        ConvertBf16ToF32(static_cast<const uint16_t*>(t.data()), b.data(), t.numel());
      else
        ConvertF16ToF32(static_cast<const uint16_t*>(t.data()), b.data(), t.numel());
    }
    return Tensor(b.data(), t.shape(), DType::kF32);
  }

 private:
  std::vector<std::vector<float>> buffers_;
};

// Rounds `wide` back into the 16-bit tensor `t` (no-op for pass-through tensors).
void Narrow(const Tensor& wide, const Tensor& t) {
  if (!Is16(t)) return;
  const float* src = wide.f32();
  uint16_t* dst = static_cast<uint16_t*>(t.data());
  if (t.dtype() == DType::kBF16)
    ConvertF32ToBf16(src, dst, t.numel());
  else
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = FloatToF16(src[i]);
}

}  // namespace

Kernel WidenKernel(const Kernel& f32, DType dtype) {
  (void)dtype;  // each tensor's own dtype decides its conversion
  Kernel k;
  KernelFn fwd = f32.forward, bwd = f32.backward;
  k.forward = [fwd](const OpArgs& a) -> Status {
    Scratch s;
    OpArgs w = a;
    for (size_t i = 0; i < a.in.size(); ++i) w.in[i] = s.Widen(a.in[i], true);
    for (size_t i = 0; i < a.out.size(); ++i) w.out[i] = s.Widen(a.out[i], false);
    Status st = fwd(w);
    if (!st.ok()) return st;
    for (size_t i = 0; i < a.out.size(); ++i) Narrow(w.out[i], a.out[i]);
    return OkStatus();
  };
  k.backward = [bwd](const OpArgs& a) -> Status {
    Scratch s;
    OpArgs w = a;
    for (size_t i = 0; i < a.in.size(); ++i) w.in[i] = s.Widen(a.in[i], true);
    for (size_t i = 0; i < a.out.size(); ++i) w.out[i] = s.Widen(a.out[i], true);
    for (size_t i = 0; i < a.grad_out.size(); ++i) w.grad_out[i] = s.Widen(a.grad_out[i], true);
    for (size_t i = 0; i < a.grad_in.size(); ++i)
      w.grad_in[i] = s.Widen(a.grad_in[i], true);  // accumulates
    Status st = bwd(w);
    if (!st.ok()) return st;
    for (size_t i = 0; i < a.grad_in.size(); ++i) Narrow(w.grad_in[i], a.grad_in[i]);
    return OkStatus();
  };
  return k;
}

}  // namespace ds::kernels
