// ds-model: writes model graph descriptions for the GPT-2 and Llama families.
//
//   ds-model --preset gpt2-124m --output gpt2-124m.pb
//   ds-model --family llama --n_layer 4 --n_embd 256 --n_head 8 --n_kv_head 4 \
//            --vocab_size 8192 --max_seq_len 256 --output llama.pbtxt
#include <cstdio>

#include <CLI/CLI.hpp>

#include "runtime/graph/graph_io.h"
#include "runtime/graph/model_builder.h"
#include "runtime/graph/validate.h"

int main(int argc, char** argv) {
  CLI::App app{"ds-model: write a GPT-2 or Llama model graph (.pb binary or .pbtxt text)"};
  std::string preset, output;
  ds::ModelSpec spec;
  bool list = false;
  app.add_option("--preset", preset, "start from a named preset (see --list)");
  app.add_flag("--list", list, "list the presets and exit");
  app.add_option("--family", spec.family, "gpt2 or llama");
  app.add_option("--n_layer", spec.n_layer, "transformer blocks");
  app.add_option("--n_embd", spec.n_embd, "model width C");
  app.add_option("--n_head", spec.n_head, "attention heads");
  app.add_option("--n_kv_head", spec.n_kv_head, "key/value heads (llama; 0 = n_head)");
  app.add_option("--vocab_size", spec.vocab_size, "vocabulary size V");
  app.add_option("--max_seq_len", spec.max_seq_len, "longest sequence T");
  app.add_option("--ffn_hidden", spec.ffn_hidden, "MLP hidden size (0 = family default)");
  app.add_option("--dropout", spec.dropout, "dropout probability (gpt2)");
  app.add_option("--rope_theta", spec.rope_theta, "RoPE base (llama)");
  app.add_option("--tie_embeddings", spec.tie_embeddings, "1 tie, 0 untie, -1 family default");
  app.add_option("--output,-o", output, "output file (.pb or .pbtxt)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (list) {
    for (const std::string& n : ds::ModelPresetNames()) {
      ds::ModelSpec s = ds::ModelPreset(n).value();
      auto g = ds::BuildModelGraph(s);
      std::printf("%-16s %-6s L=%-3d C=%-5d H=%-3d KV=%-3d V=%-7d T=%-5d params=%.1fM\n", n.c_str(),
                  s.family.c_str(), s.n_layer, s.n_embd, s.n_head,
                  s.n_kv_head > 0 ? s.n_kv_head : s.n_head, s.vocab_size, s.max_seq_len,
                  g.ok() ? g->NumParameters() / 1e6 : 0.0);
    }
    return 0;
  }
  if (output.empty()) {
    std::fprintf(stderr, "ds-model: --output is required\n");
    return 2;
  }
  if (!preset.empty()) {
    auto p = ds::ModelPreset(preset);
    if (!p.ok()) {
      std::fprintf(stderr, "ds-model: %s\n", p.status().message().c_str());
      return 2;
    }
    // Explicit flags override the preset's values.
    ds::ModelSpec base = *p;
    for (CLI::Option* opt : app.get_options()) {
      if (opt->count() == 0) continue;
      const std::string n = opt->get_name();
      if (n == "--family")
        base.family = spec.family;
      else if (n == "--n_layer")
        base.n_layer = spec.n_layer;
      else if (n == "--n_embd")
        base.n_embd = spec.n_embd;
      else if (n == "--n_head")
        base.n_head = spec.n_head;
      else if (n == "--n_kv_head")
        base.n_kv_head = spec.n_kv_head;
      else if (n == "--vocab_size")
        base.vocab_size = spec.vocab_size;
      else if (n == "--max_seq_len")
        base.max_seq_len = spec.max_seq_len;
      else if (n == "--ffn_hidden")
        base.ffn_hidden = spec.ffn_hidden;
      else if (n == "--dropout")
        base.dropout = spec.dropout;
      else if (n == "--rope_theta")
        base.rope_theta = spec.rope_theta;
      else if (n == "--tie_embeddings")
        base.tie_embeddings = spec.tie_embeddings;
    }
    spec = base;
  }
  auto graph = ds::BuildModelGraph(spec);
  if (!graph.ok()) {
    std::fprintf(stderr, "ds-model: %s\n", graph.status().message().c_str());
    return 2;
  }
  ds::Status s = ds::ValidateGraph(*graph, output);
  if (s.ok()) s = ds::SaveGraph(*graph, output);
  if (!s.ok()) {
    std::fprintf(stderr, "ds-model: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ds-model: wrote %s (%s, %zu nodes, %.2fM parameters)\n", output.c_str(),
              graph->name.c_str(), graph->nodes.size(), graph->NumParameters() / 1e6);
  return 0;
}
