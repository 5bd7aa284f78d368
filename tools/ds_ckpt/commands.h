// The subcommands of ds-ckpt (main.cc parses flags and calls these). README.md documents
// the tool; runtime/ckpt/README.md the formats. Stateless; each call blocks on file I/O.
//
//   DS_ASSIGN_OR_RETURN(std::string report, ds::tools::InspectCheckpoint("ckpt"));
//   DS_RETURN_IF_ERROR(ds::tools::RunExport({"llama", "ckpt", "hf.safetensors", "bf16", 4, 2}));
#pragma once

#include <string>

#include "runtime/base/status.h"

namespace ds::tools {

struct ConvertOptions {
  std::string family;         // gpt2 | llama
  std::string input;          // import: HF file/index/dir; export: our file or checkpoint
  std::string output;         // safetensors path
  std::string dtype = "f32";  // f32 | bf16 | f16
  int n_head = 0;             // llama q/k/v split check; 0 infers from shapes
  int n_kv_head = 0;
  std::string max_shard_size;  // export: "" one file at output; else a folder of shards
  std::string config;          // export: a job file; output becomes a folder with config.json
};

Status RunImport(const ConvertOptions& options);
Status RunExport(const ConvertOptions& options);

// A checkpoint (root or step dir), verified, described: step, info, files, every tensor
// with dtype, shape, size and checksum, state keys. A .safetensors file is described from
// its header (no manifest, so no checksums to verify). Fails with the verification error.
StatusOr<std::string> InspectCheckpoint(const std::string& path);

// Verifies every checksum; returns a one-line summary or the first error.
StatusOr<std::string> VerifyCheckpoint(const std::string& path);

struct ConsolidateOptions {
  std::string input;   // a checkpoint directory (or a root with `latest`), sharded or not
  std::string output;  // one safetensors file of fp32 tensors
};

// Writes the checkpoint's weights as one fp32 safetensors file (what zero_to_fp32 does),
// after verifying every file; one parameter in memory at a time. See Note [consolidate] in
// commands.cc.
Status RunConsolidate(const ConsolidateOptions& options);

}  // namespace ds::tools
