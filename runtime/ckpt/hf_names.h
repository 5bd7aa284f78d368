// Hugging Face <-> ds-runtime parameter names and layouts for GPT-2 and Llama.
//
// Our names are a contract with the graph generator (runtime/ckpt/README.md lists them):
// every Linear weight is [out, in]; GPT-2's fused attention is attn.qkv ([3C, C], rows q,
// k, v), Llama's is attn.qkv ([(H + 2 Hkv) D, C], rows q heads, k heads, v heads). HF GPT-2
// stores Conv1D weights [in, out] (transposed here); HF Llama stores q/k/v separately
// (concatenated / split by rows here). RoPE needs no permutation (both use rotate_half).
// Stateless functions; safe to call from several threads on different files.
//
//   HfOptions o; o.dtype = DType::kBF16;
//   DS_RETURN_IF_ERROR(ImportHf("gpt2", "hf/model.safetensors", "weights.safetensors"));
//   DS_RETURN_IF_ERROR(ExportHf("llama", "ckpt", "hf/model.safetensors", o));
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/core/tensor.h"

namespace ds::ckpt {

enum class ModelFamily { kGpt2, kLlama };

// "gpt2" or "llama"; InvalidArgument otherwise.
StatusOr<ModelFamily> ParseModelFamily(const std::string& name);

struct HfOptions {
  // Llama: heads and key/value heads. 0 infers the q/k/v split from shapes (q rows =
  // o_proj's input width); when set they are checked: q rows = H*D, k = v rows = Hkv*D,
  // D = C/H. GPT-2 ignores them.
  int n_head = 0;
  int n_kv_head = 0;
  DType dtype = DType::kF32;  // float dtype of every written tensor (f32, bf16, f16)
  // Import, Llama: the target model ties its head to embed_tokens, so no lm_head.weight is made
  // (one in the file is ignored, as transformers' tie_word_embeddings ignores it); false: a
  // missing lm_head.weight becomes a copy of embed_tokens (an untied model's head).
  bool tied = false;
  // Export: > 0 writes a folder as transformers' save_pretrained(max_shard_size) does
  // (hf_shards.h: model.safetensors, or shards of at most this many bytes and their index).
  int64_t max_shard_bytes = 0;
};

struct OwnedNamedTensor {
  std::string name;
  OwnedTensor tensor;
};

// In-memory conversions. `source` (a file name) labels errors: unknown or missing tensor
// names and shape mismatches are InvalidArgument naming the tensor and `source`.
// GPT-2 import accepts names with or without "transformer.", ignores the attn.bias /
// attn.masked_bias buffers and accepts lm_head.weight only when equal to wte (tied).
// Llama import ignores rotary_emb.inv_freq and copies embed_tokens to lm_head when the
// head is absent (tied). Export writes transformers' names ("transformer." prefix for
// GPT-2, no lm_head for GPT-2 since it is tied).
StatusOr<std::vector<OwnedNamedTensor>> HfToOurs(ModelFamily family,
                                                 const std::vector<NamedTensor>& hf,
                                                 const std::string& source,
                                                 const HfOptions& options = {});
StatusOr<std::vector<OwnedNamedTensor>> OursToHf(ModelFamily family,
                                                 const std::vector<NamedTensor>& ours,
                                                 const std::string& source,
                                                 const HfOptions& options = {});

// Reads HF weights from `hf_path`: one .safetensors file, a sharded checkpoint's
// *.safetensors.index.json, or a directory holding model.safetensors or
// model.safetensors.index.json. Writes our names to `out_path` (safetensors).
Status ImportHf(const std::string& family, const std::string& hf_path, const std::string& out_path,
                const HfOptions& options = {});

// Reads our weights from `our_path`: a .safetensors file, or a checkpoint step directory or
// root (its model.safetensors, verified through LoadCheckpoint). Writes one HF safetensors
// file with metadata {"format": "pt"} (transformers requires it).
Status ExportHf(const std::string& family, const std::string& our_path,
                const std::string& hf_out_path, const HfOptions& options = {});

}  // namespace ds::ckpt
