#include "runtime/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/base/status_macros.h"

namespace ds::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 34;  // magic 9, version 8, dtype 1, sequences 8, doc entries 8

// The .idx arrays start at byte 34, so their elements are not aligned: read through memcpy.
template <typename T>
T Load(const uint8_t* base, int64_t i) {
  T v;
  std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Maps `path` read-only; an empty file maps to nullptr with size 0.
Status MapFile(const std::string& path, const uint8_t** data, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  struct stat st;
  Status s;
  if (::fstat(fd, &st) != 0) s = ErrnoToStatus(errno, "fstat(" + path + ")");
  if (s.ok() && !S_ISREG(st.st_mode)) s = InvalidArgumentError(path + ": not a regular file");
  if (s.ok() && st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) s = ErrnoToStatus(errno, "mmap(" + path + ")");
    if (s.ok()) {
      *data = static_cast<const uint8_t*>(p);
      *size = static_cast<size_t>(st.st_size);
    }
  }
  ::close(fd);
  return s;
}

bool IntegerDtype(IndexedDtype t) {
  return t != IndexedDtype::kFloat32 && t != IndexedDtype::kFloat64;
}

// Token j of a .bin row at `p` as int64.
int64_t LoadToken(const uint8_t* p, IndexedDtype t, int64_t j) {
  switch (t) {
    case IndexedDtype::kUint8:
      return p[j];
    case IndexedDtype::kInt8:
      return static_cast<int8_t>(p[j]);
    case IndexedDtype::kInt16:
      return Load<int16_t>(p, j);
    case IndexedDtype::kInt32:
      return Load<int32_t>(p, j);
    case IndexedDtype::kInt64:
      return Load<int64_t>(p, j);
    case IndexedDtype::kUint16:
      return Load<uint16_t>(p, j);
    default:
      return 0;
  }
}

}  // namespace

int IndexedDtypeSize(IndexedDtype t) {
  switch (t) {
    case IndexedDtype::kUint8:
    case IndexedDtype::kInt8:
      return 1;
    case IndexedDtype::kInt16:
    case IndexedDtype::kUint16:
      return 2;
    case IndexedDtype::kInt32:
    case IndexedDtype::kFloat32:
      return 4;
    case IndexedDtype::kInt64:
    case IndexedDtype::kFloat64:
      return 8;
  }
  return 0;
}

const char* IndexedDtypeName(IndexedDtype t) {
  static const char* const kNames[] = {"?",     "uint8",   "int8",    "int16", "int32",
                                       "int64", "float64", "float32", "uint16"};
  const int code = static_cast<int>(t);
  return code >= 1 && code <= 8 ? kNames[code] : "?";
}

IndexedDtype IndexedDtypeForVocab(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDtype::kUint16 : IndexedDtype::kInt32;
}

StatusOr<IndexedDataset> IndexedDataset::Open(const std::string& prefix) {
  IndexedDataset d;
  d.prefix_ = prefix;
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  DS_RETURN_IF_ERROR(MapFile(idx, &d.idx_, &d.idx_size_));
  const int64_t n = static_cast<int64_t>(d.idx_size_);
  if (n < kHeaderBytes || std::memcmp(d.idx_, kMagic, sizeof(kMagic)) != 0)
    return InvalidArgumentError(idx + ": not a Megatron indexed dataset index (no MMIDIDX header)");
  if (Load<uint64_t>(d.idx_ + 9, 0) != 1)
    return InvalidArgumentError(idx + ": version " + std::to_string(Load<uint64_t>(d.idx_ + 9, 0)) +
                                ", this reader knows version 1");
  d.dtype_ = static_cast<IndexedDtype>(d.idx_[17]);
  if (IndexedDtypeSize(d.dtype_) == 0)
    return InvalidArgumentError(idx + ": dtype code " + std::to_string(d.idx_[17]) +
                                " is not one of the format's 1-8");
  const uint64_t s = Load<uint64_t>(d.idx_ + 18, 0), e = Load<uint64_t>(d.idx_ + 26, 0);
  // Lengths, pointers, document indices, and a multimodal dataset's modes (one byte each).
  const uint64_t need = kHeaderBytes + 12 * s + 8 * e;
  if (s > (uint64_t{1} << 40) || e > (uint64_t{1} << 40) || e < 1 ||
      (d.idx_size_ != need && d.idx_size_ != need + s))
    return InvalidArgumentError(idx + ": " + std::to_string(s) + " sequences and " +
                                std::to_string(e) + " document entries need " +
                                std::to_string(need) + " bytes; the file has " +
                                std::to_string(d.idx_size_));
  d.sequences_ = static_cast<int64_t>(s);
  d.doc_entries_ = static_cast<int64_t>(e);
  d.lengths_ = d.idx_ + kHeaderBytes;
  d.pointers_ = d.idx_ + kHeaderBytes + 4 * s;
  d.doc_index_ = d.idx_ + kHeaderBytes + 12 * s;
  DS_RETURN_IF_ERROR(MapFile(bin, &d.bin_, &d.bin_size_));
  DS_RETURN_IF_ERROR(d.Check());
  return d;
}

