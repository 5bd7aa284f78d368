#include "runtime/plan/model_loader.h"

#include "runtime/base/status_macros.h"
#include "runtime/graph/graph_io.h"
#include "runtime/graph/model_builder.h"
#include "runtime/graph/validate.h"

namespace ds::plan {

StatusOr<Graph> LoadModelGraph(const config::JobConfig& config) {
  const config::ModelConfig& m = config.model;
  if (!m.graph.empty()) {
    DS_ASSIGN_OR_RETURN(Graph g, LoadGraph(m.graph));
    DS_RETURN_IF_ERROR(ValidateGraph(g, m.graph));
    return g;
  }
  if (m.family == config::ModelFamily::kNone)
    return InvalidArgumentError(config.source + ": the model section needs `graph` or `family`");
  ModelSpec s;
  s.family = m.family == config::ModelFamily::kGpt2 ? "gpt2" : "llama";
  s.n_layer = m.n_layer;
  s.n_embd = m.n_embd;
  s.n_head = m.n_head;
  s.n_kv_head = m.n_kv_head;
  s.vocab_size = m.vocab_size;
  s.max_seq_len = m.max_seq_len;
  s.ffn_hidden = m.ffn_hidden;
  s.dropout = static_cast<float>(m.dropout);
  s.rope_theta = static_cast<float>(m.rope_theta);
  s.tie_embeddings = m.tie_embeddings ? 1 : 0;
  auto g = BuildModelGraph(s);
  if (!g.ok()) return g.status().WithPrefix(config.source);
  DS_RETURN_IF_ERROR(ValidateGraph(*g, config.source + " (model)"));
  return g;
}

}  // namespace ds::plan
