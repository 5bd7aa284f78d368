#include "runtime/core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

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

void ParallelZero(void* data, size_t bytes) {
  constexpr size_t kPiece = size_t{1} << 18;
  char* p = static_cast<char*>(data);
  if (bytes < 4 * kPiece) {
    std::memset(p, 0, bytes);
    return;
  }
  const int64_t pieces = static_cast<int64_t>((bytes + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t at = static_cast<size_t>(i) * kPiece;
    std::memset(p + at, 0, std::min(kPiece, bytes - at));
  }
}

void Tensor::Zero() const {
  if (data_) ParallelZero(data_, nbytes());
}

namespace {
constexpr size_t kHugePage = 2u << 20;

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
}  // namespace

Buffer Buffer::Allocate(size_t bytes) {
  Buffer b;
  if (bytes == 0) return b;
  if (bytes < kHugePage) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    b.data_ = p;
    b.size_ = bytes;
    return b;
  }
  // Large: fresh anonymous pages, 2 MiB aligned for transparent huge pages. They read as zero
  // and take memory only once written, so a buffer that is replaced before use (ParamStore's
  // flat buffers under ZeRO) never costs any.
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  char* base = static_cast<char*>(raw);
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) /
                                    kHugePage * kHugePage);
  if (p > base) munmap(base, p - base);
  const size_t tail = (base + rounded + kHugePage) - (p + rounded);
  if (tail > 0) munmap(p + rounded, tail);
  madvise(p, rounded, MADV_HUGEPAGE);
  b.data_ = p;
  b.size_ = bytes;
  b.mapped_ = true;
  return b;
}

Buffer Buffer::AllocateSparse(size_t bytes) {
  Buffer b;
  if (bytes == 0) return b;
  const size_t len = (bytes + PageSize() - 1) / PageSize() * PageSize();
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Small pages: a released range must not be re-committed 2 MiB at a time.
  madvise(p, len, MADV_NOHUGEPAGE);
  b.data_ = p;
  b.size_ = bytes;
  b.sparse_ = true;
  return b;
}

void Buffer::Release(size_t offset, size_t bytes, bool zero_edges) {
  if (!data_ || bytes == 0 || offset >= size_) return;
  bytes = std::min(bytes, size_ - offset);
  char* base = static_cast<char*>(data_);
  if (!sparse_) {
    std::memset(base + offset, 0, bytes);
    return;
  }
  const size_t page = PageSize();
  const size_t first = (offset + page - 1) / page * page;  // first whole page inside
  const size_t last = (offset + bytes) / page * page;      // end of the last whole page inside
  if (first < last) {
    madvise(base + first, last - first, MADV_DONTNEED);
    if (zero_edges) {
      std::memset(base + offset, 0, first - offset);
      std::memset(base + last, 0, offset + bytes - last);
    }
  } else if (zero_edges) {
    std::memset(base + offset, 0, bytes);
  }
}

size_t Buffer::ResidentBytes(size_t offset, size_t bytes) const {
  if (!data_ || offset >= size_ || bytes == 0) return 0;
  bytes = std::min(bytes, size_ - offset);
  const size_t page = PageSize();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(data_) + offset;
  const uintptr_t start = lo / page * page;
  const uintptr_t end = lo + bytes;
  const size_t pages = (end - start + page - 1) / page;
  std::vector<unsigned char> in_core(pages);
  if (mincore(reinterpret_cast<void*>(start), end - start, in_core.data()) != 0) return 0;
  size_t resident = 0;
  for (size_t i = 0; i < pages; ++i) {
    if (!(in_core[i] & 1)) continue;
    const uintptr_t a = std::max<uintptr_t>(lo, start + i * page);
    const uintptr_t b = std::min<uintptr_t>(end, start + (i + 1) * page);
    resident += b - a;
  }
  return resident;
}

void Buffer::Free() {
  if (!data_) return;
  if (sparse_)
    munmap(data_, (size_ + PageSize() - 1) / PageSize() * PageSize());
  else if (mapped_)
    munmap(data_, (size_ + kHugePage - 1) / kHugePage * kHugePage);
  else
    std::free(data_);
  data_ = nullptr;
  size_ = 0;
  sparse_ = mapped_ = false;
}

Buffer::Buffer(Buffer&& o) noexcept
    : data_(o.data_), size_(o.size_), sparse_(o.sparse_), mapped_(o.mapped_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.sparse_ = o.mapped_ = false;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Free();
    data_ = o.data_;
    size_ = o.size_;
    sparse_ = o.sparse_;
    mapped_ = o.mapped_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.sparse_ = o.mapped_ = false;
  }
  return *this;
}

Buffer::~Buffer() { Free(); }

OwnedTensor::OwnedTensor(Shape shape, DType dtype) {
  buf_ = Buffer::Allocate(static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype));
  view_ = Tensor(buf_.data(), std::move(shape), dtype);
}

}  // namespace ds
