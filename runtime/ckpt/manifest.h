// The checkpoint manifest (manifest.json): what a step directory must contain, with
// checksums. Plain data plus JSON (de)serialization; see README.md for the format.
//
//   Manifest m; m.step = 10; m.files.push_back({"model.safetensors", bytes, crc});
//   std::string text = ManifestToJson(m);
//   DS_ASSIGN_OR_RETURN(Manifest back, ParseManifest(text));
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/tensor.h"

namespace ds::ckpt {

// Where a stored tensor sits in a larger global tensor. Two forms:
//   box   (flat_offset < 0): the stored data is the box [offset, offset + shape) of
//         `global_shape` (same rank); tensor-parallel slices.
//   flat  (flat_offset >= 0): the stored tensor is 1-D [n] and holds elements
//         [flat_offset, flat_offset + n) of the row-major flattening of `global_shape`;
//         `offset` is empty. ZeRO shards (a rank's segment cuts a parameter anywhere).
//         Strided (row_stride > 0): the stored tensor is 2-D [rows, n] and row i holds
//         elements [flat_offset + i row_stride, ... + n), row_stride >= n: a ZeRO shard of a
//         tensor-parallel slice whose rows are apart in the whole parameter (row-parallel
//         weights), one record instead of one per row.
// Absent means "the whole tensor".
struct ShardRecord {
  Shape global_shape;
  Shape offset;
  int64_t flat_offset = -1;
  int64_t row_stride = 0;  // flat only: > 0 for a strided [rows, n] record
  bool flat() const { return flat_offset >= 0; }
  bool operator==(const ShardRecord& o) const {
    return global_shape == o.global_shape && offset == o.offset && flat_offset == o.flat_offset &&
           row_stride == o.row_stride;
  }
};

struct TensorRecord {
  std::string name;  // name inside `file`
  std::string file;  // a FileRecord name
  TensorSpec spec;
  uint32_t crc32c = 0;  // of the tensor's bytes
  std::optional<ShardRecord> shard;
};

struct FileRecord {
  std::string name;  // relative to the step directory, no '/'
  uint64_t bytes = 0;
  uint32_t crc32c = 0;  // of the whole file
};

struct Manifest {
  static constexpr int kVersion = 1;
  int64_t step = 0;
  std::vector<FileRecord> files;
  std::vector<TensorRecord> tensors;        // in save order
  std::map<std::string, std::string> info;  // free-form: config echo, world size, ...
};

// Pretty-printed JSON text.
std::string ManifestToJson(const Manifest& m);

// Parses and validates (format name, version, types, unique file names, tensors referring
// to listed files, unique (file, name) pairs, shard bounds). Errors are DataLoss without
// the path; callers prefix it.
StatusOr<Manifest> ParseManifest(std::string_view text);

// Checks a shard record against the stored shape (used by the writer and the parser).
Status ValidateShard(const std::string& tensor, const Shape& shape, const ShardRecord& shard);

}  // namespace ds::ckpt
