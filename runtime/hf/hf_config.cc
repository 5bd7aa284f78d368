#include "runtime/hf/hf_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "runtime/base/status_macros.h"
#include "runtime/hf/hf_config_reader.h"

namespace ds::hf {
namespace internal {

bool Config::Has(const char* key) const {
  const Json* v = doc_.Find(key);
  return v && !v->is_null();
}

StatusOr<int64_t> Config::Int(const char* key) const {
  const Json* v = doc_.Find(key);
  if (!v || v->is_null()) return Bad(key, "is missing");
  if (!v->is_int()) return Bad(key, "must be an integer");
  return v->as_int();
}

StatusOr<int64_t> Config::IntOr(const char* key, int64_t dflt) const {
  return Has(key) ? Int(key) : StatusOr<int64_t>(dflt);
}

StatusOr<double> Config::DoubleOr(const char* key, double dflt) const {
  const Json* v = doc_.Find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_number()) return Bad(key, "must be a number");
  return v->as_double();
}

StatusOr<std::string> Config::StringOr(const char* key, const std::string& dflt) const {
  const Json* v = doc_.Find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_string()) return Bad(key, "must be a string");
  return v->as_string();
}

StatusOr<bool> Config::BoolOr(const char* key, bool dflt) const {
  const Json* v = doc_.Find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_bool()) return Bad(key, "must be true or false");
  return v->as_bool();
}

Status Config::Bad(const std::string& key, const std::string& what) const {
  return InvalidArgumentError(where_ + ": \"" + key + "\" " + what);
}

Status Config::Require(const char* key, double allowed, const std::string& why) const {
  const Json* v = doc_.Find(key);
  if (!v || v->is_null()) return OkStatus();
  const double got = v->is_bool() ? (v->as_bool() ? 1.0 : 0.0) : v->as_double();
  if (!v->is_bool() && !v->is_number()) return Bad(key, "must be a number");
  if (got == allowed) return OkStatus();
  return Bad(key, "is " + v->Dump() + ": " + why);
}

Status ReadShape(const Config& c, const char* ffn_key, ModelSpec* s) {
  DS_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  DS_ASSIGN_OR_RETURN(const int64_t width, c.Int("hidden_size"));
  DS_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  DS_ASSIGN_OR_RETURN(const int64_t vocab, c.Int("vocab_size"));
  DS_ASSIGN_OR_RETURN(const int64_t ffn, c.Int(ffn_key));
  DS_ASSIGN_OR_RETURN(const int64_t positions, c.IntOr("max_position_embeddings", 2048));
  if (heads <= 0) return c.Bad("num_attention_heads", "must be positive");
  s->n_layer = static_cast<int>(layers);
  s->n_embd = static_cast<int>(width);
  s->n_head = static_cast<int>(heads);
  s->vocab_size = static_cast<int>(vocab);
  s->ffn_hidden = static_cast<int>(ffn);
  s->max_seq_len = static_cast<int>(positions);
  return OkStatus();
}

Status ReadLayerTypes(const Config& c, bool every_other, ModelSpec* spec) {
  std::vector<int>& sliding = spec->arch.sliding_layers;
  sliding.clear();
  const Json* types = c.Find("layer_types");
  if (!types || types->is_null()) {
    for (int i = 0; every_other && i < spec->n_layer; i += 2) sliding.push_back(i);
    return OkStatus();
  }
  if (!types->is_array() || static_cast<int>(types->items().size()) != spec->n_layer)
    return c.Bad("layer_types",
                 "must list one type per layer (" + std::to_string(spec->n_layer) + ")");
  for (int i = 0; i < spec->n_layer; ++i) {
    const Json& t = types->items()[i];
    const std::string kind = t.is_string() ? t.as_string() : t.Dump();
    if (kind == "sliding_attention") {
      sliding.push_back(i);
    } else if (kind != "full_attention") {
      return c.Bad("layer_types", "has \"" + kind + "\" at layer " + std::to_string(i) +
                                      "; the runtime builds full_attention and sliding_attention");
    }
  }
  return OkStatus();
}

}  // namespace internal

const std::vector<std::string>& SupportedModelTypes() {
  static const std::vector<std::string> types = {"gpt2", "llama", "mistral", "qwen2", "qwen3",
                                                 "phi3", "gemma", "gemma2",  "opt",   "gpt_neox"};
  return types;
}

StatusOr<ModelSpec> SpecFromHfConfig(const std::string& json, const std::string& where) {
  auto doc = ParseJson(json);
  if (!doc.ok()) return doc.status().WithPrefix(where);
  if (!doc->is_object()) return InvalidArgumentError(where + ": not a JSON object");
  const internal::Config c(*doc, where);
  DS_ASSIGN_OR_RETURN(const std::string type, c.StringOr("model_type", ""));
  StatusOr<ModelSpec> spec = InvalidArgumentError("");
  if (type == "gpt2") {
    spec = internal::Gpt2Spec(c);
  } else if (type == "opt") {
    spec = internal::OptSpec(c);
  } else if (type == "gpt_neox") {
    spec = internal::GptNeoxSpec(c);
  } else if (IsLlamaLike(type)) {
    spec = internal::LlamaLikeSpec(c, type);
  } else {
    std::string known;
    for (const std::string& t : SupportedModelTypes()) known += (known.empty() ? "" : ", ") + t;
    return c.Bad("model_type", "is \"" + type + "\"; ds-runtime reads " + known);
  }
  if (!spec.ok()) return spec.status();
  Status valid = CheckModelSpec(*spec);
  if (!valid.ok()) return valid.WithPrefix(where);
  return spec;
}

StatusOr<ModelSpec> LoadHfSpec(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open (a Hugging Face model folder has one)");
  std::stringstream text;
  text << in.rdbuf();
  return SpecFromHfConfig(text.str(), path);
}

}  // namespace ds::hf
