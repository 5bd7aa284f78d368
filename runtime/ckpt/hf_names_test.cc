#include "runtime/ckpt/hf_names.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/test_util.h"

namespace ds::ckpt {
namespace {

using testing::RandomTensor;
using testing::SameBytes;

// Random weights under our names, owning their storage.
struct Model {
  std::vector<OwnedTensor> owned;
  std::vector<NamedTensor> tensors;
  void Add(const std::string& name, Shape shape, DType dtype = DType::kF32) {
    owned.push_back(RandomTensor(std::move(shape), dtype, static_cast<uint32_t>(owned.size() + 1)));
    tensors.push_back({name, owned.back().view()});
  }
};

constexpr int64_t kV = 11, kT = 6, kC = 8, kLayers = 2;

Model Gpt2(DType dtype = DType::kF32) {
  Model m;
  m.Add("wte", {kV, kC}, dtype);
  m.Add("wpe", {kT, kC}, dtype);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    m.Add(p + "ln_1.weight", {kC}, dtype);
    m.Add(p + "ln_1.bias", {kC}, dtype);
    m.Add(p + "attn.qkv.weight", {3 * kC, kC}, dtype);
    m.Add(p + "attn.qkv.bias", {3 * kC}, dtype);
    m.Add(p + "attn.proj.weight", {kC, kC}, dtype);
    m.Add(p + "attn.proj.bias", {kC}, dtype);
    m.Add(p + "ln_2.weight", {kC}, dtype);
    m.Add(p + "ln_2.bias", {kC}, dtype);
    m.Add(p + "mlp.fc.weight", {4 * kC, kC}, dtype);
    m.Add(p + "mlp.fc.bias", {4 * kC}, dtype);
    m.Add(p + "mlp.proj.weight", {kC, 4 * kC}, dtype);
    m.Add(p + "mlp.proj.bias", {kC}, dtype);
  }
  m.Add("ln_f.weight", {kC}, dtype);
  m.Add("ln_f.bias", {kC}, dtype);
  return m;
}

// C = 16, H = 4, Hkv = 2, D = 4: qkv rows (4 + 2 * 2) * 4 = 32; F = 24.
constexpr int64_t kLC = 16, kQ = 16, kK = 8, kF = 24;

// experts > 0: Mixtral-style, layer 0 with `experts` top-2 SwiGLU experts, layer 1 dense.
Model Llama(int64_t experts = 0) {
  Model m;
  m.Add("embed_tokens", {kV, kLC});
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    m.Add(p + "input_layernorm.weight", {kLC});
    m.Add(p + "attn.qkv.weight", {kQ + 2 * kK, kLC});
    m.Add(p + "attn.o_proj.weight", {kLC, kQ});
    m.Add(p + "post_attention_layernorm.weight", {kLC});
    if (experts > 0 && i == 0) {
      m.Add(p + "block_sparse_moe.gate.weight", {experts, kLC});
      m.Add(p + "block_sparse_moe.experts.w1.weight", {experts, kF, kLC});
      m.Add(p + "block_sparse_moe.experts.w3.weight", {experts, kF, kLC});
      m.Add(p + "block_sparse_moe.experts.w2.weight", {experts, kLC, kF});
      continue;
    }
    m.Add(p + "mlp.gate_proj.weight", {kF, kLC});
    m.Add(p + "mlp.up_proj.weight", {kF, kLC});
    m.Add(p + "mlp.down_proj.weight", {kLC, kF});
  }
  m.Add("norm.weight", {kLC});
  m.Add("lm_head.weight", {kV, kLC});
  return m;
}

std::vector<NamedTensor> Views(const std::vector<OwnedNamedTensor>& t) {
  std::vector<NamedTensor> v;
  for (const auto& x : t) v.push_back({x.name, x.tensor.view()});
  return v;
}

std::map<std::string, Tensor> ByName(const std::vector<NamedTensor>& t) {
  std::map<std::string, Tensor> m;
  for (const auto& x : t) m[x.name] = x.tensor;
  return m;
}

void CheckSameSet(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  auto ma = ByName(a), mb = ByName(b);
  REQUIRE(ma.size() == mb.size());
  for (const auto& [name, t] : ma) {
    INFO(name);
    REQUIRE(mb.count(name));
    CHECK(SameBytes(t, mb.at(name)));
  }
}

