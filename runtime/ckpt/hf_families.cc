// The GPT-2 and Llama name tables. Our names and layouts are listed in README.md; every
// Linear weight is [out, in]. HF GPT-2 uses Conv1D ([in, out], transposed here).
#include <cstring>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_internal.h"
#include "runtime/ckpt/tensor_ops.h"

namespace ds::ckpt::internal {
namespace {

using Out = std::vector<OwnedNamedTensor>;

Shape C(const Dims& d) { return {d.C}; }
Shape VxC(const Dims& d) { return {d.V, d.C}; }
Shape CxC(const Dims& d) { return {d.C, d.C}; }
Shape FxC(const Dims& d) { return {d.F, d.C}; }
Shape CxF(const Dims& d) { return {d.C, d.F}; }

// ---- GPT-2 -------------------------------------------------------------------------------

const Rule kGpt2Embeddings[] = {
    {"wte.weight", "wte", false, VxC},
    {"wpe.weight", "wpe", false,
     [](const Dims& d) -> Shape {
       return {d.T, d.C};
     }},
};

const Rule kGpt2Block[] = {
    {"ln_1.weight", "ln_1.weight", false, C},
    {"ln_1.bias", "ln_1.bias", false, C},
    {"attn.c_attn.weight", "attn.qkv.weight", true,
     [](const Dims& d) -> Shape {
       return {3 * d.C, d.C};
     }},
    {"attn.c_attn.bias", "attn.qkv.bias", false, [](const Dims& d) -> Shape { return {3 * d.C}; }},
    {"attn.c_proj.weight", "attn.proj.weight", true, CxC},
    {"attn.c_proj.bias", "attn.proj.bias", false, C},
    {"ln_2.weight", "ln_2.weight", false, C},
    {"ln_2.bias", "ln_2.bias", false, C},
    {"mlp.c_fc.weight", "mlp.fc.weight", true, FxC},
    {"mlp.c_fc.bias", "mlp.fc.bias", false, [](const Dims& d) -> Shape { return {d.F}; }},
    {"mlp.c_proj.weight", "mlp.proj.weight", true, CxF},
    {"mlp.c_proj.bias", "mlp.proj.bias", false, C},
};

const Rule kGpt2Final[] = {
    {"ln_f.weight", "ln_f.weight", false, C},
    {"ln_f.bias", "ln_f.bias", false, C},
};

bool SameValues(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  if (a.dtype() == b.dtype()) return std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  StatusOr<OwnedTensor> fa = CopyTensorAs(a, DType::kF32), fb = CopyTensorAs(b, DType::kF32);
  return fa.ok() && fb.ok() && std::memcmp(fa->f32(), fb->f32(), a.numel() * 4) == 0;
}

// Converts every rule of `rules` for one block (or the embeddings / final norm).
template <size_t N>
Status ApplyAll(const Rule (&rules)[N], Direction dir, const std::string& hf_prefix,
                const std::string& ours_prefix, const Dims& d, TensorSource& src, Out* out) {
  for (const Rule& r : rules)
    DS_RETURN_IF_ERROR(ApplyRule(r, dir, hf_prefix, ours_prefix, d, src, out));
  return OkStatus();
}

std::string Layer(const char* prefix, int i) { return prefix + std::to_string(i) + "."; }

}  // namespace

StatusOr<Out> Gpt2HfToOurs(TensorSource& src) {
  Dims d;
  DS_ASSIGN_OR_RETURN(Tensor wte, src.Peek("wte.weight"));
  DS_ASSIGN_OR_RETURN(Tensor wpe, src.Peek("wpe.weight"));
  d.V = Dim(wte, 0), d.C = Dim(wte, 1), d.T = Dim(wpe, 0);
  const int layers = src.CountLayers("h.");
  if (layers > 0) {
    DS_ASSIGN_OR_RETURN(Tensor fc, src.Peek("h.0.mlp.c_fc.weight"));
    d.F = Dim(fc, 1);  // Conv1D: [C, F]
  }
  Out out;
  DS_RETURN_IF_ERROR(ApplyAll(kGpt2Embeddings, Direction::kImport, "", "", d, src, &out));
  for (int i = 0; i < layers; ++i) {
    const std::string p = Layer("h.", i);
    src.Ignore(p + "attn.bias");  // causal-mask buffers, not parameters
    src.Ignore(p + "attn.masked_bias");
    DS_RETURN_IF_ERROR(ApplyAll(kGpt2Block, Direction::kImport, p, p, d, src, &out));
  }
  DS_RETURN_IF_ERROR(ApplyAll(kGpt2Final, Direction::kImport, "", "", d, src, &out));
  if (src.Has("lm_head.weight")) {
    DS_ASSIGN_OR_RETURN(Tensor head, src.Take("lm_head.weight", {d.V, d.C}));
    if (!SameValues(head, wte)) {
      return InvalidArgumentError(src.label() +
                                  ": tensor lm_head.weight differs from wte; gpt2 ties them");
    }
  }
  DS_RETURN_IF_ERROR(src.Finish());
  return out;
}

StatusOr<Out> Gpt2OursToHf(TensorSource& src) {
  Dims d;
  DS_ASSIGN_OR_RETURN(Tensor wte, src.Peek("wte"));
  DS_ASSIGN_OR_RETURN(Tensor wpe, src.Peek("wpe"));
  d.V = Dim(wte, 0), d.C = Dim(wte, 1), d.T = Dim(wpe, 0);
  const int layers = src.CountLayers("h.");
  if (layers > 0) {
    DS_ASSIGN_OR_RETURN(Tensor fc, src.Peek("h.0.mlp.fc.weight"));
    d.F = Dim(fc, 0);
  }
  Out out;
  const std::string root = "transformer.";
  DS_RETURN_IF_ERROR(ApplyAll(kGpt2Embeddings, Direction::kExport, root, "", d, src, &out));
  for (int i = 0; i < layers; ++i) {
    const std::string p = Layer("h.", i);
    DS_RETURN_IF_ERROR(ApplyAll(kGpt2Block, Direction::kExport, root + p, p, d, src, &out));
  }
  DS_RETURN_IF_ERROR(ApplyAll(kGpt2Final, Direction::kExport, root, "", d, src, &out));
  DS_RETURN_IF_ERROR(src.Finish());
  return out;  // No lm_head.weight: transformers ties it to wte.
}

// ---- Llama -------------------------------------------------------------------------------

namespace {

const Rule kLlamaEmbed = {"model.embed_tokens.weight", "embed_tokens", false, VxC};
const Rule kLlamaNorm = {"model.norm.weight", "norm.weight", false, C};
const Rule kLlamaHead = {"lm_head.weight", "lm_head.weight", false, VxC};

const Rule kLlamaBlock[] = {
    {"input_layernorm.weight", "input_layernorm.weight", false, C},
    {"self_attn.o_proj.weight", "attn.o_proj.weight", false,
     [](const Dims& d) -> Shape {
       return {d.C, d.Q};
     }},
    {"post_attention_layernorm.weight", "post_attention_layernorm.weight", false, C},
};

// A dense layer's MLP (a Mixtral layer has block_sparse_moe instead: hf_mixtral.cc).
const Rule kLlamaMlp[] = {
    {"mlp.gate_proj.weight", "mlp.gate_proj.weight", false, FxC},
    {"mlp.up_proj.weight", "mlp.up_proj.weight", false, FxC},
    {"mlp.down_proj.weight", "mlp.down_proj.weight", false, CxF},
};

const char* const kQkvParts[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                 "self_attn.v_proj.weight"};

// Q and K rows from --n_head / --n_kv_head where given (D = C / H); otherwise keeps the
// values inferred from shapes. The shape checks then catch any disagreement.
Status ApplyHeads(const HfOptions& o, const std::string& label, Dims* d) {
  if (o.n_head < 0 || o.n_kv_head < 0) return InvalidArgumentError("negative head count");
  if (o.n_head == 0) {
    if (o.n_kv_head > 0) return InvalidArgumentError("n_kv_head needs n_head");
    return OkStatus();
  }
  if (d->C % o.n_head != 0) {
    return InvalidArgumentError(label + ": width " + std::to_string(d->C) +
                                " is not a multiple of n_head " + std::to_string(o.n_head));
  }
  const int64_t head_dim = d->C / o.n_head;
  d->Q = o.n_head * head_dim;
  if (o.n_kv_head > 0) d->K = o.n_kv_head * head_dim;
  return OkStatus();
}

}  // namespace

StatusOr<Out> LlamaHfToOurs(TensorSource& src, const HfOptions& o) {
  Dims d;
  DS_ASSIGN_OR_RETURN(Tensor embed, src.Peek(kLlamaEmbed.hf));
  d.V = Dim(embed, 0), d.C = Dim(embed, 1);
  const int layers = src.CountLayers("model.layers.");
  if (layers > 0) {
    DS_ASSIGN_OR_RETURN(Tensor q, src.Peek("model.layers.0.self_attn.q_proj.weight"));
    DS_ASSIGN_OR_RETURN(Tensor k, src.Peek("model.layers.0.self_attn.k_proj.weight"));
    d.Q = Dim(q, 0), d.K = Dim(k, 0);
    d.F = MoeWidth(src, "model.layers.0.", false);
    if (!IsMoeLayer(src, "model.layers.0.")) {
      DS_ASSIGN_OR_RETURN(Tensor gate, src.Peek("model.layers.0.mlp.gate_proj.weight"));
      d.F = Dim(gate, 0);
    }
  }
  DS_RETURN_IF_ERROR(ApplyHeads(o, src.label(), &d));
  Out out;
  DS_RETURN_IF_ERROR(ApplyRule(kLlamaEmbed, Direction::kImport, "", "", d, src, &out));
  for (int i = 0; i < layers; ++i) {
    const std::string hp = Layer("model.layers.", i), op = Layer("layers.", i);
    src.Ignore(hp + "self_attn.rotary_emb.inv_freq");  // a buffer in older exports
    const int64_t rows[] = {d.Q, d.K, d.K};
    std::vector<Tensor> parts;
    for (int j = 0; j < 3; ++j) {
      DS_ASSIGN_OR_RETURN(Tensor t, src.Take(hp + kQkvParts[j], {rows[j], d.C}));
      parts.push_back(t);
    }
    StatusOr<OwnedTensor> qkv = ConcatRows(parts);
    if (!qkv.ok()) return qkv.status().WithPrefix(src.label() + ": " + hp + "self_attn");
    DS_RETURN_IF_ERROR(Emit(op + "attn.qkv.weight", qkv->view(), false, src.dtype(), &out));
    DS_RETURN_IF_ERROR(ApplyAll(kLlamaBlock, Direction::kImport, hp, op, d, src, &out));
    if (IsMoeLayer(src, hp))
      DS_RETURN_IF_ERROR(MixtralFromHf(src, hp, op, d, &out));
    else
      DS_RETURN_IF_ERROR(ApplyAll(kLlamaMlp, Direction::kImport, hp, op, d, src, &out));
  }
  DS_RETURN_IF_ERROR(ApplyRule(kLlamaNorm, Direction::kImport, "", "", d, src, &out));
  if (o.tied) {
    src.Ignore(kLlamaHead.hf);  // the model reads embed_tokens, as transformers' tied one does
  } else if (src.Has(kLlamaHead.hf)) {
    DS_RETURN_IF_ERROR(ApplyRule(kLlamaHead, Direction::kImport, "", "", d, src, &out));
  } else {
    DS_LOG_INFO("ckpt", "{}: no lm_head.weight (tied embeddings); copying embed_tokens",
                src.label());
    DS_RETURN_IF_ERROR(Emit(kLlamaHead.ours, embed, false, src.dtype(), &out));
  }
  DS_RETURN_IF_ERROR(src.Finish());
  return out;
}

StatusOr<Out> LlamaOursToHf(TensorSource& src, const HfOptions& o) {
  Dims d;
  DS_ASSIGN_OR_RETURN(Tensor embed, src.Peek(kLlamaEmbed.ours));
  d.V = Dim(embed, 0), d.C = Dim(embed, 1);
  const int layers = src.CountLayers("layers.");
  if (layers > 0) {
    DS_ASSIGN_OR_RETURN(Tensor o_proj, src.Peek("layers.0.attn.o_proj.weight"));
    DS_ASSIGN_OR_RETURN(Tensor qkv, src.Peek("layers.0.attn.qkv.weight"));
    d.Q = Dim(o_proj, 1), d.K = (Dim(qkv, 0) - d.Q) / 2;
    d.F = MoeWidth(src, "layers.0.", true);
    if (!IsMoeLayer(src, "layers.0.")) {
      DS_ASSIGN_OR_RETURN(Tensor gate, src.Peek("layers.0.mlp.gate_proj.weight"));
      d.F = Dim(gate, 0);
    }
  }
  DS_RETURN_IF_ERROR(ApplyHeads(o, src.label(), &d));
  Out out;
  DS_RETURN_IF_ERROR(ApplyRule(kLlamaEmbed, Direction::kExport, "", "", d, src, &out));
  for (int i = 0; i < layers; ++i) {
    const std::string hp = Layer("model.layers.", i), op = Layer("layers.", i);
    DS_ASSIGN_OR_RETURN(Tensor qkv, src.Take(op + "attn.qkv.weight", {d.Q + 2 * d.K, d.C}));
    const int64_t bounds[] = {0, d.Q, d.Q + d.K, d.Q + 2 * d.K};
    for (int j = 0; j < 3; ++j) {
      DS_ASSIGN_OR_RETURN(OwnedTensor part, SliceRows(qkv, bounds[j], bounds[j + 1]));
      DS_RETURN_IF_ERROR(Emit(hp + kQkvParts[j], part.view(), false, src.dtype(), &out));
    }
    DS_RETURN_IF_ERROR(ApplyAll(kLlamaBlock, Direction::kExport, hp, op, d, src, &out));
    if (IsMoeLayer(src, op))
      DS_RETURN_IF_ERROR(MixtralToHf(src, hp, op, d, &out));
    else
      DS_RETURN_IF_ERROR(ApplyAll(kLlamaMlp, Direction::kExport, hp, op, d, src, &out));
  }
  DS_RETURN_IF_ERROR(ApplyRule(kLlamaNorm, Direction::kExport, "", "", d, src, &out));
  // A model with tied embeddings has no head of its own: transformers' save_pretrained leaves
  // lm_head.weight out too (tie_word_embeddings in config.json ties it again on load).
  if (src.Has(kLlamaHead.ours))
    DS_RETURN_IF_ERROR(ApplyRule(kLlamaHead, Direction::kExport, "", "", d, src, &out));
  DS_RETURN_IF_ERROR(src.Finish());
  return out;
}

}  // namespace ds::ckpt::internal
