// The CPU's 16-bit kernels: every CPU op runs in fp32, and for bf16 / fp16 storage the
// registry serves the fp32 kernel between conversions (FindKernel(op, kCpu, bf16) makes one
// on first use). 16-bit inputs, outputs, output gradients and the gradients a backward
// accumulates into are widened into fp32 scratch, the fp32 kernel runs, and what it wrote is
// rounded back; fp32 and int32 tensors pass through. The rounding points are the ones a GPU
// kernel with 16-bit storage and fp32 compute has, so the device path run on HostMemory (tests)
// trains in bf16 and fp16 as a GPU does, up to summation order. Allocates scratch per call:
// a reference, not the CPU's training path (which widens parameters itself, executor.h).
#pragma once

#include "kernels/op.h"
#include "kernels/registry.h"

namespace ds::kernels {

// The kernel for `dtype` (bf16 or f16) storage built on `f32`.
Kernel WidenKernel(const Kernel& f32, DType dtype);

}  // namespace ds::kernels
