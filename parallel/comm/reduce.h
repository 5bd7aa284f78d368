// Elementwise reductions of communication buffers (the arithmetic of AllReduce and
// ReduceScatter, shared by the backends).
//
// Thread-safe (pure functions).
//
//   if (!CanReduce(dtype)) return UnimplementedError(...);
//   ReduceInto(acc, received, count, dtype, ReduceOp::kSum);   // acc[i] += received[i]
#pragma once

#include <cstdint>

#include "parallel/comm/communicator.h"
#include "runtime/core/dtype.h"

namespace ds::parallel {

// True for the dtypes ReduceInto handles: f32, bf16, f16, i32, i64.
bool CanReduce(DType dtype);

// acc[i] = op(acc[i], src[i]) for i < count. 16-bit floats are widened to fp32, combined and
// rounded back (nearest even) per call, as NCCL does per step. Max propagates NaN. Integer
// sums wrap (two's complement). acc and src may be equal, not partially overlapping.
void ReduceInto(void* acc, const void* src, int64_t count, DType dtype, ReduceOp op);

}  // namespace ds::parallel
