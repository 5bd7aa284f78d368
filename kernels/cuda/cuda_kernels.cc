// Registry glue: registers the CUDA kernels of every op except "attention" (attention/)
// and "linear" (blas/) for Device::kCuda, f32 and bf16. Each entry checks dtypes, reads
// the op's attributes exactly as the CPU kernel does (kernels/cpu/*.cc), launches on the
// thread's cuda::CurrentStream() (stream_context.h) and turns the launch error into a Status.
//
// Tensors passed to these kernels are device memory. For a bf16 kernel every float tensor
// of the call (inputs, outputs, gradients) is bf16; `saved` buffers are fp32 as the OpDef
// says; ids and targets are int32. Nothing synchronizes: a Status reports launch errors
// (and errors of earlier asynchronous work that surface at launch), not kernel results.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cross_entropy_launch.h"
#include "kernels/cuda/elementwise_launch.h"
#include "kernels/cuda/embedding_launch.h"
#include "kernels/cuda/gelu_launch.h"
#include "kernels/cuda/norm_launch.h"
#include "kernels/registry.h"
#include "kernels/rope_freqs.h"
#include "kernels/shape_check.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/stream_context.h"

namespace ds::kernels {
namespace {

template <typename T>
constexpr DType kDType = DType::kF32;
template <>
constexpr DType kDType<__nv_bfloat16> = DType::kBF16;
template <>
constexpr DType kDType<__half> = DType::kF16;

template <typename T>
T* Ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data()) : nullptr;
}

// Every defined float tensor of the call must have the kernel's dtype.
template <typename T>
Status CheckDTypes(const char* op, const OpArgs& args) {
  const std::vector<Tensor>* groups[] = {&args.in, &args.out, &args.grad_out, &args.grad_in};
  const char* names[] = {"input", "output", "grad_out", "grad_in"};
  for (int g = 0; g < 4; ++g) {
    for (size_t i = 0; i < groups[g]->size(); ++i) {
      const Tensor& t = (*groups[g])[i];
      if (t.defined() && IsFloat(t.dtype()) && t.dtype() != kDType<T>)
        return InvalidArgumentError(StrCat(op, " (cuda, ", DTypeName(kDType<T>), "): ", names[g],
                                           " ", i, " is ", DTypeName(t.dtype())));
    }
  }
  return OkStatus();
}

double AttrFloat(const OpArgs& args, const char* name, double dflt) {
  return args.attrs ? args.attrs->Float(name, dflt) : dflt;
}
int64_t AttrInt(const OpArgs& args, const char* name, int64_t dflt) {
  return args.attrs ? args.attrs->Int(name, dflt) : dflt;
}

#define DS_LAUNCH(call) DS_CUDA_RETURN_IF_ERROR(call)

// --- add, mul, gelu, silu, dropout ----------------------------------------------------

template <typename T>
Status AddForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("add", a));
  DS_LAUNCH(LaunchAddForward(Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.out[0]), a.in[0].numel(),
                             cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status AddBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("add", a));
  for (int k = 0; k < 2; ++k)
    if (a.grad_in[k].defined())
      DS_LAUNCH(LaunchAccumulate(Ptr<T>(a.grad_out[0]), Ptr<T>(a.grad_in[k]), a.grad_out[0].numel(),
                                 cuda::CurrentStream()));
  return OkStatus();
}

template <typename T>
Status MulForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("mul", a));
  DS_LAUNCH(LaunchMulForward(Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.out[0]), a.in[0].numel(),
                             cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status MulBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("mul", a));
  DS_LAUNCH(LaunchMulBackward(Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.grad_out[0]),
                              Ptr<T>(a.grad_in[0]), Ptr<T>(a.grad_in[1]), a.grad_out[0].numel(),
                              cuda::CurrentStream()));
  return OkStatus();
}

