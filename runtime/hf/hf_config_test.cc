// Every family's config.json (runtime/generate/testdata/families, saved by transformers through
// tools/hf_family_golden.py) becomes the ModelSpec its architecture needs, builds a graph, and
// maps onto exactly the tensors the saved folder holds: every file tensor read once or known as
// a buffer / tied head, every parameter's sources present. Configs the runtime cannot honour
// are refused naming the file and the key.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "runtime/ckpt/hf_weights.h"
#include "runtime/hf/hf_config.h"
#include "runtime/hf/hf_tensor_map.h"

namespace ds::hf {
namespace {

const char kFamilies[] = "runtime/generate/testdata/families/";

const char* const kCases[] = {"llama-linear", "llama-dynamic", "llama3-tied", "llama-yarn",
                              "llama-bf16",   "mistral",       "qwen2",       "qwen3",
                              "phi3",         "opt",           "opt-post",    "gpt_neox",
                              "gpt_neox-seq", "gemma",         "gemma2"};

TEST_CASE("hf config: every family's folder maps onto its graph", "[hf]") {
  for (const char* name : kCases) {
    INFO("case " << name);
    const std::string dir = std::string(kFamilies) + name;
    StatusOr<ModelSpec> spec = LoadHfSpec(dir);
    INFO(spec.status().ToString());
    REQUIRE(spec.ok());
    StatusOr<Graph> graph = BuildModelGraph(*spec);
    INFO(graph.status().ToString());
    REQUIRE(graph.ok());
    StatusOr<HfTensorMap> map = MapHfTensors(*spec, *graph);
    REQUIRE(map.ok());
    StatusOr<ckpt::HfWeights> weights = ckpt::HfWeights::Open(dir);
    REQUIRE(weights.ok());
    std::map<std::string, int> reads;
    for (const ckpt::NamedTensor& t : weights->tensors()) reads[t.name] = 0;
    for (const HfParam& p : map->params)
      for (const std::string& n : p.source.names) {
        INFO(p.ours << " reads " << n);
        REQUIRE(reads.count(n) == 1);
        ++reads[n];
      }
    const std::set<std::string> ignored(map->ignored.begin(), map->ignored.end());
    for (const auto& [n, count] : reads) {
      INFO("file tensor " << n);
      CHECK((count == 1 || (count == 2 && n.find("gate_up_proj") != std::string::npos) ||
             (count == 0 && ignored.count(n))));
    }
  }
}

TEST_CASE("hf config: the architecture options of each family", "[hf]") {
  auto spec = [](const char* name) {
    StatusOr<ModelSpec> s = LoadHfSpec(std::string(kFamilies) + name);
    REQUIRE(s.ok());
    return *s;
  };
  const ModelSpec llama3 = spec("llama3-tied");
  CHECK(llama3.arch.rope.type == "llama3");
  CHECK(llama3.arch.rope.original_max == 64);
  CHECK(llama3.rope_theta == 500000.0f);
  CHECK(llama3.tie_embeddings == 1);
  const ModelSpec yarn = spec("llama-yarn");
  CHECK(yarn.arch.rope.attention_factor == Approx(0.1 * std::log(4.0) + 1));
  CHECK(spec("mistral").arch.sliding_window == 4);
  CHECK(spec("mistral").arch.sliding_layers.empty());
  CHECK(spec("qwen2").arch.qkv_bias);
  CHECK(!spec("qwen2").arch.o_bias);
  CHECK(spec("qwen2").arch.sliding_window == 0);
  CHECK(spec("qwen3").arch.qk_norm);
  CHECK(spec("qwen3").arch.head_dim == 16);
  const ModelSpec gemma2 = spec("gemma2");
  CHECK(gemma2.arch.sliding_layers == std::vector<int>{0, 2});
  CHECK(gemma2.arch.attn_scale == Approx(1 / std::sqrt(24.0)));
  CHECK(gemma2.arch.final_softcap == 3.0f);
  CHECK(gemma2.arch.norm_unit_offset);
  CHECK(gemma2.arch.embed_scale == Approx(std::sqrt(32.0)));
  CHECK(spec("opt").arch.embed_proj_dim == 16);
  CHECK(spec("opt").arch.position_offset == 2);
  CHECK(!spec("opt-post").arch.pre_norm);
  CHECK(spec("gpt_neox").arch.rope.partial == 0.25);
  CHECK(spec("gpt_neox").arch.parallel_residual);
  CHECK(!spec("gpt_neox-seq").arch.parallel_residual);
}

// The error SpecFromHfConfig gives `json` ("" when it is accepted).
std::string Refusal(const std::string& json) {
  StatusOr<ModelSpec> s = SpecFromHfConfig(json, "m/config.json");
  return s.ok() ? "" : s.status().message();
}

TEST_CASE("hf config: what the runtime cannot honour is refused by name", "[hf]") {
  using Catch::Contains;
  const std::string llama =
      R"("model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32,
         "num_attention_heads": 4, "vocab_size": 64, "intermediate_size": 64)";
  CHECK(Refusal("{" + llama + "}").empty());
  CHECK_THAT(Refusal(R"({"model_type": "mixtral"})"),
             Contains("m/config.json") && Contains("\"model_type\" is \"mixtral\""));
  CHECK_THAT(Refusal("{" + llama + R"(, "rope_scaling": {"rope_type": "longrope"}})"),
             Contains("rope_scaling.rope_type") && Contains("longrope"));
  CHECK_THAT(Refusal("{" + llama + R"(, "rope_parameters": {"rope_type": "default",
             "mrope_section": [1, 2]}})"),
             Contains("rope_parameters.mrope_section"));
  CHECK_THAT(Refusal("{" + llama + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8}})"),
             Contains("high_freq_factor"));
  CHECK_THAT(Refusal("{" + llama + R"(, "attention_dropout": 0.1})"),
             Contains("\"attention_dropout\" is 0.1"));
  CHECK_THAT(Refusal("{" + llama + R"(, "hidden_act": "gelu"})"), Contains("\"hidden_act\""));
  CHECK_THAT(Refusal(R"({"model_type": "llama", "num_hidden_layers": 2})"),
             Contains("\"hidden_size\" is missing"));
  CHECK_THAT(Refusal(R"({"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 32,
             "num_attention_heads": 4, "vocab_size": 64, "intermediate_size": 64,
             "layer_types": ["full_attention", "chunked_attention"]})"),
             Contains("\"layer_types\" has \"chunked_attention\" at layer 1"));
  CHECK_THAT(Refusal(R"({"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 32,
             "num_attention_heads": 4, "vocab_size": 64, "ffn_dim": 64, "enable_bias": false})"),
             Contains("\"enable_bias\" is false"));
  CHECK_THAT(Refusal(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 32,
             "num_attention_heads": 4, "vocab_size": 64, "intermediate_size": 64,
             "num_key_value_heads": 3})"),
             Contains("not divisible by n_kv_head 3"));
}

}  // namespace
}  // namespace ds::hf