std::vector<NamedTensor> Without(std::vector<NamedTensor> t, const std::string& name) {
  t.erase(std::remove_if(t.begin(), t.end(), [&](const NamedTensor& x) { return x.name == name; }),
          t.end());
  return t;
}

std::string Error(const StatusOr<std::vector<OwnedNamedTensor>>& r) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("HF GPT-2: export then import is bitwise identity", "[ckpt][hf]") {
  Model m = Gpt2();
  auto hf = OursToHf(ModelFamily::kGpt2, m.tensors, "ours");
  REQUIRE(hf.ok());
  auto hf_map = ByName(Views(*hf));
  CHECK(hf_map.size() == m.tensors.size());  // no lm_head: tied
  CHECK(hf_map.count("transformer.wte.weight"));
  CHECK(hf_map.at("transformer.h.1.attn.c_attn.weight").shape() == Shape{kC, 3 * kC});
  CHECK(hf_map.at("transformer.h.0.mlp.c_proj.weight").shape() == Shape{4 * kC, kC});
  auto back = HfToOurs(ModelFamily::kGpt2, Views(*hf), "hf");
  REQUIRE(back.ok());
  CheckSameSet(Views(*back), m.tensors);
}

TEST_CASE("HF GPT-2: Conv1D weights are transposed element-wise", "[ckpt][hf]") {
  Model m = Gpt2();
  auto ours = ByName(m.tensors);
  auto hf = OursToHf(ModelFamily::kGpt2, m.tensors, "ours");
  REQUIRE(hf.ok());
  auto hf_map = ByName(Views(*hf));
  for (const char* pair :
       {"attn.qkv.weight=attn.c_attn.weight", "mlp.fc.weight=mlp.c_fc.weight",
        "mlp.proj.weight=mlp.c_proj.weight", "attn.proj.weight=attn.c_proj.weight"}) {
    std::string s = pair;
    Tensor a = ours.at("h.1." + s.substr(0, s.find('=')));
    Tensor b = hf_map.at("transformer.h.1." + s.substr(s.find('=') + 1));
    INFO(pair);
    REQUIRE(b.shape() == Shape{a.dim(1), a.dim(0)});
    int mismatches = 0;
    for (int64_t r = 0; r < a.dim(0); ++r) {
      for (int64_t c = 0; c < a.dim(1); ++c) {
        mismatches += a.f32()[r * a.dim(1) + c] != b.f32()[c * a.dim(0) + r];
      }
    }
    CHECK(mismatches == 0);
  }
  // Biases and norms are copied as is.
  CHECK(SameBytes(ours.at("h.0.attn.qkv.bias"), hf_map.at("transformer.h.0.attn.c_attn.bias")));
}

TEST_CASE("HF GPT-2: import accepts HF variants", "[ckpt][hf]") {
  Model m = Gpt2();
  auto hf = OursToHf(ModelFamily::kGpt2, m.tensors, "ours");
  REQUIRE(hf.ok());
  std::vector<NamedTensor> variant;
  for (const NamedTensor& t : Views(*hf)) variant.push_back({t.name.substr(12), t.tensor});
  OwnedTensor mask({1, 1, kT, kT});
  variant.push_back({"h.0.attn.bias", mask.view()});
  variant.push_back({"h.1.attn.masked_bias", mask.view()});
  variant.push_back({"lm_head.weight", ByName(m.tensors).at("wte")});  // tied copy
  auto back = HfToOurs(ModelFamily::kGpt2, variant, "hf");
  REQUIRE(back.ok());
  CheckSameSet(Views(*back), m.tensors);
}