template <typename T>
Status GeluForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("gelu", a));
  DS_LAUNCH(
      LaunchGeluForward(Ptr<T>(a.in[0]), Ptr<T>(a.out[0]), a.in[0].numel(), cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status GeluBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("gelu", a));
  if (!a.grad_in[0].defined()) return OkStatus();
  DS_LAUNCH(LaunchGeluBackward(Ptr<T>(a.in[0]), Ptr<T>(a.grad_out[0]), Ptr<T>(a.grad_in[0]),
                               a.in[0].numel(), cuda::CurrentStream()));
  return OkStatus();
}

template <typename T>
Status SiluForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("silu", a));
  DS_LAUNCH(
      LaunchSiluForward(Ptr<T>(a.in[0]), Ptr<T>(a.out[0]), a.in[0].numel(), cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status SiluBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("silu", a));
  if (!a.grad_in[0].defined()) return OkStatus();
  DS_LAUNCH(LaunchSiluBackward(Ptr<T>(a.in[0]), Ptr<T>(a.grad_out[0]), Ptr<T>(a.grad_in[0]),
                               a.in[0].numel(), cuda::CurrentStream()));
  return OkStatus();
}

// The CPU op's mask (kernels/cpu/dropout.cc): identity in eval mode or for p <= 0.
struct DropoutMask {
  uint64_t threshold = 0;
  float scale = 1.f;
};
DropoutMask MakeDropoutMask(const OpArgs& a) {
  const double p = AttrFloat(a, "p", 0.0);
  DropoutMask m;
  if (a.training && p > 0.0) {
    m.threshold = static_cast<uint64_t>(std::llround(p * 16777216.0));
    m.scale = static_cast<float>(1.0 / (1.0 - p));
  }
  return m;
}

template <typename T>
Status DropoutForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("dropout", a));
  const DropoutMask m = MakeDropoutMask(a);
  DS_LAUNCH(LaunchDropout(Ptr<T>(a.in[0]), Ptr<T>(a.out[0]), a.in[0].numel(), a.seed, m.threshold,
                          m.scale, /*accumulate=*/false, cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status DropoutBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("dropout", a));
  if (!a.grad_in[0].defined()) return OkStatus();
  const DropoutMask m = MakeDropoutMask(a);
  DS_LAUNCH(LaunchDropout(Ptr<T>(a.grad_out[0]), Ptr<T>(a.grad_in[0]), a.grad_out[0].numel(),
                          a.seed, m.threshold, m.scale, /*accumulate=*/true,
                          cuda::CurrentStream()));
  return OkStatus();
}

// --- layernorm, rmsnorm ---------------------------------------------------------------

template <typename T>
Status LayerNormForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("layernorm", a));
  const float eps = static_cast<float>(AttrFloat(a, "eps", 1e-5));
  DS_LAUNCH(LaunchLayerNormForward(
      Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.in[2]), Ptr<T>(a.out[0]), a.saved[0].f32(),
      a.saved[1].f32(), LeadingRows(a.in[0].shape()), a.in[0].dim(-1), eps, cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status LayerNormBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("layernorm", a));
  DS_LAUNCH(LaunchLayerNormBackward(
      Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.grad_out[0]), a.saved[0].f32(), a.saved[1].f32(),
      Ptr<T>(a.grad_in[0]), Ptr<T>(a.grad_in[1]), Ptr<T>(a.grad_in[2]),
      LeadingRows(a.in[0].shape()), a.in[0].dim(-1), cuda::CurrentStream()));
  return OkStatus();
}

template <typename T>
Status RmsNormForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("rmsnorm", a));
  if (AttrInt(a, "unit_offset", 0) != 0)
    return UnimplementedError("rmsnorm (cuda): unit_offset (Gemma) has a CPU kernel only so far");
  const float eps = static_cast<float>(AttrFloat(a, "eps", 1e-6));
  DS_LAUNCH(LaunchRmsNormForward(Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.out[0]),
                                 a.saved[0].f32(), LeadingRows(a.in[0].shape()), a.in[0].dim(-1),
                                 eps, cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status RmsNormBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("rmsnorm", a));
  DS_LAUNCH(LaunchRmsNormBackward(Ptr<T>(a.in[0]), Ptr<T>(a.in[1]), Ptr<T>(a.grad_out[0]),
                                  a.saved[0].f32(), Ptr<T>(a.grad_in[0]), Ptr<T>(a.grad_in[1]),
                                  LeadingRows(a.in[0].shape()), a.in[0].dim(-1),
                                  cuda::CurrentStream()));
  return OkStatus();
}

