#include <cstdio>
#include <fstream>

#include <catch2/catch.hpp>

#include "runtime/graph/graph_io.h"
#include "runtime/graph/model_builder.h"
#include "runtime/graph/validate.h"

namespace ds {
namespace {

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

Graph Tiny(const std::string& preset) {
  auto g = BuildModelGraph(ModelPreset(preset).value());
  REQUIRE(g.ok());
  return std::move(g).value();
}

void RequireError(const Status& s, const std::vector<std::string>& parts) {
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  for (const std::string& p : parts) CHECK(s.message().find(p) != std::string::npos);
}

TEST_CASE("Graph: generated GPT-2 and Llama graphs validate", "[graph]") {
  for (const char* preset : {"gpt2-tiny", "llama-tiny", "gpt2-small-test", "llama-small"}) {
    Graph g = Tiny(preset);
    INFO(preset);
    REQUIRE(ValidateGraph(g, preset).ok());
  }
  Graph gpt = Tiny("gpt2-tiny");
  // GPT-2 tiny: wte 64x64 + wpe 64x64 + 2 blocks x (12C^2 + 13C) + ln_f 2C.
  const int64_t C = 64;
  CHECK(gpt.NumParameters() == 64 * C + 64 * C + 2 * (12 * C * C + 13 * C) + 2 * C);
  CHECK(gpt.FindTensor("h.1.mlp.proj.weight") >= 0);
  Graph llama = Tiny("llama-tiny");
  CHECK(llama.FindTensor("lm_head.weight") >= 0);
  CHECK(llama.FindTensor("layers.0.attn.qkv.weight") >= 0);
  // GQA: q 4 heads + k,v 2 heads each of size 16 -> 128 rows.
  CHECK(llama.tensors[llama.FindTensor("layers.0.attn.qkv.weight")].shape[0].size == 128);
}

TEST_CASE("Graph: binary and text files round-trip", "[graph]") {
  Graph g = Tiny("llama-tiny");
  for (const char* ext : {".pb", ".pbtxt"}) {
    std::string path = TmpPath(std::string("roundtrip") + ext);
    REQUIRE(SaveGraph(g, path).ok());
    auto back = LoadGraph(path);
    REQUIRE(back.ok());
    CHECK(back->nodes.size() == g.nodes.size());
    CHECK(back->tensors.size() == g.tensors.size());
    CHECK(back->NumParameters() == g.NumParameters());
    for (const NodeInfo& n : back->nodes)
      if (n.op == "rope") CHECK(n.attrs.Float("theta", 0) == Approx(10000.0));
    CHECK(back->config.at("n_kv_head") == 2);
    CHECK(ValidateGraph(*back, path).ok());
  }
}

TEST_CASE("Graph: malformed graphs are rejected naming the node and the file", "[graph]") {
  SECTION("unknown op") {
    Graph g = Tiny("gpt2-tiny");
    g.nodes[3].op = "conv2d";
    RequireError(ValidateGraph(g, "m.pbtxt"),
                 {"m.pbtxt", g.nodes[3].name, "unknown op \"conv2d\""});
  }
  SECTION("wrong arity") {
    Graph g = Tiny("gpt2-tiny");
    g.nodes[0].inputs.pop_back();
    RequireError(ValidateGraph(g, "m.pb"), {"m.pb", "tok_emb", "has 1 inputs, embedding takes 2"});
  }
  SECTION("shape mismatch") {
    Graph g = Tiny("gpt2-tiny");
    int w = g.FindTensor("h.0.mlp.fc.weight");
    g.tensors[w].shape[1] = Dim::Fixed(32);
    RequireError(ValidateGraph(g, "m.pb"), {"m.pb", "h.0.mlp.fc", "linear"});
  }
  SECTION("declared activation shape disagrees") {
    Graph g = Tiny("gpt2-tiny");
    int t = g.FindTensor("h.0.mlp.gelu");
    g.tensors[t].shape[2] = Dim::Fixed(7);
    RequireError(ValidateGraph(g, "m.pb"), {"h.0.mlp.gelu", "declared", "computes"});
  }
  SECTION("dtype mismatch") {
    Graph g = Tiny("gpt2-tiny");
    g.tensors[g.FindTensor("ids")].dtype = DType::kF32;
    RequireError(ValidateGraph(g, "m.pb"), {"m.pb", "tok_emb"});
  }
  SECTION("cycle") {
    Graph g = Tiny("gpt2-tiny");
    // ln_1 of block 0 reads the output of block 0's first residual add.
    int ln1 = -1;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].name == "h.0.ln_1") ln1 = static_cast<int>(i);
    g.nodes[ln1].inputs[0] = g.FindTensor("h.0.res_1");
    RequireError(ValidateGraph(g, "m.pb"), {"h.0.ln_1", "cycle"});
  }
  SECTION("out of order") {
    Graph g = Tiny("gpt2-tiny");
    std::swap(g.nodes[0], g.nodes[1]);
    RequireError(ValidateGraph(g, "m.pb"), {"topological order"});
  }
  SECTION("dangling tensor") {
    Graph g = Tiny("gpt2-tiny");
    TensorInfo t;
    t.name = "orphan";
    t.shape = {Dim::Fixed(4)};
    t.role = TensorRole::kParam;
    g.tensors.push_back(t);
    RequireError(ValidateGraph(g, "m.pb"), {"m.pb", "orphan", "dangling"});
  }
  SECTION("unknown attribute") {
    Graph g = Tiny("gpt2-tiny");
    g.nodes[2].attrs.SetInt("epsilon", 1);
    RequireError(ValidateGraph(g, "m.pb"), {"unknown attribute \"epsilon\""});
  }
  SECTION("no loss") {
    Graph g = Tiny("gpt2-tiny");
    g.loss = -1;
    RequireError(ValidateGraph(g, "m.pb"), {"no loss"});
  }
}

TEST_CASE("Graph: unreadable files name the file", "[graph]") {
  RequireError(LoadGraph(TmpPath("does-not-exist.pb")).status(),
               {"does-not-exist.pb", "cannot open"});
  std::string bad_txt = TmpPath("bad.pbtxt");
  std::ofstream(bad_txt)
      << "tensors { name: \"x\" shape { size: 3 } dtype: DT_F32 role: PARAM }\nnodes { op: ";
  RequireError(LoadGraph(bad_txt).status(), {"bad.pbtxt", "line"});
  std::string bad_bin = TmpPath("bad.pb");
  std::ofstream(bad_bin) << "\xff\xff\xff garbage";
  RequireError(LoadGraph(bad_bin).status(), {"bad.pb", "not a valid binary graph"});
  std::string undeclared = TmpPath("undeclared.pbtxt");
  std::ofstream(undeclared) << "nodes { name: \"n\" op: \"gelu\" inputs: \"nope\" outputs: \"y\" }";
  RequireError(LoadGraph(undeclared).status(),
               {"undeclared.pbtxt", "\"nope\" is not a declared tensor"});
}

}  // namespace
}  // namespace ds
