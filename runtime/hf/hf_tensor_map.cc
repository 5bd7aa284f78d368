#include "runtime/hf/hf_tensor_map.h"

#include <algorithm>
#include <functional>
#include <map>

#include "runtime/base/status_macros.h"
#include "runtime/graph/lora.h"

namespace ds::hf {
namespace {

using Kind = HfSource::Kind;

HfSource Copy(const std::string& name) { return {Kind::kCopy, {name}}; }
HfSource Transposed(const std::string& name) { return {Kind::kTranspose, {name}}; }

// "layers.<i>.<rest>" -> i and rest; false for other names.
bool SplitLayer(const std::string& ours, const char* prefix, int* layer, std::string* rest) {
  const std::string p = prefix;
  if (ours.rfind(p, 0) != 0) return false;
  const size_t dot = ours.find('.', p.size());
  if (dot == std::string::npos || dot == p.size()) return false;
  *layer = std::stoi(ours.substr(p.size(), dot - p.size()));
  *rest = ours.substr(dot + 1);
  return true;
}

// q, k and v of attention prefix `at` ("model.layers.3.self_attn."), concatenated by rows;
// `what` is "weight" or "bias"; q has q_rows of the `total`, k and v half the rest each.
HfSource QkvOf(const std::string& at, const std::string& what, int64_t q_rows, int64_t total) {
  HfSource s{Kind::kConcatRows,
             {at + "q_proj." + what, at + "k_proj." + what, at + "v_proj." + what}};
  s.rows = {q_rows, (total - q_rows) / 2, (total - q_rows) / 2};
  return s;
}

using Rule = std::function<StatusOr<HfSource>(const std::string& ours, const Shape& shape)>;

Rule LlamaRule(const ModelSpec& s) {
  const bool phi3 = s.family == "phi3";
  const int64_t q_rows = s.n_head * (s.arch.head_dim > 0 ? s.arch.head_dim : s.n_embd / s.n_head);
  return [phi3, q_rows](const std::string& ours, const Shape& shape) -> StatusOr<HfSource> {
    if (ours == "embed_tokens") return Copy("model.embed_tokens.weight");
    if (ours == "norm.weight") return Copy("model.norm.weight");
    if (ours == "lm_head.weight") return Copy("lm_head.weight");
    int i = 0;
    std::string rest;
    if (!SplitLayer(ours, "layers.", &i, &rest)) return InvalidArgumentError("");
    const std::string hp = "model.layers." + std::to_string(i) + ".";
    if (rest == "attn.qkv.weight" || rest == "attn.qkv.bias") {
      const std::string what = rest.substr(rest.rfind('.') + 1);
      if (phi3) return Copy(hp + "self_attn.qkv_proj." + what);
      return QkvOf(hp + "self_attn.", what, q_rows, shape[0]);
    }
    if (phi3 && (rest == "mlp.gate_proj.weight" || rest == "mlp.up_proj.weight")) {
      const int64_t f = shape[0];
      const bool up = rest == "mlp.up_proj.weight";
      return HfSource{
          Kind::kRowSlice, {hp + "mlp.gate_up_proj.weight"}, up ? f : 0, up ? 2 * f : f};
    }
    if (rest.rfind("attn.", 0) == 0) return Copy(hp + "self_attn." + rest.substr(5));
    if (rest.rfind("block_sparse_moe.", 0) == 0) return InvalidArgumentError("");
    return Copy(hp + rest);
  };
}

Rule Gpt2Rule() {
  return [](const std::string& ours, const Shape&) -> StatusOr<HfSource> {
    const std::string root = "transformer.";
    if (ours == "wte" || ours == "wpe") return Copy(root + ours + ".weight");
    if (ours == "lm_head.weight") return Copy("lm_head.weight");  // tie_word_embeddings false
    if (ours.rfind("ln_f.", 0) == 0) return Copy(root + ours);
    int i = 0;
    std::string rest;
    if (!SplitLayer(ours, "h.", &i, &rest)) return InvalidArgumentError("");
    const std::string hp = root + "h." + std::to_string(i) + ".";
    if (rest == "attn.qkv.weight") return Transposed(hp + "attn.c_attn.weight");
    if (rest == "attn.qkv.bias") return Copy(hp + "attn.c_attn.bias");
    if (rest == "attn.proj.weight") return Transposed(hp + "attn.c_proj.weight");
    if (rest == "attn.proj.bias") return Copy(hp + "attn.c_proj.bias");
    if (rest == "mlp.fc.weight") return Transposed(hp + "mlp.c_fc.weight");
    if (rest == "mlp.fc.bias") return Copy(hp + "mlp.c_fc.bias");
    if (rest == "mlp.proj.weight") return Transposed(hp + "mlp.c_proj.weight");
    if (rest == "mlp.proj.bias") return Copy(hp + "mlp.c_proj.bias");
    if (rest.rfind("ln_", 0) == 0) return Copy(hp + rest);
    return InvalidArgumentError("");
  };
}

Rule OptRule() {
  return [](const std::string& ours, const Shape& shape) -> StatusOr<HfSource> {
    const std::string root = "model.decoder.";
    if (ours == "embed_tokens" || ours == "embed_positions") return Copy(root + ours + ".weight");
    if (ours == "lm_head.weight") return Copy("lm_head.weight");
    if (ours.rfind("project_", 0) == 0 || ours.rfind("final_layer_norm.", 0) == 0)
      return Copy(root + ours);
    int i = 0;
    std::string rest;
    if (!SplitLayer(ours, "layers.", &i, &rest)) return InvalidArgumentError("");
    const std::string hp = root + "layers." + std::to_string(i) + ".";
    if (rest == "self_attn.qkv.weight" || rest == "self_attn.qkv.bias")
      return QkvOf(hp + "self_attn.", rest.substr(rest.rfind('.') + 1), shape[0] / 3, shape[0]);
    return Copy(hp + rest);
  };
}

Rule NeoxRule(const ModelSpec& s) {
  const int64_t heads = s.n_head;
  return [heads](const std::string& ours, const Shape&) -> StatusOr<HfSource> {
    const std::string root = "gpt_neox.";
    if (ours == "embed_in") return Copy(root + "embed_in.weight");
    if (ours == "lm_head.weight") return Copy("embed_out.weight");
    if (ours.rfind("final_layer_norm.", 0) == 0) return Copy(root + ours);
    int i = 0;
    std::string rest;
    if (!SplitLayer(ours, "layers.", &i, &rest)) return InvalidArgumentError("");
    const std::string hp = root + "layers." + std::to_string(i) + ".";
    if (rest == "attn.qkv.weight" || rest == "attn.qkv.bias")
      return HfSource{Kind::kHeadInterleaved,
                      {hp + "attention.query_key_value." + rest.substr(rest.rfind('.') + 1)},
                      0,
                      0,
                      heads};
    if (rest.rfind("attn.dense.", 0) == 0) return Copy(hp + "attention." + rest.substr(5));
    return Copy(hp + rest);
  };
}

// Buffers and tied heads the files of `spec`'s family may hold.
void AddIgnored(const ModelSpec& s, HfTensorMap* map) {
  auto each_layer = [&](const std::string& prefix, const std::vector<std::string>& names) {
    for (int i = 0; i < s.n_layer; ++i)
      for (const std::string& n : names)
        map->ignored.push_back(prefix + std::to_string(i) + "." + n);
  };
  const bool tied = s.family == "gpt2" ? s.tie_embeddings != 0 : s.tie_embeddings == 1;
  if (tied) map->ignored.push_back(s.family == "gpt_neox" ? "embed_out.weight" : "lm_head.weight");
  if (s.family == "gpt2") {
    each_layer("transformer.h.", {"attn.bias", "attn.masked_bias"});
    map->optional_prefixes = {"transformer."};
  } else if (s.family == "gpt_neox") {
    each_layer("gpt_neox.layers.",
               {"attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"});
  } else if (s.family == "opt") {
    map->optional_prefixes = {"model."};
  } else {
    each_layer("model.layers.", {"self_attn.rotary_emb.inv_freq"});
  }
}

}  // namespace

StatusOr<HfTensorMap> MapHfTensors(const ModelSpec& spec, const Graph& graph) {
  if (spec.moe.num_experts > 0)
    return InvalidArgumentError(
        "Hugging Face names: mixture-of-experts models map through "
        "ds-ckpt import's Mixtral names, not a family map");
  Rule rule;
  if (spec.family == "gpt2") {
    rule = Gpt2Rule();
  } else if (spec.family == "opt") {
    rule = OptRule();
  } else if (spec.family == "gpt_neox") {
    rule = NeoxRule(spec);
  } else if (IsLlamaLike(spec.family)) {
    rule = LlamaRule(spec);
  } else {
    return InvalidArgumentError("Hugging Face names: no map for family \"" + spec.family + "\"");
  }
  HfTensorMap map;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const TensorInfo& info = graph.tensors[t];
    // Every weight, trained or frozen; LoRA's adapters are no checkpoint tensor.
    if ((info.role != TensorRole::kParam && info.role != TensorRole::kFrozen) ||
        IsLoraParam(info.name))
      continue;
    HfParam p;
    p.ours = info.name;
    for (const Dim& d : info.shape) p.shape.push_back(d.size);
    if (p.ours == "v_head.weight") {  // the reward / critic head (model_builder.h)
      p.source.kind = Kind::kInitialized;
      map.params.push_back(std::move(p));
      continue;
    }
    StatusOr<HfSource> source = rule(p.ours, p.shape);
    if (!source.ok())
      return InvalidArgumentError("Hugging Face names: no " + spec.family + " tensor for \"" +
                                  p.ours + "\"");
    p.source = std::move(source).value();
    map.params.push_back(std::move(p));
  }
  AddIgnored(spec, &map);
  return map;
}

