// ds-model: writes model graph descriptions for the GPT-2 and Llama families, dense or with
// mixture-of-experts MLPs (--num_experts, DeepSpeed-MoE's layer arguments).
//
//   ds-model --preset gpt2-124m --output gpt2-124m.pb
//   ds-model --family llama --n_layer 4 --n_embd 256 --n_head 8 --n_kv_head 4
//            --vocab_size 8192 --max_seq_len 256 --output llama.pbtxt   (one command)
#include <cctype>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "runtime/graph/graph_io.h"
#include "runtime/graph/model_builder.h"
#include "runtime/graph/validate.h"

namespace {

// A MoE flag the command line did not give keeps the preset's value.
void OverrideMoe(const std::string& flag, const ds::MoeSpec& preset, ds::MoeSpec* m) {
  if (flag == "--num_experts") m->num_experts = preset.num_experts;
  if (flag == "--expert_interval") m->expert_interval = preset.expert_interval;
  if (flag == "--top_k") m->top_k = preset.top_k;
  if (flag == "--capacity_factor") m->capacity_factor = preset.capacity_factor;
  if (flag == "--eval_capacity_factor") m->eval_capacity_factor = preset.eval_capacity_factor;
  if (flag == "--min_capacity") m->min_capacity = preset.min_capacity;
  if (flag == "--drop_tokens") m->drop_tokens = preset.drop_tokens;
  if (flag == "--use_residual") m->use_residual = preset.use_residual;
  if (flag == "--noisy_gate_policy") m->noisy_gate_policy = preset.noisy_gate_policy;
  if (flag == "--top2_2nd_expert_sampling") m->second_expert = preset.second_expert;
  if (flag == "--use_rts") m->use_rts = preset.use_rts;
  if (flag == "--moe_loss_coeff") m->aux_loss_coeff = preset.aux_loss_coeff;
  if (flag == "--expert_ffn_hidden") m->expert_ffn_hidden = preset.expert_ffn_hidden;
}

// DeepSpeed-MoE's layer arguments (model_builder.h MoeSpec).
void AddMoeFlags(CLI::App& app, ds::MoeSpec* moe, bool* sample_second) {
  app.add_option("--num_experts", moe->num_experts, "experts per MoE layer (0 = dense)");
  app.add_option("--expert_interval", moe->expert_interval, "every k-th block is MoE");
  app.add_option("--top_k", moe->top_k, "experts per token (1 or 2)");
  app.add_option("--capacity_factor", moe->capacity_factor, "training capacity factor");
  app.add_option("--eval_capacity_factor", moe->eval_capacity_factor, "evaluation capacity factor");
  app.add_option("--min_capacity", moe->min_capacity, "least capacity per expert");
  app.add_option("--drop_tokens", moe->drop_tokens, "drop tokens past the capacity (true/false)");
  app.add_option("--use_residual", moe->use_residual, "PR-MoE: a dense MLP beside the experts");
  app.add_option("--noisy_gate_policy", moe->noisy_gate_policy, "none or rsample (top-1)");
  app.add_option("--top2_2nd_expert_sampling", *sample_second,
                 "top-2: Gumbel-sample the second expert (true, DeepSpeed's default) or argmax");
  app.add_option("--use_rts", moe->use_rts, "top-1: random token selection when dropping");
  app.add_option("--moe_loss_coeff", moe->aux_loss_coeff, "aux (load-balancing) loss coefficient");
  app.add_option("--expert_ffn_hidden", moe->expert_ffn_hidden, "expert MLP width (0 = dense's)");
}

// The model's shape flags (model_builder.h ModelSpec).
void AddSpecFlags(CLI::App& app, ds::ModelSpec* spec) {
  app.add_option("--family", spec->family, "gpt2 or llama");
  app.add_option("--n_layer", spec->n_layer, "transformer blocks");
  app.add_option("--n_embd", spec->n_embd, "model width C");
  app.add_option("--n_head", spec->n_head, "attention heads");
  app.add_option("--n_kv_head", spec->n_kv_head, "key/value heads (llama; 0 = n_head)");
  app.add_option("--vocab_size", spec->vocab_size, "vocabulary size V");
  app.add_option("--max_seq_len", spec->max_seq_len, "longest sequence T");
  app.add_option("--ffn_hidden", spec->ffn_hidden, "MLP hidden size (0 = family default)");
  app.add_option("--dropout", spec->dropout, "dropout probability (gpt2)");
  app.add_option("--rope_theta", spec->rope_theta, "RoPE base (llama)");
  app.add_option("--tie_embeddings", spec->tie_embeddings, "1 tie, 0 untie, -1 family default");
}

// A shape flag the command line gave replaces the preset's value.
void OverrideShape(const std::string& flag, const ds::ModelSpec& given, ds::ModelSpec* base) {
  if (flag == "--family")
    base->family = given.family;
  else if (flag == "--n_layer")
    base->n_layer = given.n_layer;
  else if (flag == "--n_embd")
    base->n_embd = given.n_embd;
  else if (flag == "--n_head")
    base->n_head = given.n_head;
  else if (flag == "--n_kv_head")
    base->n_kv_head = given.n_kv_head;
  else if (flag == "--vocab_size")
    base->vocab_size = given.vocab_size;
  else if (flag == "--max_seq_len")
    base->max_seq_len = given.max_seq_len;
  else if (flag == "--ffn_hidden")
    base->ffn_hidden = given.ffn_hidden;
  else if (flag == "--dropout")
    base->dropout = given.dropout;
  else if (flag == "--rope_theta")
    base->rope_theta = given.rope_theta;
  else if (flag == "--tie_embeddings")
    base->tie_embeddings = given.tie_embeddings;
}

// The preset named `preset` with the flags given on the command line (in `spec`) over it.
ds::StatusOr<ds::ModelSpec> PresetWithFlags(const std::string& preset, const ds::ModelSpec& spec,
                                            CLI::App& app) {
  auto p = ds::ModelPreset(preset);
  if (!p.ok()) return p.status();
  // Explicit flags override the preset's values.
  ds::ModelSpec base = *p;
  const ds::MoeSpec preset_moe = base.moe;
  base.moe = spec.moe;
  for (CLI::Option* opt : app.get_options()) {
    const std::string n = opt->get_name();
    if (opt->count() == 0) {
      OverrideMoe(n, preset_moe, &base.moe);
      continue;
    }
    OverrideShape(n, spec, &base);
  }
  return base;
}

// --list: one line per preset with its shape and parameter count.
void PrintPresets() {
  for (const std::string& n : ds::ModelPresetNames()) {
    ds::ModelSpec s = ds::ModelPreset(n).value();
    auto g = ds::BuildModelGraph(s);
    std::printf("%-16s %-6s L=%-3d C=%-5d H=%-3d KV=%-3d V=%-7d T=%-5d params=%.1fM\n", n.c_str(),
                s.family.c_str(), s.n_layer, s.n_embd, s.n_head,
                s.n_kv_head > 0 ? s.n_kv_head : s.n_head, s.vocab_size, s.max_seq_len,
                g.ok() ? g->NumParameters() / 1e6 : 0.0);
  }
}

// Builds, validates and saves the graph of `spec` to `output`; returns the exit code.
int WriteGraph(const ds::ModelSpec& spec, const std::string& output) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds-model: write a GPT-2 or Llama model graph (.pb binary or .pbtxt text)"};
  std::string preset, output;
  ds::ModelSpec spec;
  bool list = false;
  app.add_option("--preset", preset, "start from a named preset (see --list)");
  app.add_flag("--list", list, "list the presets and exit");
  AddSpecFlags(app, &spec);
  bool sample_second = true;
  AddMoeFlags(app, &spec.moe, &sample_second);
  app.add_option("--output,-o", output, "output file (.pb or .pbtxt)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spec.moe.second_expert = sample_second ? "sample" : "argmax";
  for (char& ch : spec.moe.noisy_gate_policy) ch = static_cast<char>(std::tolower(ch));
  if (list) {
    PrintPresets();
    return 0;
  }
  if (output.empty()) {
    std::fprintf(stderr, "ds-model: --output is required\n");
    return 2;
  }
  if (!preset.empty()) {
    auto p = PresetWithFlags(preset, spec, app);
    if (!p.ok()) {
      std::fprintf(stderr, "ds-model: %s\n", p.status().message().c_str());
      return 2;
    }
    spec = *p;
  }
  return WriteGraph(spec, output);
}