// --- rope, embedding, position_embedding ----------------------------------------------

Status RopeLayout(const OpArgs& a, HeadLayout* l) {
  static const Attrs kEmpty;
  return InferHeadLayout("rope", a.attrs ? *a.attrs : kEmpty, a.in[0].spec(), l);
}

template <typename T>
Status RopeApply(const OpArgs& a, const Tensor& src, const Tensor& dst, float sign,
                 bool accumulate) {
  if (a.in.size() > 1)
    return UnimplementedError("rope at given positions (generation) has a CPU kernel only so far");
  DS_RETURN_IF_ERROR(CheckDTypes<T>("rope", a));
  HeadLayout l;
  DS_RETURN_IF_ERROR(RopeLayout(a, &l));
  static const Attrs kEmpty;
  RopeParams p;
  DS_RETURN_IF_ERROR(ReadRopeParams(a.attrs ? *a.attrs : kEmpty, l.head_dim, &p));
  if (p.type != "default" || p.rotary_dim != l.head_dim || p.attention_factor != 1.0)
    return UnimplementedError("rope (cuda): scaled and partial RoPE have a CPU kernel only so far");
  DS_LAUNCH(LaunchRope(Ptr<T>(src), Ptr<T>(dst), l.batch, l.seq, l.n_head, l.n_kv_head, l.head_dim,
                       AttrFloat(a, "theta", 10000.0), sign, accumulate, cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status RopeForward(const OpArgs& a) {
  return RopeApply<T>(a, a.in[0], a.out[0], 1.f, false);
}
template <typename T>
Status RopeBackward(const OpArgs& a) {
  if (!a.grad_in[0].defined()) return OkStatus();
  return RopeApply<T>(a, a.grad_out[0], a.grad_in[0], -1.f, true);
}

template <typename T>
Status EmbeddingForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("embedding", a));
  DS_LAUNCH(LaunchEmbeddingForward(a.in[0].i32(), Ptr<T>(a.in[1]), Ptr<T>(a.out[0]),
                                   a.in[0].numel(), a.in[1].dim(0), a.in[1].dim(1),
                                   cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status EmbeddingBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("embedding", a));
  if (!a.grad_in[1].defined()) return OkStatus();
  DS_LAUNCH(LaunchEmbeddingBackward(a.in[0].i32(), Ptr<T>(a.grad_out[0]), Ptr<T>(a.grad_in[1]),
                                    a.in[0].numel(), a.in[1].dim(0), a.in[1].dim(1),
                                    cuda::CurrentStream()));
  return OkStatus();
}

template <typename T>
Status PositionEmbeddingForward(const OpArgs& a) {
  if (a.in.size() > 2)
    return UnimplementedError(
        "position_embedding at given positions (generation) has a CPU kernel only so far");
  DS_RETURN_IF_ERROR(CheckDTypes<T>("position_embedding", a));
  const int64_t shift = AttrInt(a, "offset", 0) * a.in[1].dim(1);  // OPT: rows from p + offset
  DS_LAUNCH(LaunchPositionEmbeddingForward(Ptr<T>(a.in[0]), Ptr<T>(a.in[1]) + shift,
                                           Ptr<T>(a.out[0]), a.in[0].dim(0), a.in[0].dim(1),
                                           a.in[0].dim(2), cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status PositionEmbeddingBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckDTypes<T>("position_embedding", a));
  const Tensor& dy = a.grad_out[0];
  T* dwpe =
      a.grad_in[1].defined() ? Ptr<T>(a.grad_in[1]) + AttrInt(a, "offset", 0) * dy.dim(2) : nullptr;
  DS_LAUNCH(LaunchPositionEmbeddingBackward(Ptr<T>(dy), Ptr<T>(a.grad_in[0]), dwpe, dy.dim(0),
                                            dy.dim(1), dy.dim(2), cuda::CurrentStream()));
  return OkStatus();
}

// --- cross_entropy --------------------------------------------------------------------

// The loss and its gradient are fp32 [1] whatever the logits' dtype (the OpDef's infer).
template <typename T>
Status CheckCrossEntropyDTypes(const OpArgs& a) {
  const Tensor* logits[] = {&a.in[0], a.grad_in.empty() ? nullptr : &a.grad_in[0]};
  for (const Tensor* t : logits)
    if (t && t->defined() && t->dtype() != kDType<T>)
      return InvalidArgumentError(StrCat("cross_entropy (cuda, ", DTypeName(kDType<T>),
                                         "): logits are ", DTypeName(t->dtype())));
  const Tensor* losses[] = {&a.out[0], a.grad_out.empty() ? nullptr : &a.grad_out[0]};
  for (const Tensor* t : losses)
    if (t && t->defined() && t->dtype() != DType::kF32)
      return InvalidArgumentError(
          StrCat("cross_entropy (cuda): the loss must be f32, got ", DTypeName(t->dtype())));
  return OkStatus();
}

template <typename T>
Status CrossEntropyForward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckCrossEntropyDTypes<T>(a));
  DS_LAUNCH(LaunchCrossEntropyForward(Ptr<T>(a.in[0]), a.in[1].i32(), a.saved[0].f32(),
                                      a.out[0].f32(), LeadingRows(a.in[0].shape()), a.in[0].dim(-1),
                                      AttrInt(a, "ignore_index", -100), cuda::CurrentStream()));
  return OkStatus();
}
template <typename T>
Status CrossEntropyBackward(const OpArgs& a) {
  DS_RETURN_IF_ERROR(CheckCrossEntropyDTypes<T>(a));
  if (!a.grad_in[0].defined()) return OkStatus();
  DS_LAUNCH(LaunchCrossEntropyBackward(Ptr<T>(a.in[0]), a.in[1].i32(), a.saved[0].f32(),
                                       a.grad_out[0].f32(), Ptr<T>(a.grad_in[0]),
                                       LeadingRows(a.in[0].shape()), a.in[0].dim(-1),
                                       AttrInt(a, "ignore_index", -100), cuda::CurrentStream()));
  return OkStatus();
}

#undef DS_LAUNCH

// --- registration ---------------------------------------------------------------------

template <typename T>
bool RegisterAll() {
  const DType dt = kDType<T>;
  const Device dev = Device::kCuda;
  return RegisterKernel("add", dev, dt, {AddForward<T>, AddBackward<T>}) &&
         RegisterKernel("mul", dev, dt, {MulForward<T>, MulBackward<T>}) &&
         RegisterKernel("gelu", dev, dt, {GeluForward<T>, GeluBackward<T>}) &&
         RegisterKernel("silu", dev, dt, {SiluForward<T>, SiluBackward<T>}) &&
         RegisterKernel("dropout", dev, dt, {DropoutForward<T>, DropoutBackward<T>}) &&
         RegisterKernel("layernorm", dev, dt, {LayerNormForward<T>, LayerNormBackward<T>}) &&
         RegisterKernel("rmsnorm", dev, dt, {RmsNormForward<T>, RmsNormBackward<T>}) &&
         RegisterKernel("rope", dev, dt, {RopeForward<T>, RopeBackward<T>}) &&
         RegisterKernel("embedding", dev, dt, {EmbeddingForward<T>, EmbeddingBackward<T>}) &&
         RegisterKernel("position_embedding", dev, dt,
                        {PositionEmbeddingForward<T>, PositionEmbeddingBackward<T>}) &&
         RegisterKernel("cross_entropy", dev, dt,
                        {CrossEntropyForward<T>, CrossEntropyBackward<T>});
}

const bool kRegistered =
    RegisterAll<float>() && RegisterAll<__nv_bfloat16>() && RegisterAll<__half>();

}  // namespace
}  // namespace ds::kernels
