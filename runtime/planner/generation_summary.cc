#include "runtime/planner/generation_summary.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <vector>

#include "runtime/graph/validate.h"
#include "runtime/planner/inference_plan.h"

namespace ds::planner {
namespace {

double MiB(double bytes) { return bytes / 1048576.0; }

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

// The stream's line: its instructions and what its collectives move per token.
std::string StreamLine(const InferencePlan& p) {
  int forwards = 0, reduces = 0, gathers = 0;
  for (const proto::Instruction& in : p.stream) {
    forwards += in.kind() == proto::Instruction::FORWARD;
    reduces += in.kind() == proto::Instruction::ACT_ALL_REDUCE;
    gathers += in.kind() == proto::Instruction::ACT_ALL_GATHER;
  }
  if (p.tp == 1) return "  each step runs one forward over the decode graph on one rank\n";
  return Format(
      "  each tp rank (tp %d) runs %d instructions per step: %d forward ranges, %d all-reduces "
      "(%.1f KiB per token), %d all-gather of its %lld logits (%.1f KiB per token)\n",
      p.tp, static_cast<int>(p.stream.size()), forwards, reduces, p.reduced_per_token * 4 / 1024.0,
      gathers, static_cast<long long>(p.vocab_local), p.gathered_per_token * 4 / 1024.0);
}

}  // namespace

std::string FormatGenerationSummary(const Graph& graph, int tp, int64_t budget) {
  auto it = graph.config.find("max_seq_len");
  const int64_t len = it == graph.config.end() ? 0 : it->second;
  if (len <= 0) return "";
  auto plan = MakeInferencePlan(graph, len, std::max(1, tp), 0);
  if (!plan.ok() || plan->decode.layers.empty()) return "";
  const DecodeGraphInfo& d = plan->decode;
  auto specs = InferTensorSpecs(d.graph, {{"batch", 1}, {"seq", len}}, d.graph.name);
  if (!specs.ok()) return "";
  const int64_t per_token = d.cache_bytes_per_sequence() / len;
  int64_t activations = 0, weights = 0;  // a prefill of `len` tokens keeps every activation
  for (size_t t = 0; t < d.graph.tensors.size(); ++t) {
    if (d.graph.tensors[t].role == TensorRole::kActivation) activations += (*specs)[t].nbytes();
    if (d.graph.tensors[t].role == TensorRole::kParam) weights += (*specs)[t].numel() * 4;
  }
  const CacheLayer& c = d.layers.front();
  std::string out = Format(
      "\ngeneration (KV cache, fp32)%s: %.1f KiB per token and sequence (%lld layers x k, v x "
      "%lld kv heads x %lld); a sequence of max_seq_len %lld: %.2f MiB of cache, its prefill "
      "%.2f MiB of activations; weights %.2f MiB\n",
      plan->tp > 1 ? ", per tp rank" : "", per_token / 1024.0,
      static_cast<long long>(d.layers.size()), static_cast<long long>(c.n_kv_head),
      static_cast<long long>(c.head_dim), static_cast<long long>(len), MiB(per_token * len),
      MiB(activations), MiB(weights));
  out += StreamLine(*plan);
  if (budget <= 0) return out;
  auto fit = [&](int64_t tokens) {
    const double per_seq = per_token * tokens + activations * static_cast<double>(tokens) / len;
    return std::max<int64_t>(0, static_cast<int64_t>((budget - weights) / per_seq));
  };
  return out + Format("  in %.2f GiB: %lld sequences of %lld tokens at once (%lld of %lld)\n",
                      budget / 1073741824.0, static_cast<long long>(fit(len)),
                      static_cast<long long>(len),
                      static_cast<long long>(fit(std::max<int64_t>(1, len / 4))),
                      static_cast<long long>(std::max<int64_t>(1, len / 4)));
}

namespace {

// The fp32 bytes of the weights of tp rank 0's generation graph at `tp`; -1 when it cannot be
// partitioned so.
int64_t DecodeWeights(const Graph& graph, int tp) {
  auto it = graph.config.find("max_seq_len");
  auto p = MakeInferencePlan(graph, it == graph.config.end() ? 1 : it->second, tp, 0);
  if (!p.ok()) return -1;
  int64_t weights = 0;
  for (const TensorInfo& t : p->decode.graph.tensors)
    if (t.role == TensorRole::kParam) {
      int64_t n = 1;
      for (const Dim& d : t.shape) n *= d.size;
      weights += 4 * n;
    }
  return weights;
}

// The most fp32 bytes one group of partition units holds when they are gathered `blocks`
// blocks at a time, as Trainer::SliceForTp groups them.
int64_t LargestGroup(const proto::Plan& plan, int blocks) {
  int64_t most = 0, bytes = 0;
  std::vector<int> seen;
  for (const proto::PartitionUnit& u : plan.partition().units()) {
    std::vector<int> more = seen;
    for (int b : u.blocks())
      if (std::find(more.begin(), more.end(), b) == more.end()) more.push_back(b);
    if (!seen.empty() && static_cast<int>(more.size()) > blocks) {
      most = std::max(most, bytes);
      bytes = 0;
      more.assign(u.blocks().begin(), u.blocks().end());
    }
    seen = more;
    if (!u.persistent()) bytes += 4 * u.count();
  }
  return std::max(most, bytes);
}

}  // namespace

std::string FormatHybridEngine(const Graph& graph, const proto::Plan& plan, int inference_tp,
                               int gather_blocks) {
  if (plan.settings().zero_stage() != 3 || plan.ranks_size() == 0) return "";
  const int64_t weights = DecodeWeights(graph, std::max(1, plan.topology().tp()));
  if (weights < 0) return "";
  const proto::MemorySummary& m = plan.ranks(0).memory();
  std::string out = Format(
      "  hybrid engine (ZeRO-3): the training step peaks at %.2f MiB on rank 0 (model states "
      "%.2f MiB, parameters sharded); a rollout first gathers the whole model (%.2f MiB in fp32) "
      "on each rank, then its KV cache, and releases both before the next step\n",
      MiB(m.peak_bytes()), MiB(m.model_state_bytes()), MiB(weights));
  const int64_t slice = inference_tp > 1 ? DecodeWeights(graph, inference_tp) : -1;
  if (slice < 0) return out;
  return out + Format(
                   "  with hybrid_engine.inference_tp_size %.0f the rollouts run from "
                   "tensor-parallel slices instead: %.2f MiB per rank in fp32, cut while at "
                   "most %.2f MiB of units is gathered (tp_gather_partition_size %.0f blocks)\n",
                   static_cast<double>(inference_tp), MiB(slice),
                   MiB(LargestGroup(plan, gather_blocks)), static_cast<double>(gather_blocks));
}

}  // namespace ds::planner
