#include "parallel/expert/moe_summary.h"

#include "kernels/head_split.h"

#include <algorithm>
#include <cstdio>

#include "kernels/head_split.h"
#include "kernels/moe_capacity.h"
#include "parallel/expert/ep_graph.h"
#include "runtime/core/proto_dtype.h"

namespace ds::parallel {

namespace {

std::string Fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c, d);
  return buf;
}

double MiB(int64_t bytes) { return bytes / 1048576.0; }

bool IsExpertParam(const std::string& name) { return name.find(".experts.") != std::string::npos; }

// Expert elements among rank 0's owned shard positions (the whole flat buffer at stage 0).
int64_t OwnedExpertElements(const proto::Plan& plan) {
  int64_t owned = 0;
  const bool sharded = plan.settings().zero_stage() >= 1;
  for (const proto::PlanParam& p : plan.model().params()) {
    if (!IsExpertParam(p.name())) continue;
    if (!sharded) {
      owned += p.numel();
      continue;
    }
    for (const proto::PartitionUnit& u : plan.partition().units()) {
      const int64_t lo = std::max(p.offset(), u.offset());
      const int64_t hi =
          std::min({p.offset() + p.numel(), u.offset() + u.count(), u.offset() + u.chunk()});
      owned += std::max<int64_t>(0, hi - lo);
    }
  }
  return owned;
}

}  // namespace

std::string FormatMoeSummary(const Graph& graph, const proto::Plan& plan) {
  const int64_t experts = NumExperts(graph);
  if (experts == 0) return "";
  const NodeInfo* router = nullptr;
  int layers = 0;
  for (const NodeInfo& n : graph.nodes)
    if (n.op == "moe_router") router = router ? router : &n, ++layers;
  if (!router) return "";
  const kernels::MoeGating g = kernels::MoeGatingFrom(router->attrs);
  const int64_t tokens = plan.settings().micro_batch_size() * plan.settings().seq_len();
  const int ep = std::max(1, plan.topology().ep());
  std::string out = Fmt("\nmixture of experts: %.0f experts, top-%.0f, in %.0f of %.0f blocks",
                        experts, g.top_k, layers, graph.num_blocks);
  out += Fmt("; ep %.0f\n", ep);
  if (g.drop_tokens)
    out +=
        Fmt("  capacity per expert: %.0f tokens (training), %.0f (evaluation) of %.0f per "
            "micro-batch\n",
            kernels::MoeCapacity(g, tokens, true), kernels::MoeCapacity(g, tokens, false), tokens);
  else
    out +=
        Fmt("  no drops: the capacity is the busiest expert's count, agreed over the ep group "
            "(at most %.0f tokens)\n",
            tokens);
  int64_t expert_elems = 0;
  for (const proto::PlanParam& p : plan.model().params())
    if (IsExpertParam(p.name())) expert_elems += p.numel();
  const int64_t model = ProtoDTypeSize(plan.settings().model_dtype());
  const int64_t states = 4 * plan.settings().optimizer_states() + (model == 4 ? 0 : 4);
  // The plan's model is a rank's: its E / ep experts of each layer.
  const int64_t whole = plan.model().num_parameters() + expert_elems * (ep - 1);
  out += Fmt("  expert parameters: %.2fM of %.2fM (%.1f%%); each rank holds its %.0f experts",
             expert_elems * ep / 1e6, whole / 1e6, 100.0 * expert_elems * ep / whole, experts / ep);
  out += Fmt(" of each layer: %.2fM, %.2f MiB\n", expert_elems / 1e6, MiB(expert_elems * model));
  out += Fmt("  expert optimizer states on rank 0: %.2f MiB (ZeRO stage %.0f",
             MiB(OwnedExpertElements(plan) * states), plan.settings().zero_stage());
  out += plan.settings().zero_stage() >= 1 && ep > 1
             ? Fmt(", sharded over the %.0f ranks holding the same experts)\n",
                   plan.topology().dp() / ep)
             : ")\n";
  int64_t calls = 0, payload = 0, overlapped = 0;
  for (const proto::Instruction& ins : plan.ranks(0).instructions()) {
    if (ins.kind() != proto::Instruction::ACT_ALL_TO_ALL) continue;
    ++calls;
    overlapped += ins.async();
    payload += ins.collective().count() * ProtoDTypeSize(ins.collective().dtype());
  }
  if (calls > 0)
    out += Fmt("  all-to-all per step on rank 0: %.0f calls, %.2f MiB exchanged, %.2f MiB sent\n",
               calls, MiB(payload), MiB(payload * (ep - 1) / ep)) +
           (g.drop_tokens ? "" : "  (without drops: at most; a step moves its capacity's rows)\n");
  if (overlapped > 0)
    out +=
        Fmt("  %.0f of them run while PR-MoE's dense branch computes (the dispatch's, forward "
            "and backward: parallel.moe_shared_expert_overlap)\n",
            overlapped);
  return out;
}

