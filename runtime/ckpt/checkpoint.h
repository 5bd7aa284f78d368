// Training checkpoints: one directory per step, written atomically, verified on load.
//
//   root/latest                      text: "step_00000010\n"
//   root/step_00000010/manifest.json every file and tensor with CRC-32C, step, info
//                     /model.safetensors, optimizer.safetensors, state.json
//
// Save writes root/.tmp-step_XXXXXXXX, fsyncs, renames it into place and then replaces
// `latest`, so a crash at any point leaves the previous checkpoint loadable and `latest`
// pointing at it. One writer per root at a time (rank 0, or one writer per file set once
// ZeRO shards arrive); loading is read-only and may run concurrently. Format: README.md.
//
//   DS_RETURN_IF_ERROR(SaveCheckpoint("ckpt", contents, /*keep_last=*/3));
//   DS_ASSIGN_OR_RETURN(LoadedCheckpoint ck, LoadCheckpoint("ckpt"));
//   DS_ASSIGN_OR_RETURN(Tensor wte, ck.ModelTensor("wte"));
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/manifest.h"
#include "runtime/ckpt/safetensors.h"

namespace ds::ckpt {

inline constexpr char kModelFile[] = "model.safetensors";
inline constexpr char kOptimizerFile[] = "optimizer.safetensors";
// Weights a job reads and does not train (LoRA's base model), whole, with their names.
inline constexpr char kFrozenFile[] = "frozen.safetensors";
inline constexpr char kStateFile[] = "state.json";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kLatestFile[] = "latest";

struct CheckpointContents {
  int64_t step = 0;                // >= 0; names the directory
  std::vector<NamedTensor> model;  // weights -> model.safetensors (views, any dtype)
  std::vector<NamedTensor>
      optimizer;                    // "exp_avg/<param>", "master/<param>" -> optimizer.safetensors
  std::vector<NamedTensor> frozen;  // frozen weights -> frozen.safetensors (only when any)
  std::map<std::string, std::string> state;  // key -> JSON text ("scheduler", "rng", ...)
  std::map<std::string, std::string> info;   // free-form strings -> manifest "info"
  // Optional: tensor name (model or optimizer) -> its place in a global tensor (ZeRO).
  std::map<std::string, ShardRecord> shards;
};

// Writes `contents` as root/step_XXXXXXXX (8+ digits), then points root/latest at it.
// Removes stale root/.tmp-* first. An existing directory of the same step is replaced
// (atomically where the filesystem supports RENAME_EXCHANGE). keep_last > 0 then deletes
// all but the newest `keep_last` step directories at or below this step. Blocks on I/O.
// Errors: InvalidArgument (duplicate names, state text not JSON, bad shard), I/O errors
// with the path, Aborted from a simulated crash.
Status SaveCheckpoint(const std::string& root, const CheckpointContents& contents,
                      int keep_last = 0);

// Multi-writer saves (ZeRO: every rank writes its own shard file into the same directory;
// all writers see the same filesystem). The coordinator (rank 0) calls BeginCheckpoint and
// shares nothing but the step; every writer writes its files into TempStepDir(root, step);
// once all writers finished (a barrier), the coordinator calls CommitCheckpoint with their
// file and tensor records. The step directory and `latest` then appear exactly as with
// SaveCheckpoint (Note [Checkpoint atomicity]). A failed save leaves only a .tmp-* entry,
// which the next save removes.
std::string TempStepDir(const std::string& root, int64_t step);
// Creates root, removes stale root/.tmp-* entries, creates TempStepDir(root, step) empty.
Status BeginCheckpoint(const std::string& root, int64_t step);
// Files other writers put into TempStepDir, and the tensors they hold.
struct WrittenFiles {
  std::vector<FileRecord> files;
  std::vector<TensorRecord> tensors;
};
// Writes `contents` (model.safetensors / optimizer.safetensors only when non-empty,
// state.json always) next to `written` (each must exist with its recorded size), the
// manifest listing all of them, then installs the directory and moves `latest`.
// Errors as SaveCheckpoint's, plus DataLoss when a written file is missing or differs in size.
Status CommitCheckpoint(const std::string& root, const CheckpointContents& contents,
                        const WrittenFiles& written, int keep_last = 0);

// Test hook: the next SaveCheckpoint stops at `point` and returns Aborted, leaving the
// files as a crash there would. One-shot: the point resets to kNone once it fires.
enum class CrashPoint { kNone, kAfterModelFile, kBeforeRename, kBeforeLatestUpdate };
void SetCrashPointForTesting(CrashPoint point);

// "step_00000010".
std::string StepDirName(int64_t step);

struct LoadOptions {
  bool verify_checksums = true;  // false skips the CRC passes (sizes, headers still checked)
};

// A loaded checkpoint. Owns the read-only mappings its tensor views point into; the views
// stay valid for the object's life (also across moves). Immutable; thread-safe to read.
class LoadedCheckpoint {
 public:
  int64_t step() const { return manifest_.step; }
  const std::string& dir() const { return dir_; }  // the step directory
  const Manifest& manifest() const { return manifest_; }
  // Tensors of model.safetensors / optimizer.safetensors in save order; read-only memory.
  const std::vector<NamedTensor>& model() const { return model_; }
  const std::vector<NamedTensor>& optimizer() const { return optimizer_; }
  // NotFound "<dir>: no model tensor <name>" when absent.
  StatusOr<Tensor> ModelTensor(const std::string& name) const;
  StatusOr<Tensor> OptimizerTensor(const std::string& name) const;
  // state.json: key -> the exact JSON text that was saved.
  const std::map<std::string, std::string>& state() const { return state_; }
  const std::map<std::string, std::string>& info() const { return manifest_.info; }
  // Any safetensors file of the manifest by name (e.g. per-rank shard files); nullptr if none.
  const SafetensorsFile* file(const std::string& name) const;

 private:
  friend StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string&, const LoadOptions&);

  std::string dir_;
  Manifest manifest_;
  std::map<std::string, SafetensorsFile> files_;
  std::vector<NamedTensor> model_;
  std::vector<NamedTensor> optimizer_;
  std::map<std::string, std::string> state_;
};

// A step directory (holds manifest.json) as is; a root through its `latest` file.
// NotFound when neither applies; DataLoss when `latest` names a missing directory.
StatusOr<std::string> ResolveCheckpointDir(const std::string& root_or_step_dir);

// Resolves, maps and verifies: the manifest, every listed file's presence and size, each
// safetensors header, each tensor's dtype/shape and CRC, each file's CRC, no unlisted
// tensors. Errors (DataLoss) name the file and tensor, e.g. "ckpt/step_00000010/
// model.safetensors: tensor h.0.ln_1.weight checksum mismatch (manifest 1a2b3c4d, file
// 3c4d5e6f)". Reads every byte when verifying.
StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& root_or_step_dir,
                                          const LoadOptions& options = {});

// Steps of the step_* directories under `root`, ascending (temporaries excluded).
StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& root);

}  // namespace ds::ckpt
