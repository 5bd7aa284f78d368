// Hugging Face safetensors files: writer and validating mmap reader.
//
// Format: u64 little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// padded with spaces to a multiple of 8, then the data section; offsets are relative to
// it, and tensors tile it exactly (no holes, no overlap), as the reference Rust reader
// requires. Supported dtypes: F32 BF16 F16 I32 I64 U16.
//
// A SafetensorsFile is immutable after Open and safe to read from many threads; its views
// point into a read-only mapping that lives as long as the object (writes through them fault).
//
//   DS_RETURN_IF_ERROR(WriteSafetensors("w.safetensors", {{"wte", t}}, {{"format",
//   "pt"}}).status()); DS_ASSIGN_OR_RETURN(SafetensorsFile f,
//   SafetensorsFile::Open("w.safetensors")); DS_ASSIGN_OR_RETURN(OwnedTensor w, f.CopyOut("wte",
//   DType::kF32));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/core/tensor.h"

namespace ds::ckpt {

// A named view of any dtype; the caller owns the memory.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// "F32", "BF16", ... (the safetensors spelling) and back; false for anything else.
const char* SafetensorsDTypeName(DType dtype);
bool ParseSafetensorsDType(const std::string& name, DType* dtype);

struct SafetensorsWriteResult {
  std::vector<uint32_t> tensor_crc32c;  // CRC-32C of each tensor's bytes, in input order
  uint32_t file_crc32c = 0;             // CRC-32C of the whole file
  uint64_t file_bytes = 0;
};

// Writes `tensors` (views, any supported dtype, names unique and not "__metadata__") to
// `path` + ".tmp", fsyncs, renames over `path` and fsyncs the directory. Data are ordered
// by element size, largest first (stable otherwise), so every tensor is aligned to its
// element size in the file. Errors: InvalidArgument for bad input, I/O errors with the path.
StatusOr<SafetensorsWriteResult> WriteSafetensors(
    const std::string& path, const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Writes a safetensors file whose tensors arrive one after another, so a file larger than
// memory can be produced (consolidating a sharded checkpoint one parameter at a time). The
// header comes from `specs` up front; data are laid out in `specs` order, and each tensor
// must stay aligned to its element size (InvalidArgument otherwise: list larger elements
// first). Writes path + ".tmp"; Finish fsyncs it and renames it over `path`; destroying an
// unfinished writer deletes the temporary. Not thread-safe.
//
//   DS_ASSIGN_OR_RETURN(auto w, SafetensorsStreamWriter::Create(path, {{"wte", spec}}, {}));
//   DS_RETURN_IF_ERROR(w->Append(wte_bytes, spec.nbytes()));   // in pieces if wanted
//   DS_ASSIGN_OR_RETURN(SafetensorsWriteResult r, w->Finish());
class SafetensorsStreamWriter {
 public:
  static StatusOr<std::unique_ptr<SafetensorsStreamWriter>> Create(
      const std::string& path, const std::vector<std::pair<std::string, TensorSpec>>& specs,
      const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStreamWriter();
  // Appends the next `n` data bytes (they may end or cross tensor boundaries).
  Status Append(const void* data, size_t n);
  // FailedPrecondition unless exactly every tensor's bytes were appended.
  StatusOr<SafetensorsWriteResult> Finish();

 private:
  SafetensorsStreamWriter() = default;
  std::string path_;
  std::unique_ptr<FileWriter> out_;
  std::vector<uint64_t> ends_;  // data offset where tensor i ends
  SafetensorsWriteResult result_;
  uint64_t written_ = 0;  // data bytes so far
  size_t current_ = 0;    // tensor receiving bytes
  bool finished_ = false;
};

struct SafetensorsEntry {
  std::string name;
  TensorSpec spec;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;
  const void* data = nullptr;  // into the mapping; read-only
  uint64_t nbytes() const { return end - begin; }
  // A view of the mapped bytes; the memory is read-only.
  Tensor view() const { return Tensor(const_cast<void*>(data), spec.shape, spec.dtype); }
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors (DataLoss unless the file cannot be opened) start with
  // the path and name the problem: header length larger than the file, invalid JSON, unknown
  // dtype, bad shape, offsets out of range / overlapping / leaving gaps / not matching
  // shape * dtype size, duplicate names, bad __metadata__.
  static StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // In data-offset order.
  const std::vector<SafetensorsEntry>& tensors() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsEntry* Find(const std::string& name) const;
  // NotFound "<path>: no tensor named <name>" when absent.
  StatusOr<Tensor> Get(const std::string& name) const;
  // Copies tensor `name` into owned memory; `dtype` converts between float types
  // (e.g. BF16 -> F32); nullopt keeps the stored dtype.
  StatusOr<OwnedTensor> CopyOut(const std::string& name,
                                std::optional<DType> dtype = std::nullopt) const;

  uint64_t file_bytes() const { return file_.size(); }
  uint64_t data_start() const { return data_start_; }  // 8 + header length
  const uint8_t* file_data() const { return file_.data(); }

 private:
  Status Parse();

  MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Copies `src` into a new OwnedTensor of `dtype`. Float dtypes convert among each other
// (round to nearest even); integer dtypes only copy to themselves (else InvalidArgument).
StatusOr<OwnedTensor> CopyTensorAs(const Tensor& src, DType dtype);

}  // namespace ds::ckpt