namespace {

// Adds parameter `param`'s rows [begin, end) to output `name` of file shape `shape`.
void AddPiece(std::map<std::string, HfOutput>* out, const std::string& name, const Shape& shape,
              int param, int64_t begin, int64_t end) {
  HfOutput& o = (*out)[name];
  o.name = name;
  if (o.shape.empty()) o.shape = shape;
  o.pieces.push_back({param, begin, end});
}

Shape WithRows(Shape s, int64_t rows) {
  s[0] = rows;
  return s;
}

}  // namespace

StatusOr<std::vector<HfOutput>> HfOutputs(const HfTensorMap& map) {
  std::map<std::string, HfOutput> out;
  for (size_t i = 0; i < map.params.size(); ++i) {
    const HfParam& p = map.params[i];
    const HfSource& s = p.source;
    const int param = static_cast<int>(i);
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    switch (s.kind) {
      case Kind::kInitialized:
        AddPiece(&out, p.ours, p.shape, param, 0, rows);
        break;
      case Kind::kConcatRows: {
        int64_t at = 0;
        for (size_t k = 0; k < s.names.size(); ++k) {
          AddPiece(&out, s.names[k], WithRows(p.shape, s.rows[k]), param, at, at + s.rows[k]);
          at += s.rows[k];
        }
        break;
      }
      case Kind::kRowSlice: {  // a fused tensor: its parts in row order
        HfOutput& o = out[s.names[0]];
        AddPiece(&out, s.names[0], p.shape, param, 0, rows);
        std::sort(o.pieces.begin(), o.pieces.end(),
                  [&](const HfOutput::Piece& a, const HfOutput::Piece& b) {
                    return map.params[a.param].source.begin < map.params[b.param].source.begin;
                  });
        int64_t total = 0;
        for (const HfOutput::Piece& piece : o.pieces) total += piece.end - piece.begin;
        o.shape = WithRows(p.shape, total);
        break;
      }
      default: {  // one parameter, as it is or transposed / interleaved back
        const Shape shape = s.kind == Kind::kTranspose ? Shape{p.shape[1], p.shape[0]} : p.shape;
        AddPiece(&out, s.names[0], shape, param, 0, rows);
        out[s.names[0]].kind = s.kind;
        out[s.names[0]].heads = s.heads;
      }
    }
  }
  std::vector<HfOutput> list;
  for (auto& [name, o] : out) list.push_back(std::move(o));
  return list;
}

}  // namespace ds::hf