TEST_CASE("HF GPT-2: name and shape errors name the tensor and file", "[ckpt][hf]") {
  Model m = Gpt2();
  auto hf = OursToHf(ModelFamily::kGpt2, m.tensors, "ours");
  REQUIRE(hf.ok());
  std::vector<NamedTensor> v = Views(*hf);
  OwnedTensor extra({kC});
  SECTION("unknown") {
    v.push_back({"transformer.h.0.attn.extra", extra.view()});
    CHECK(Error(HfToOurs(ModelFamily::kGpt2, v, "a.safetensors")) ==
          "a.safetensors: unknown tensor transformer.h.0.attn.extra");
  }
  SECTION("missing") {
    CHECK(Error(HfToOurs(ModelFamily::kGpt2, Without(v, "transformer.ln_f.bias"), "a.st")) ==
          "a.st: missing tensor ln_f.bias");
    CHECK(Error(OursToHf(ModelFamily::kGpt2, Without(m.tensors, "h.1.mlp.fc.bias"), "w.st")) ==
          "w.st: missing tensor h.1.mlp.fc.bias");
  }
  SECTION("shape mismatch") {
    v = Without(v, "transformer.h.1.ln_2.weight");
    v.push_back({"transformer.h.1.ln_2.weight", OwnedTensor({kC + 1}).view()});
    CHECK(Error(HfToOurs(ModelFamily::kGpt2, v, "a.st")) ==
          "a.st: tensor transformer.h.1.ln_2.weight has shape [9], expected [8]");
  }
  SECTION("untied head") {
    v.push_back({"lm_head.weight", extra.view().Reshaped({kC})});
    CHECK(Error(HfToOurs(ModelFamily::kGpt2, v, "a.st")).find("lm_head.weight") !=
          std::string::npos);
  }
  SECTION("prefixed and bare duplicates") {
    v.push_back({"ln_f.bias", extra.view()});
    CHECK(Error(HfToOurs(ModelFamily::kGpt2, v, "a.st")).find("appears twice") !=
          std::string::npos);
  }
}

TEST_CASE("HF Llama: q/k/v split and concat round trip bitwise", "[ckpt][hf]") {
  Model m = Llama();
  HfOptions o;
  SECTION("heads given") {
    o.n_head = 4;
    o.n_kv_head = 2;
  }
  SECTION("heads inferred") {}
  auto hf = OursToHf(ModelFamily::kLlama, m.tensors, "ours", o);
  REQUIRE(hf.ok());
  auto hf_map = ByName(Views(*hf));
  CHECK(hf_map.size() == m.tensors.size() + 2 * kLayers);
  Tensor qkv = ByName(m.tensors).at("layers.1.attn.qkv.weight");
  Tensor k = hf_map.at("model.layers.1.self_attn.k_proj.weight");
  REQUIRE(k.shape() == Shape{kK, kLC});
  CHECK(hf_map.at("model.layers.1.self_attn.q_proj.weight").shape() == Shape{kQ, kLC});
  CHECK(k.f32()[0] == qkv.f32()[kQ * kLC]);  // k starts after the q rows
  Tensor v = hf_map.at("model.layers.1.self_attn.v_proj.weight");
  CHECK(v.f32()[kK * kLC - 1] == qkv.f32()[qkv.numel() - 1]);
  auto back = HfToOurs(ModelFamily::kLlama, Views(*hf), "hf", o);
  REQUIRE(back.ok());
  CheckSameSet(Views(*back), m.tensors);
}

TEST_CASE("HF Mixtral: stacked experts become per-expert tensors and back, bitwise",
          "[ckpt][hf][moe]") {
  Model m = Llama(3);
  auto hf = OursToHf(ModelFamily::kLlama, m.tensors, "ours");
  REQUIRE(hf.ok());
  auto hf_map = ByName(Views(*hf));
  // 3 stacked expert tensors become 9; q/k/v add 2 per layer.
  CHECK(hf_map.size() == m.tensors.size() + 6 + 2 * kLayers);
  const std::string p = "model.layers.0.block_sparse_moe.";
  CHECK(hf_map.at(p + "gate.weight").shape() == Shape{3, kLC});
  Tensor w2 = hf_map.at(p + "experts.2.w2.weight");
  REQUIRE(w2.shape() == Shape{kLC, kF});
  Tensor ours = ByName(m.tensors).at("layers.0.block_sparse_moe.experts.w2.weight");
  CHECK(w2.f32()[0] == ours.f32()[2 * kLC * kF]);  // expert 2's first element
  CHECK(w2.f32()[kLC * kF - 1] == ours.f32()[ours.numel() - 1]);
  CHECK(hf_map.count("model.layers.1.mlp.gate_proj.weight") == 1);  // the dense layer
  auto back = HfToOurs(ModelFamily::kLlama, Views(*hf), "hf");
  REQUIRE(back.ok());
  CheckSameSet(Views(*back), m.tensors);
  CHECK(
      Error(HfToOurs(ModelFamily::kLlama, Without(Views(*hf), p + "experts.1.w3.weight"), "hf.st"))
          .find("experts.1.w3.weight") != std::string::npos);
}

