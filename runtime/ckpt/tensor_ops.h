// Layout helpers for checkpoint conversion (CPU, any dtype, contiguous row-major).
// Stateless; each returns new owned storage and never aliases its input.
//
//   OwnedTensor t = Transpose2D(conv1d_weight.view());   // [in, out] -> [out, in]
//   DS_ASSIGN_OR_RETURN(OwnedTensor qkv, ConcatRows({q, k, v}));
#pragma once

#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/tensor.h"

namespace ds::ckpt {

// [R, C] -> [C, R]. InvalidArgument unless `src` has rank 2.
StatusOr<OwnedTensor> Transpose2D(const Tensor& src);
// Stacks row blocks: parts [r_i, C...] of one dtype -> [sum r_i, C...].
StatusOr<OwnedTensor> ConcatRows(const std::vector<Tensor>& parts);
// Rows [begin, end) of `src` [R, C...] as a copy.
StatusOr<OwnedTensor> SliceRows(const Tensor& src, int64_t begin, int64_t end);

}  // namespace ds::ckpt
