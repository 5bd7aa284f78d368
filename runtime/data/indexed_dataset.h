// Megatron's memory-mapped indexed dataset (megatron-core's MMapIndexedDataset): a pair of
// files `<prefix>.bin` (token ids of one dtype, back to back) and `<prefix>.idx` (header,
// sequence lengths, byte pointers into the .bin, document indices). The byte layout is in
// README.md; IndexedDatasetWriter writes byte for byte what megatron-core's
// IndexedDatasetBuilder writes for the same documents, and IndexedDataset reads any dataset
// Megatron-LM's preprocess_data.py made (every dtype code the format defines).
//
//   IndexedDatasetWriter w(prefix, IndexedDtype::kUint16);
//   DS_RETURN_IF_ERROR(w.AddDocument({5, 6, 7, 0}));
//   DS_RETURN_IF_ERROR(w.Finalize());      // .bin and .idx appear whole, or not at all
//   DS_ASSIGN_OR_RETURN(IndexedDataset d, IndexedDataset::Open(prefix));
//   d.Tokens(i, &row);                     // sequence i as int64 token ids
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::data {

// The .idx header's dtype codes (megatron-core's DType).
enum class IndexedDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};
// Bytes per element; 0 for a code the format does not define.
int IndexedDtypeSize(IndexedDtype t);
const char* IndexedDtypeName(IndexedDtype t);
// What preprocess_data.py picks: uint16 below 65500 words, else int32.
IndexedDtype IndexedDtypeForVocab(int64_t vocab_size);

// A read-only view of `<prefix>.idx` and `<prefix>.bin` (both memory-mapped). Open checks the
// magic, version and dtype code, that every array fits the .idx, that the pointers are the
// running sum of the lengths and the .bin holds exactly what they address, and that the
// document indices start at 0, rise and end at the sequence count: each problem is one error
// naming the file. Move-only.
class IndexedDataset {
 public:
  static StatusOr<IndexedDataset> Open(const std::string& prefix);
  IndexedDataset(IndexedDataset&& o) noexcept;
  IndexedDataset& operator=(IndexedDataset&& o) noexcept;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  ~IndexedDataset();

  const std::string& prefix() const { return prefix_; }
  IndexedDtype dtype() const { return dtype_; }
  int64_t sequences() const { return sequences_; }
  // Document j owns sequences [document_index(j), document_index(j + 1)); documents() + 1
  // entries.
  int64_t documents() const { return doc_entries_ - 1; }
  int64_t document_index(int64_t j) const;
  int64_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;  // byte offset in the .bin
  int64_t total_tokens() const { return total_tokens_; }
  // Tokens [offset, offset + count) of sequence i (count < 0: to its end) as int64, appended
  // to *out after clearing it. Integer dtypes only (InvalidArgument for float datasets).
  Status Tokens(int64_t i, std::vector<int64_t>* out, int64_t offset = 0, int64_t count = -1) const;

 private:
  IndexedDataset() = default;
  Status Check();
  void Unmap();

  std::string prefix_;
  IndexedDtype dtype_ = IndexedDtype::kUint16;
  int64_t sequences_ = 0, doc_entries_ = 0, total_tokens_ = 0;
  const uint8_t* idx_ = nullptr;
  size_t idx_size_ = 0;
  const uint8_t* bin_ = nullptr;
  size_t bin_size_ = 0;
  // The .idx arrays (unaligned: read through memcpy).
  const uint8_t* lengths_ = nullptr;
  const uint8_t* pointers_ = nullptr;
  const uint8_t* doc_index_ = nullptr;
};

// Writes `<prefix>.bin` and `<prefix>.idx` as megatron-core's IndexedDatasetBuilder does, one
// sequence per added document (no sentence splitting). Both files are written under
// `<file>.tmp` names and renamed only by Finalize, so an interrupted run leaves no half
// dataset under the real names.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, IndexedDtype dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document of one sequence; a token the dtype cannot hold is InvalidArgument.
  Status AddDocument(const std::vector<int64_t>& tokens);
  // Writes the .idx, syncs and renames both files into place.
  Status Finalize();
  int64_t sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  Status OpenBin();

  std::string prefix_;
  IndexedDtype dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_index_{0};
  int64_t tokens_ = 0;
  bool finalized_ = false;
};

}  // namespace ds::data
