// IndexedDatasetWriter (indexed_dataset.h): megatron-core's IndexedDatasetBuilder, one sequence
// per document, written under .tmp names and renamed whole by Finalize.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/base/status_macros.h"
#include "runtime/data/indexed_dataset.h"

namespace ds::data {
namespace {

// Writes `n` bytes; an error names the file.
Status WriteAll(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) return ErrnoToStatus(errno, "write(" + path + ")");
  return OkStatus();
}

template <typename T>
Status WriteValue(std::FILE* f, T v, const std::string& path) {
  return WriteAll(f, &v, sizeof(v), path);
}

// Flushes, syncs and closes `f`, then renames `tmp` to `path`.
Status Publish(std::FILE* f, const std::string& tmp, const std::string& path) {
  Status s;
  if (std::fflush(f) != 0) s = ErrnoToStatus(errno, "write(" + tmp + ")");
  if (s.ok() && ::fsync(::fileno(f)) != 0) s = ErrnoToStatus(errno, "fsync(" + tmp + ")");
  if (std::fclose(f) != 0 && s.ok()) s = ErrnoToStatus(errno, "close(" + tmp + ")");
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoToStatus(errno, "rename(" + tmp + ", " + path + ")");
  return s;
}

bool Fits(int64_t v, IndexedDtype t) {
  switch (t) {
    case IndexedDtype::kUint8:
      return v >= 0 && v <= 0xff;
    case IndexedDtype::kInt8:
      return v >= -128 && v <= 127;
    case IndexedDtype::kInt16:
      return v >= -32768 && v <= 32767;
    case IndexedDtype::kInt32:
      return v >= INT32_MIN && v <= INT32_MAX;
    case IndexedDtype::kUint16:
      return v >= 0 && v <= 0xffff;
    default:
      return true;
  }
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDtype dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_) {  // not finalized: nothing appears under the real names
    std::fclose(bin_);
    std::remove((prefix_ + ".bin.tmp").c_str());
  }
}

Status IndexedDatasetWriter::OpenBin() {
  if (IndexedDtypeSize(dtype_) == 0)
    return InvalidArgumentError(prefix_ + ": dtype code " +
                                std::to_string(static_cast<int>(dtype_)) + " is not one of 1-8");
  const std::string tmp = prefix_ + ".bin.tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  if (!bin_) return ErrnoToStatus(errno, "open(" + tmp + ")");
  return OkStatus();
}

Status IndexedDatasetWriter::AddDocument(const std::vector<int64_t>& tokens) {
  if (finalized_) return FailedPreconditionError(prefix_ + ": the dataset is finalized");
  if (!bin_) DS_RETURN_IF_ERROR(OpenBin());
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    return InvalidArgumentError(prefix_ + ": a document of " + std::to_string(tokens.size()) +
                                " tokens (an int32 length holds at most 2^31 - 1)");
  const int size = IndexedDtypeSize(dtype_);
  std::vector<uint8_t> row(tokens.size() * size);
  for (size_t j = 0; j < tokens.size(); ++j) {
    const int64_t v = tokens[j];
    if (!Fits(v, dtype_))
      return InvalidArgumentError(prefix_ + ": token " + std::to_string(v) + " of document " +
                                  std::to_string(sequences()) + " does not fit " +
                                  IndexedDtypeName(dtype_));
    if (dtype_ == IndexedDtype::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(&row[j * size], &f, size);
    } else if (dtype_ == IndexedDtype::kFloat64) {
      const double f = static_cast<double>(v);
      std::memcpy(&row[j * size], &f, size);
    } else {
      std::memcpy(&row[j * size], &v, size);  // little-endian: the low bytes
    }
  }
  DS_RETURN_IF_ERROR(WriteAll(bin_, row.data(), row.size(), prefix_ + ".bin.tmp"));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += static_cast<int64_t>(tokens.size());
  doc_index_.push_back(sequences());
  return OkStatus();
}

Status IndexedDatasetWriter::Finalize() {
  if (finalized_) return FailedPreconditionError(prefix_ + ": the dataset is finalized");
  if (!bin_) DS_RETURN_IF_ERROR(OpenBin());
  const std::string idx = prefix_ + ".idx", tmp = idx + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return ErrnoToStatus(errno, "open(" + tmp + ")");
  static constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  Status s = WriteAll(f, kMagic, sizeof(kMagic), tmp);
  if (s.ok()) s = WriteValue<uint64_t>(f, 1, tmp);
  if (s.ok()) s = WriteValue<uint8_t>(f, static_cast<uint8_t>(dtype_), tmp);
  if (s.ok()) s = WriteValue<uint64_t>(f, lengths_.size(), tmp);
  if (s.ok()) s = WriteValue<uint64_t>(f, doc_index_.size(), tmp);
  if (s.ok()) s = WriteAll(f, lengths_.data(), lengths_.size() * 4, tmp);
  std::vector<int64_t> pointers(lengths_.size());
  for (size_t i = 1; i < pointers.size(); ++i)
    pointers[i] = pointers[i - 1] + int64_t{lengths_[i - 1]} * IndexedDtypeSize(dtype_);
  if (s.ok()) s = WriteAll(f, pointers.data(), pointers.size() * 8, tmp);
  if (s.ok()) s = WriteAll(f, doc_index_.data(), doc_index_.size() * 8, tmp);
  if (!s.ok()) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return s;
  }
  DS_RETURN_IF_ERROR(Publish(bin_, prefix_ + ".bin.tmp", prefix_ + ".bin"));
  bin_ = nullptr;
  finalized_ = true;
  return Publish(f, tmp, idx);
}

}  // namespace ds::data