std::string Heads(kernels::HeadRange r) {
  return std::to_string(r.begin) + (r.size() > 1 ? "-" + std::to_string(r.end - 1) : "");
}

// "1/2 of the heads", or each rank's heads when they differ or share kv heads (head_split.h).
std::string UlyssesHeads(int64_t heads, int64_t kv_heads, int sp) {
  if (heads % sp == 0 && kv_heads % sp == 0) return Fmt("1/%.0f of the heads", sp);
  if (!kernels::CheckHeadSplit(heads, kv_heads, sp).ok()) return "(heads that cannot be dealt)";
  std::string q, kv;
  for (int j = 0; j < sp; ++j) {
    q += (j ? " | " : "") + Heads(kernels::QueryHeads(heads, kv_heads, sp, j));
    kv += (j ? " | " : "") + Heads(kernels::KvHeads(heads, kv_heads, sp, j));
  }
  return "the ranks' query heads " + q + " of " + std::to_string(heads) + ", kv heads " + kv +
         " of " + std::to_string(kv_heads) +
         (kv_heads < sp ? Fmt(" (each shared by %.0f ranks)", sp / kv_heads)
                        : " (uneven: every part as wide as the widest rank's)");
}

std::string FormatUlyssesSummary(const Graph& graph, const proto::Plan& plan) {
  const int sp = plan.topology().sp();
  if (sp <= 1) return "";
  int layers = 0;
  int64_t heads = 0, kv_heads = 0;
  for (const NodeInfo& n : graph.nodes)
    if (n.op == "attention") {
      ++layers;
      heads = n.attrs.Int("n_head", 0);
      kv_heads = n.attrs.Int("n_kv_head", heads);
    }
  const proto::PlanSettings& s = plan.settings();
  const int64_t n = s.micro_batch_size() * s.seq_len(), h = plan.model().n_embd();
  int64_t exchanged = 0;  // forward, one micro-batch, every layer
  for (const proto::Instruction& ins : plan.ranks(0).instructions())
    if (ins.kind() == proto::Instruction::ACT_ALL_TO_ALL && !ins.activation().grad() &&
        ins.micro_batch() == 0)
      exchanged += ins.collective().count() * ProtoDTypeSize(ins.collective().dtype());
  const double per_layer = static_cast<double>(exchanged) / std::max(1, layers);
  const double formula = 4.0 * n * h * 4 / sp;  // fp32
  std::string out =
      Fmt("\nulysses: sp %.0f; each rank takes %.0f of %.0f positions of every "
          "sequence and in attention ",
          sp, s.seq_len() / sp, s.seq_len());
  out += UlyssesHeads(heads, kv_heads, sp) + "\n";
  out +=
      Fmt("  all-to-all per layer and micro-batch (forward): %.1f KiB exchanged per rank, "
          "%.1f KiB sent; 4Nh/P: %.1f KiB\n",
          per_layer / 1024, per_layer * (sp - 1) / sp / 1024, formula / 1024);
  out += Fmt("  Megatron-SP at tp %.0f moves 4Nh: %.1f KiB per layer (N = %.0f tokens, h = %.0f)\n",
             sp, 4.0 * n * h * 4 / 1024, n, h);
  return out;
}

}  // namespace ds::parallel