TEST_CASE("HF Llama: tied head, head counts and errors", "[ckpt][hf]") {
  Model m = Llama();
  auto hf = OursToHf(ModelFamily::kLlama, m.tensors, "ours");
  REQUIRE(hf.ok());
  std::vector<NamedTensor> v = Views(*hf);
  SECTION("absent lm_head copies embed_tokens") {
    auto back = HfToOurs(ModelFamily::kLlama, Without(v, "lm_head.weight"), "hf");
    REQUIRE(back.ok());
    auto b = ByName(Views(*back));
    CHECK(SameBytes(b.at("lm_head.weight"), b.at("embed_tokens")));
  }
  SECTION("wrong head counts") {
    HfOptions o;
    o.n_head = 3;
    CHECK(Error(OursToHf(ModelFamily::kLlama, m.tensors, "w.st", o)).find("not a multiple") !=
          std::string::npos);
    o.n_head = 4;
    o.n_kv_head = 4;  // expects qkv rows 48
    CHECK(Error(OursToHf(ModelFamily::kLlama, m.tensors, "w.st", o)) ==
          "w.st: tensor layers.0.attn.qkv.weight has shape [32, 16], expected [48, 16]");
  }
  SECTION("missing and unknown") {
    CHECK(Error(HfToOurs(ModelFamily::kLlama, Without(v, "model.layers.1.self_attn.v_proj.weight"),
                         "hf.st")) ==
          "hf.st: missing tensor model.layers.1.self_attn.v_proj.weight");
    OwnedTensor bias({kLC});
    v.push_back({"model.layers.0.self_attn.q_proj.bias", bias.view()});
    CHECK(Error(HfToOurs(ModelFamily::kLlama, v, "hf.st")) ==
          "hf.st: unknown tensor model.layers.0.self_attn.q_proj.bias");
  }
  CHECK_FALSE(ParseModelFamily("mistral").ok());
}

TEST_CASE("HF files: export from a checkpoint, bf16, import back", "[ckpt][hf]") {
  std::string dir = testing::MakeTempDir("hf_files");
  Model m = Gpt2();
  CheckpointContents c;
  c.step = 3;
  c.model = m.tensors;
  REQUIRE(SaveCheckpoint(dir + "/ckpt", c).ok());
  REQUIRE(ExportHf("gpt2", dir + "/ckpt", dir + "/hf.safetensors").ok());
  REQUIRE(ImportHf("gpt2", dir + "/hf.safetensors", dir + "/ours.safetensors").ok());
  auto ours = SafetensorsFile::Open(dir + "/ours.safetensors");
  REQUIRE(ours.ok());
  std::vector<NamedTensor> got;
  for (const auto& e : ours->tensors()) got.push_back({e.name, e.view()});
  CheckSameSet(got, m.tensors);

  HfOptions bf16;
  bf16.dtype = DType::kBF16;
  REQUIRE(ExportHf("gpt2", dir + "/ours.safetensors", dir + "/hf16.safetensors", bf16).ok());
  auto hf16 = SafetensorsFile::Open(dir + "/hf16.safetensors");
  REQUIRE(hf16.ok());
  CHECK(hf16->metadata().at("format") == "pt");
  auto wte = hf16->Get("transformer.wte.weight");
  REQUIRE(wte.ok());
  CHECK(wte->dtype() == DType::kBF16);
  CHECK(wte->u16()[5] == FloatToBf16(ByName(m.tensors).at("wte").f32()[5]));
  // bf16 -> f32 import is exact, so a second bf16 export reproduces the file.
  REQUIRE(ImportHf("gpt2", dir + "/hf16.safetensors", dir + "/ours16.safetensors").ok());
  REQUIRE(ExportHf("gpt2", dir + "/ours16.safetensors", dir + "/hf16b.safetensors", bf16).ok());
  CHECK(testing::ReadRawFile(dir + "/hf16.safetensors") ==
        testing::ReadRawFile(dir + "/hf16b.safetensors"));

  Status bad = ImportHf("gpt2", dir + "/ours.safetensors", dir + "/x.safetensors");
  CHECK(bad.message() == dir + "/ours.safetensors: missing tensor wte.weight");
}

}  // namespace
}  // namespace ds::ckpt
