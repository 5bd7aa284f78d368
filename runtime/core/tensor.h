// Tensor: a non-owning view (pointer, shape, dtype) over memory owned by a Buffer or an
// arena. Kernels receive Tensors; the executor owns the storage. Copying a Tensor copies
// the view, never the data. Not thread-safe for concurrent writes to the same memory.
//
//   Buffer buf = Buffer::Allocate(4 * 128 * sizeof(float));
//   Tensor x(buf.data(), {4, 128}, DType::kF32);
//   float* p = x.f32();
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"

namespace ds {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "[4, 128]"
// memset by the OpenMP threads in 256 KiB pieces above 1 MiB (one thread writes about 4 GB/s,
// which a step's gradients would wait on).
void ParallelZero(void* data, size_t bytes);

// Shape and dtype without storage: what shape inference and the planner reason about.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::kF32;
  int64_t numel() const { return NumElements(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype)
      : data_(data), shape_(std::move(shape)), dtype_(dtype) {}

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  int32_t* i32() const { return static_cast<int32_t*>(data_); }
  uint16_t* u16() const { return static_cast<uint16_t*>(data_); }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  TensorSpec spec() const { return {shape_, dtype_}; }
  // Same memory, new shape with the same element count.
  Tensor Reshaped(Shape shape) const { return Tensor(data_, std::move(shape), dtype_); }
  void Zero() const;  // ParallelZero

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

// Owning, 64-byte aligned (2 MiB-aligned with transparent huge pages for large sizes),
// zero-filled host memory. Move-only.
//
// A sparse buffer (AllocateSparse) is address space first: an anonymous mapping with small
// pages, committed on first touch, whose pages Release() hands back. ZeRO-3 keeps the flat
// parameter buffer this way (only gathered units are resident) and ZeRO-2/3 the flat gradient
// buffer (only buckets not yet reduced are resident).
class Buffer {
 public:
  Buffer() = default;
  static Buffer Allocate(size_t bytes);
  static Buffer AllocateSparse(size_t bytes);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  float* f32() const { return static_cast<float*>(data_); }
  bool sparse() const { return sparse_; }

  // Sparse buffers: the whole pages inside bytes [offset, offset + bytes) go back to the
  // system and read as zero again; with `zero_edges`, the partial pages at both ends are
  // zeroed too, so the whole range reads as zero. Dense buffers: the range is zeroed.
  void Release(size_t offset, size_t bytes, bool zero_edges);
  // Bytes of the buffer (or of bytes [offset, offset + bytes) of it) resident in memory now
  // (mincore, whole pages), for memory profiles.
  size_t ResidentBytes() const { return ResidentBytes(0, size_); }
  size_t ResidentBytes(size_t offset, size_t bytes) const;

 private:
  void Free();

  void* data_ = nullptr;
  size_t size_ = 0;
  bool sparse_ = false;
  bool mapped_ = false;  // a large dense buffer: its own 2 MiB aligned mapping
};

// A tensor that owns its storage: for tests, tools and small state.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(Shape shape, DType dtype = DType::kF32);
  const Tensor& view() const { return view_; }
  float* f32() const { return view_.f32(); }
  int32_t* i32() const { return view_.i32(); }
  int64_t numel() const { return view_.numel(); }

 private:
  Buffer buf_;
  Tensor view_;
};

}  // namespace ds
