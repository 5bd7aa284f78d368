// ZeRO shard files and the per-parameter index of a checkpoint.
//
// Under ZeRO (stage >= 1, dp > 1) every rank writes its own file
// zero_shard_rank_XXXXX.safetensors into the step directory: for each state ("master" = the
// fp32 master weights, "exp_avg", "exp_avg_sq", "momentum_buffer") and each parameter slice
// the rank owns, one 1-D f32 tensor named "<state>/<param>#<begin>" holding elements
// [begin, begin + n) of that parameter flattened (row-major). The manifest records it with a
// flat shard {global_shape: <param shape>, flat_offset: begin}. A tensor-parallel rank's rows
// of a row-parallel weight are one strided slice: a 2-D [rows, n] tensor, row i at
// begin + i x row_stride. Format: README.md.
//
// CheckpointReader finds any element range of any (state, parameter) in a checkpoint,
// sharded or consolidated, and reads only the slices that overlap it (files are mapped, so
// only the touched pages are read). Not thread-safe (files are mapped lazily); use one per
// thread.
//
//   DS_ASSIGN_OR_RETURN(CheckpointReader r, CheckpointReader::Open("ckpt"));
//   DS_RETURN_IF_ERROR(r.Verify("exp_avg", "wte", 0, 128));
//   DS_RETURN_IF_ERROR(r.Read("exp_avg", "wte", 0, 128, dst));
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/manifest.h"
#include "runtime/ckpt/safetensors.h"

namespace ds::ckpt {

inline constexpr char kMasterState[] = "master";
// The frozen weights' state (frozen.safetensors, whole tensors in either layout).
inline constexpr char kFrozenState[] = "frozen";
// manifest info "layout" of a sharded checkpoint.
inline constexpr char kZeroShardedLayout[] = "zero_sharded";

// "zero_shard_rank_00003.safetensors"; the parser accepts exactly that form.
std::string ZeroShardFileName(int rank);
bool ParseZeroShardFileName(const std::string& name, int* rank);
// "exp_avg/h.0.attn.qkv.weight#1536".
std::string SliceName(const std::string& state, const std::string& param, int64_t begin);

// Elements [begin, begin + count) of parameter `param` (of `param_shape`) flattened, of `state`;
// with rows > 1, that many such runs, row i at begin + i x row_stride (stored one after another).
struct SliceDesc {
  std::string state;
  std::string param;
  Shape param_shape;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t rows = 1;
  int64_t row_stride = 0;
};

struct ZeroShardMeta {
  int rank = 0;
  int world_size = 1;
  int zero_stage = 0;
  int64_t step = 0;
};

// The manifest record of slice `d` in rank `rank`'s file, whose bytes have checksum `crc`.
TensorRecord SliceRecord(int rank, const SliceDesc& d, uint32_t crc);

// Writes dir/ZeroShardFileName(meta.rank): slice i as a 1-D f32 tensor of slices[i].count
// floats read from data[i] (borrowed). Metadata: format, rank, world_size, zero_stage, step.
// The tensor checksums come back in slice order. Blocks on I/O; copies nothing.
StatusOr<SafetensorsWriteResult> WriteZeroShardFile(const std::string& dir,
                                                    const ZeroShardMeta& meta,
                                                    const std::vector<SliceDesc>& slices,
                                                    const std::vector<const float*>& data);

// Where one (state, parameter) range is stored: manifest().tensors[record] holds
// parameter-local flat elements [begin, begin + count).
struct SliceRef {
  size_t record = 0;
  int64_t begin = 0;  // in the parameter, flattened
  int64_t count = 0;
  int64_t at = 0;  // where in the record's elements (a strided record's row)
};

class CheckpointReader {
 public:
  // Resolves (ResolveCheckpointDir), parses manifest.json, reads state.json (checksum
  // verified) and indexes every stored range. Consolidated checkpoints: model.safetensors
  // tensors are the "master" state, optimizer.safetensors "<state>/<param>" the others.
  // Sharded ones: only the rank files are indexed (their "master" slices are the weights);
  // the manifest must list zero_shard_rank_0..W-1 for info world_size W and nothing beyond.
  // Checks that every (state, parameter) is tiled exactly (no gap, no overlap) and that its
  // slices agree on the parameter's shape. Maps no tensor file. Errors are DataLoss naming
  // the file (Unimplemented for box shards, which only tensor parallelism would write).
  static StatusOr<CheckpointReader> Open(const std::string& root_or_step_dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  int64_t step() const { return manifest_.step; }
  bool sharded() const { return sharded_; }
  // state.json: key -> the exact JSON text that was saved.
  const std::map<std::string, std::string>& state() const { return state_; }
  // Every indexed parameter with its shape, in the order the manifest first names it.
  const std::vector<std::pair<std::string, Shape>>& params() const { return params_; }
  // Slices of (state, param) sorted by begin, tiling [0, numel); nullptr when absent.
  const std::vector<SliceRef>* Slices(const std::string& state, const std::string& param) const;

  // Maps the files of the slices overlapping elements [lo, hi) of (state, param) and checks
  // each such slice once: its header entry against the manifest (dtype, shape, float type),
  // the file's metadata (rank, world size, step) and the slice's CRC-32C over its bytes.
  // DataLoss naming the file and tensor; "missing" when the state or parameter is absent.
  Status Verify(const std::string& state, const std::string& param, int64_t lo, int64_t hi);
  // Copies elements [lo, hi) of (state, param) to dst as fp32 (bf16/f16 converted);
  // verifies first what Verify would.
  Status Read(const std::string& state, const std::string& param, int64_t lo, int64_t hi,
              float* dst);
  // Checks a whole file of the manifest: size, header, its tensors against the manifest
  // both ways, and the file's CRC-32C (reads every byte).
  Status VerifyFile(const FileRecord& file);

 private:
  StatusOr<const SafetensorsFile*> Map(const std::string& name);
  Status BuildIndex();
  // The rank files against the manifest's world_size (sets sharded_, world_size_).
  Status CheckRankFiles();
  // Every (state, param) tiled exactly by its slices; param_at: params_'s index of a name.
  Status CheckTiling(const std::map<std::string, size_t>& param_at);

  std::string dir_;
  Manifest manifest_;
  bool sharded_ = false;
  int world_size_ = 1;
  std::map<std::string, std::string> state_;
  std::vector<std::pair<std::string, Shape>> params_;
  std::map<std::pair<std::string, std::string>, std::vector<SliceRef>> index_;
  std::map<std::string, SafetensorsFile> files_;  // mapped lazily
  std::set<size_t> verified_;                     // records whose CRC matched
};

}  // namespace ds::ckpt
