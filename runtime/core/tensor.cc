#include "runtime/core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace ds {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void Tensor::Zero() const {
  if (data_) std::memset(data_, 0, nbytes());
}

namespace {
constexpr size_t kHugePage = 2u << 20;
}

Buffer Buffer::Allocate(size_t bytes) {
  Buffer b;
  if (bytes == 0) return b;
  size_t align = bytes >= kHugePage ? kHugePage : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
  std::memset(p, 0, rounded);
  b.data_ = p;
  b.size_ = bytes;
  return b;
}

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Buffer::~Buffer() { std::free(data_); }

OwnedTensor::OwnedTensor(Shape shape, DType dtype) {
  buf_ = Buffer::Allocate(static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype));
  view_ = Tensor(buf_.data(), std::move(shape), dtype);
}

}  // namespace ds
