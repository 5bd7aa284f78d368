#include "runtime/plan/generation_summary.h"

#include <algorithm>
#include <cstdio>

#include "runtime/graph/validate.h"

namespace ds::plan {
namespace {

double MiB(double bytes) { return bytes / 1048576.0; }

}  // namespace

std::string FormatGenerationSummary(const Graph& graph, int64_t budget) {
  auto it = graph.config.find("max_seq_len");
  const int64_t len = it == graph.config.end() ? 0 : it->second;
  if (len <= 0) return "";
  auto specs = InferTensorSpecs(graph, {{"batch", 1}, {"seq", len}}, graph.name);
  if (!specs.ok()) return "";
  int64_t per_token = 0, layers = 0, kv = 0, dim = 0;
  for (const NodeInfo& n : graph.nodes) {
    if (n.op != "attention") continue;
    const int64_t heads = n.attrs.Int("n_head", 0), kv_heads = n.attrs.Int("n_kv_head", heads);
    const int64_t width = (*specs)[n.inputs[0]].shape.back();
    if (heads <= 0 || width % (heads + 2 * kv_heads) != 0) return "";
    kv = kv_heads;
    dim = width / (heads + 2 * kv_heads);
    per_token += 2 * kv * dim * 4;
    ++layers;
  }
  if (layers == 0) return "";
  int64_t activations = 0;  // a prefill of `len` tokens keeps every activation
  for (size_t t = 0; t < graph.tensors.size(); ++t)
    if (graph.tensors[t].role == TensorRole::kActivation) activations += (*specs)[t].nbytes();
  const double weights = 4.0 * graph.NumParameters();
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "\ngeneration (KV cache, fp32): %.1f KiB per token and sequence (%lld layers x k, v "
      "x %lld kv heads x %lld); a sequence of max_seq_len %lld: %.2f MiB of cache, its "
      "prefill %.2f MiB of activations; weights %.2f MiB\n",
      per_token / 1024.0, static_cast<long long>(layers), static_cast<long long>(kv),
      static_cast<long long>(dim), static_cast<long long>(len), MiB(per_token * len),
      MiB(activations), MiB(weights));
  std::string out = buf;
  if (budget <= 0) return out;
  auto fit = [&](int64_t tokens) {
    const double per_seq = per_token * tokens + activations * static_cast<double>(tokens) / len;
    return std::max<int64_t>(0, static_cast<int64_t>((budget - weights) / per_seq));
  };
  std::snprintf(
      buf, sizeof(buf), "  in %.2f GiB: %lld sequences of %lld tokens at once (%lld of %lld)\n",
      budget / 1073741824.0, static_cast<long long>(fit(len)), static_cast<long long>(len),
      static_cast<long long>(fit(std::max<int64_t>(1, len / 4))),
      static_cast<long long>(std::max<int64_t>(1, len / 4)));
  return out + buf;
}

}  // namespace ds::plan
