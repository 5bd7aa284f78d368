#include "runtime/ckpt/tensor_ops.h"

#include <algorithm>
#include <cstring>

namespace ds::ckpt {
namespace {

// Cache-blocked transpose of fixed-size elements.
template <typename T>
void TransposeBlocked(const T* src, T* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    }
  }
}

int64_t RowBytes(const Tensor& t) {
  if (t.rank() == 0 || t.dim(0) == 0) return 0;
  return static_cast<int64_t>(t.nbytes()) / t.dim(0);
}

}  // namespace

StatusOr<OwnedTensor> Transpose2D(const Tensor& src) {
  if (src.rank() != 2) {
    return InvalidArgumentError("Transpose2D needs a 2-D tensor, got " +
                                ShapeToString(src.shape()));
  }
  const int64_t rows = src.dim(0), cols = src.dim(1);
  OwnedTensor out({cols, rows}, src.dtype());
  void* dst = out.view().data();
  switch (DTypeSize(src.dtype())) {
    case 2:
      TransposeBlocked(static_cast<const uint16_t*>(src.data()), static_cast<uint16_t*>(dst), rows,
                       cols);
      break;
    case 4:
      TransposeBlocked(static_cast<const uint32_t*>(src.data()), static_cast<uint32_t*>(dst), rows,
                       cols);
      break;
    case 8:
      TransposeBlocked(static_cast<const uint64_t*>(src.data()), static_cast<uint64_t*>(dst), rows,
                       cols);
      break;
    default:
      return InvalidArgumentError("Transpose2D: unsupported element size");
  }
  return out;
}

StatusOr<OwnedTensor> ConcatRows(const std::vector<Tensor>& parts) {
  if (parts.empty()) return InvalidArgumentError("ConcatRows: no parts");
  const Tensor& first = parts[0];
  if (first.rank() == 0) return InvalidArgumentError("ConcatRows: scalar part");
  Shape shape = first.shape();
  shape[0] = 0;
  for (const Tensor& p : parts) {
    Shape rest(p.shape().begin() + (p.rank() ? 1 : 0), p.shape().end());
    Shape want(first.shape().begin() + 1, first.shape().end());
    if (p.dtype() != first.dtype() || p.rank() != first.rank() || rest != want) {
      return InvalidArgumentError("ConcatRows: part " + ShapeToString(p.shape()) +
                                  " does not stack with " + ShapeToString(first.shape()));
    }
    shape[0] += p.dim(0);
  }
  OwnedTensor out(shape, first.dtype());
  char* dst = static_cast<char*>(out.view().data());
  for (const Tensor& p : parts) {
    if (p.nbytes() == 0) continue;
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

StatusOr<OwnedTensor> SliceRows(const Tensor& src, int64_t begin, int64_t end) {
  if (src.rank() == 0 || begin < 0 || end < begin || end > src.dim(0)) {
    return InvalidArgumentError("SliceRows: rows [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") out of " + ShapeToString(src.shape()));
  }
  Shape shape = src.shape();
  shape[0] = end - begin;
  OwnedTensor out(shape, src.dtype());
  const int64_t row = RowBytes(src);
  if (row > 0 && end > begin) {
    std::memcpy(out.view().data(), static_cast<const char*>(src.data()) + begin * row,
                static_cast<size_t>((end - begin) * row));
  }
  return out;
}

}  // namespace ds::ckpt
