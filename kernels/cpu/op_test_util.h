// Test helpers: run a registered CPU fp32 op on owned tensors (inference, allocation of
// outputs and saved buffers, forward, backward), plus random tensor factories.
// For kernels/cpu tests only (testonly).
//
//   OpHarness h("gelu", Attrs());
//   h.inputs.push_back(RandomTensor({4, 8}, rng));
//   REQUIRE(h.Forward().ok());
//   float y0 = h.outputs[0].f32()[0];
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "runtime/core/tensor.h"

namespace ds::kernels::testing {

// Uniform floats in [lo, hi).
OwnedTensor RandomTensor(const Shape& shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f);
// int32 tensor with the given values (row-major).
OwnedTensor IntTensor(const Shape& shape, const std::vector<int32_t>& values);
// fp32 tensor with the given values (row-major; the rest zeros).
OwnedTensor FloatTensor(const Shape& shape, const std::vector<float>& values);
OwnedTensor ZerosLike(const Tensor& t);
OwnedTensor CopyOf(const Tensor& t);

// One op node with its own storage. Not thread-safe.
class OpHarness {
 public:
  OpHarness(std::string op, Attrs attrs);

  // Infers output specs (and allocates outputs and saved buffers on first call), then runs
  // the forward kernel. Errors come from infer or the kernel.
  Status Forward();
  // Runs backward with dL/d out = grad_out; accumulates into grad_in (undefined entries:
  // gradient not wanted). Call after Forward().
  Status Backward(const std::vector<Tensor>& grad_out, const std::vector<Tensor>& grad_in);
  // Infers output specs only.
  Status Infer(std::vector<TensorSpec>* out) const;

  const OpDef* def() const { return def_; }
  std::vector<TensorSpec> InputSpecs() const;

  std::vector<OwnedTensor> inputs;
  std::vector<OwnedTensor> outputs;
  std::vector<OwnedTensor> saved;
  uint64_t seed = 1;
  bool training = true;
  DType matmul = DType::kF32;  // OpArgs::matmul
  uint32_t fresh_grads = 0;    // OpArgs::fresh_grads (Backward)

 private:
  OpArgs Args() const;

  std::string op_;
  Attrs attrs_;
  const OpDef* def_ = nullptr;
  const Kernel* kernel_ = nullptr;
};

}  // namespace ds::kernels::testing
