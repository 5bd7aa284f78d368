// The kernel registry: op name -> OpDef, and (op, device, dtype) -> forward/backward.
// CPU fp32 is the reference every other backend is checked against. Registration
// happens in static initializers of each kernels/<device>/ library (alwayslink);
// lookups are thread-safe after main() starts.
//
//   const OpDef* def = FindOp("layernorm");
//   const Kernel* k = FindKernel("layernorm", Device::kCpu, DType::kF32);
//   DS_RETURN_IF_ERROR(k->forward(args));
#pragma once

#include <string>
#include <vector>

#include "kernels/op.h"
#include "runtime/core/device.h"

namespace ds::kernels {

using ds::Device;  // runtime/core/device.h
using ds::DeviceName;

struct Kernel {
  KernelFn forward;
  KernelFn backward;
  // Optional: called once per node when an executor is built, with the node's bound arguments
  // (shapes and buffers final, contents not yet): what a kernel makes ahead of the steps
  // (linear: its oneDNN matmul primitives).
  KernelFn prepare;
  // Inputs (bit k: input k) the kernel reads as bf16 tensors when OpArgs::matmul is kBF16: a
  // host executor binds a bf16 model's parameter there as stored instead of widening it to an
  // fp32 scratch (linear's weight, which its products would round back to bf16).
  uint32_t bf16_inputs = 0;
  // Inputs (bit k) the kernel reads as bf16 tensors whenever a host executor runs a bf16 model,
  // whatever OpArgs::matmul says: it only copies values out (embedding's row gather), which
  // gives the widened copy's values bit for bit without widening the whole table each step.
  uint32_t bf16_reads = 0;
  // Activations (bit k: input k, output k) the kernel reads and writes as bf16 tensors in a bf16
  // host step (OpArgs::matmul kBF16): the executor stores an activation in bf16 where its
  // producer writes it so and every consumer reads it so (Note [bf16 activations] in
  // runtime/graph/host_bf16.h). The kernel sees the dtype on each tensor.
  uint32_t bf16_act_inputs = 0;
  uint32_t bf16_act_outputs = 0;
  // Their gradients the same way: bit k of bf16_grad_outputs, the backward reads grad_out[k] as a
  // bf16 tensor; of bf16_grad_inputs, it writes a fresh grad_in[k] (OpArgs::fresh_grads) in bf16,
  // rounded once. The executor stores a gradient in bf16 only where it is written whole once.
  uint32_t bf16_grad_outputs = 0;
  uint32_t bf16_grad_inputs = 0;
  // Of the parameter inputs a host executor binds as stored bf16 (bf16_inputs under bf16
  // products, bf16_reads), those (bit k) whose gradient the backward adds into a bf16 grad_in[k]
  // itself: each call's fp32 contribution added to the widened value and rounded once, the bits
  // an fp32 scratch added in with AddF32IntoBf16 gives. The executor then binds the stored bf16
  // gradient there: no scratch, no zeroing, no pass over it after (linear's dW, embedding's).
  uint32_t bf16_param_grads = 0;
  // The backward honours OpArgs::fresh_grads (writes a fresh gradient whole, ignored rows and
  // all), so the executor need not zero those buffers first.
  bool overwrites_fresh_grads = false;
};

// Registers an op; returns true (so it can initialize a static). Aborts on a duplicate.
bool RegisterOp(OpDef def);
bool RegisterKernel(const std::string& op, Device device, DType dtype, Kernel kernel);

// nullptr when unknown.
const OpDef* FindOp(const std::string& name);
// A CPU kernel for bf16 or f16 is the fp32 one between conversions (widen.h), made on first
// lookup.
const Kernel* FindKernel(const std::string& op, Device device, DType dtype);
// Sorted op names, for error messages ("known ops: ...") and the conformance test.
std::vector<std::string> RegisteredOps();

}  // namespace ds::kernels
