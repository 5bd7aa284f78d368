// Internal to runtime/hf: typed reads of config.json's keys with errors naming the file and the
// key, and the per-family readers (hf_config_llama.cc, hf_config_gpt.cc).
#pragma once

#include <string>

#include "runtime/base/json.h"
#include "runtime/base/status.h"
#include "runtime/graph/model_builder.h"

namespace ds::hf::internal {

class Config {
 public:
  Config(const Json& doc, std::string where) : doc_(doc), where_(std::move(where)) {}
  const Json* Find(const char* key) const { return doc_.Find(key); }
  bool Has(const char* key) const;  // present and not null
  StatusOr<int64_t> Int(const char* key) const;
  StatusOr<int64_t> IntOr(const char* key, int64_t dflt) const;
  StatusOr<double> DoubleOr(const char* key, double dflt) const;
  StatusOr<std::string> StringOr(const char* key, const std::string& dflt) const;
  StatusOr<bool> BoolOr(const char* key, bool dflt) const;
  // InvalidArgument "<file>: "<key>" <what>".
  Status Bad(const std::string& key, const std::string& what) const;
  // A refusal unless `key` is absent, null or equal to `allowed` (a number or bool).
  Status Require(const char* key, double allowed, const std::string& why) const;
  const std::string& where() const { return where_; }

 private:
  const Json& doc_;
  std::string where_;
};

// The keys every config here shares: num_hidden_layers, hidden_size, num_attention_heads,
// vocab_size, the MLP width under `ffn_key`, max_position_embeddings (2048 when absent).
Status ReadShape(const Config& c, const char* ffn_key, ModelSpec* spec);

// RoPE from rope_parameters / rope_scaling / rope_theta (and the legacy keys), into
// spec->rope_theta and spec->arch.rope.
Status ReadRope(const Config& c, ModelSpec* spec);

// layer_types ("full_attention" / "sliding_attention") into spec->arch.sliding_layers; absent:
// `every_other` makes Gemma 2's default (even layers slide), else none.
Status ReadLayerTypes(const Config& c, bool every_other, ModelSpec* spec);

StatusOr<ModelSpec> Gpt2Spec(const Config& c);
StatusOr<ModelSpec> OptSpec(const Config& c);
StatusOr<ModelSpec> GptNeoxSpec(const Config& c);
// llama, mistral, qwen2, qwen3, phi3, gemma, gemma2.
StatusOr<ModelSpec> LlamaLikeSpec(const Config& c, const std::string& model_type);

}  // namespace ds::hf::internal
