#include "kernels/cpu/op_test_util.h"

#include <cstring>

namespace ds::kernels::testing {

OwnedTensor RandomTensor(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  OwnedTensor t(shape, DType::kF32);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

OwnedTensor IntTensor(const Shape& shape, const std::vector<int32_t>& values) {
  OwnedTensor t(shape, DType::kI32);
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i)
    t.i32()[i] = values[i];
  return t;
}

OwnedTensor FloatTensor(const Shape& shape, const std::vector<float>& values) {
  OwnedTensor t(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i)
    t.f32()[i] = values[i];
  return t;
}

OwnedTensor ZerosLike(const Tensor& t) { return OwnedTensor(t.shape(), t.dtype()); }

OwnedTensor CopyOf(const Tensor& t) {
  if (!t.defined()) return OwnedTensor();
  OwnedTensor c(t.shape(), t.dtype());
  if (t.nbytes()) std::memcpy(c.view().data(), t.data(), t.nbytes());
  return c;
}

OpHarness::OpHarness(std::string op, Attrs attrs)
    : op_(std::move(op)),
      attrs_(std::move(attrs)),
      def_(FindOp(op_)),
      kernel_(FindKernel(op_, Device::kCpu, DType::kF32)) {}

std::vector<TensorSpec> OpHarness::InputSpecs() const {
  std::vector<TensorSpec> specs;
  for (const OwnedTensor& t : inputs) specs.push_back(t.view().spec());
  return specs;
}

Status OpHarness::Infer(std::vector<TensorSpec>* out) const {
  if (!def_ || !kernel_) return NotFoundError("no cpu/f32 kernel for op " + op_);
  return def_->infer(attrs_, InputSpecs(), out);
}

OpArgs OpHarness::Args() const {
  OpArgs args;
  args.attrs = &attrs_;
  for (const OwnedTensor& t : inputs) args.in.push_back(t.view());
  for (const OwnedTensor& t : outputs) args.out.push_back(t.view());
  for (const OwnedTensor& t : saved) args.saved.push_back(t.view());
  args.seed = seed;
  args.training = training;
  args.matmul = matmul;
  args.fresh_grads = fresh_grads;
  return args;
}

Status OpHarness::Forward() {
  std::vector<TensorSpec> out_specs;
  Status s = Infer(&out_specs);
  if (!s.ok()) return s;
  if (outputs.empty()) {
    for (const TensorSpec& spec : out_specs) outputs.emplace_back(spec.shape, spec.dtype);
    if (def_->saved)
      for (const TensorSpec& spec : def_->saved(attrs_, InputSpecs()))
        saved.emplace_back(spec.shape, spec.dtype);
  }
  return kernel_->forward(Args());
}

Status OpHarness::Backward(const std::vector<Tensor>& grad_out,
                           const std::vector<Tensor>& grad_in) {
  if (!kernel_) return NotFoundError("no cpu/f32 kernel for op " + op_);
  OpArgs args = Args();
  args.grad_out = grad_out;
  args.grad_in = grad_in;
  return kernel_->backward(args);
}

}  // namespace ds::kernels::testing