// The pointers are the running sum of the lengths, the .bin holds exactly what they address,
// and the document indices start at 0, never fall and end at the sequence count.
Status IndexedDataset::Check() {
  const std::string idx = prefix_ + ".idx";
  const int64_t size = IndexedDtypeSize(dtype_);
  int64_t at = 0;
  for (int64_t i = 0; i < sequences_; ++i) {
    const int64_t len = sequence_length(i);
    if (len < 0 || sequence_pointer(i) != at)
      return InvalidArgumentError(idx + ": sequence " + std::to_string(i) + " has length " +
                                  std::to_string(len) + " at byte " +
                                  std::to_string(sequence_pointer(i)) + "; expected byte " +
                                  std::to_string(at));
    at += len * size;
    total_tokens_ += len;
  }
  if (static_cast<int64_t>(bin_size_) != at)
    return InvalidArgumentError(prefix_ + ".bin: " + std::to_string(bin_size_) +
                                " bytes, but its index addresses " + std::to_string(at));
  for (int64_t j = 0; j < doc_entries_; ++j) {
    const int64_t v = document_index(j), prev = j == 0 ? 0 : document_index(j - 1);
    if ((j == 0 && v != 0) || v < prev || v > sequences_ ||
        (j + 1 == doc_entries_ && v != sequences_))
      return InvalidArgumentError(idx + ": document index " + std::to_string(j) + " is " +
                                  std::to_string(v) + " (they start at 0, rise, and end at " +
                                  std::to_string(sequences_) + ")");
  }
  return OkStatus();
}

int64_t IndexedDataset::document_index(int64_t j) const { return Load<int64_t>(doc_index_, j); }
int64_t IndexedDataset::sequence_length(int64_t i) const { return Load<int32_t>(lengths_, i); }
int64_t IndexedDataset::sequence_pointer(int64_t i) const { return Load<int64_t>(pointers_, i); }

Status IndexedDataset::Tokens(int64_t i, std::vector<int64_t>* out, int64_t offset,
                              int64_t count) const {
  out->clear();
  if (i < 0 || i >= sequences_)
    return OutOfRangeError(prefix_ + ": sequence " + std::to_string(i) + " of " +
                           std::to_string(sequences_));
  if (!IntegerDtype(dtype_))
    return InvalidArgumentError(prefix_ + ": a " + IndexedDtypeName(dtype_) +
                                " dataset holds no token ids");
  const int64_t len = sequence_length(i);
  if (count < 0) count = len - offset;
  if (offset < 0 || count < 0 || offset + count > len)
    return OutOfRangeError(prefix_ + ": tokens [" + std::to_string(offset) + ", " +
                           std::to_string(offset + count) + ") of sequence " + std::to_string(i) +
                           " (length " + std::to_string(len) + ")");
  const uint8_t* row = bin_ + sequence_pointer(i);
  out->reserve(count);
  for (int64_t j = 0; j < count; ++j) out->push_back(LoadToken(row, dtype_, offset + j));
  return OkStatus();
}

IndexedDataset::IndexedDataset(IndexedDataset&& o) noexcept { *this = std::move(o); }

IndexedDataset& IndexedDataset::operator=(IndexedDataset&& o) noexcept {
  if (this == &o) return *this;
  Unmap();
  prefix_ = std::move(o.prefix_);
  dtype_ = o.dtype_;
  sequences_ = o.sequences_;
  doc_entries_ = o.doc_entries_;
  total_tokens_ = o.total_tokens_;
  idx_ = std::exchange(o.idx_, nullptr);
  idx_size_ = std::exchange(o.idx_size_, 0);
  bin_ = std::exchange(o.bin_, nullptr);
  bin_size_ = std::exchange(o.bin_size_, 0);
  lengths_ = o.lengths_;
  pointers_ = o.pointers_;
  doc_index_ = o.doc_index_;
  return *this;
}

IndexedDataset::~IndexedDataset() { Unmap(); }

void IndexedDataset::Unmap() {
  if (idx_) ::munmap(const_cast<uint8_t*>(idx_), idx_size_);
  if (bin_) ::munmap(const_cast<uint8_t*>(bin_), bin_size_);
  idx_ = bin_ = nullptr;
}

}  // namespace ds::data
