#include "runtime/plan/plan_summary.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "runtime/core/proto_dtype.h"
#include "runtime/core/quantize.h"
#include "runtime/plan/collective_check.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/plan/zeropp_summary.h"

namespace ds::plan {
namespace {

using Buf = proto::PlanBuffer;

int64_t Kind(const proto::MemorySummary& m, Buf::Kind kind) {
  for (const proto::KindBytes& k : m.peak_by_kind())
    if (k.kind() == kind) return k.bytes();
  return 0;
}

// Bytes one rank sends: ring all-reduce 2(n-1)/n of the data; reduce-scatter and all-gather
// everything but the rank's own part; all-to-all (n-1)/n of its buffer (at most: without drops a
// step moves its capacity's rows only).
int64_t SentBytes(const proto::Instruction& ins, int rank, int n) {
  const proto::Collective& c = ins.collective();
  const int64_t payload = c.count() * ProtoDTypeSize(c.dtype());
  if (n <= 1) return 0;
  if (ins.kind() == proto::Instruction::ACT_ALL_TO_ALL) return (n - 1) * payload / n;
  if (c.rank_counts_size() == 0) return 2 * (n - 1) * payload / n;
  if (ins.quantize().bits() > 0)  // qwZ: every part as its blocks (equal parts)
    return (n - 1) * QuantizedBytes(c.rank_counts(rank),
                                    QuantSpec{ins.quantize().bits(), ins.quantize().block()});
  return (c.count() - c.rank_counts(rank)) * ProtoDTypeSize(c.dtype());
}

}  // namespace

std::vector<int> CollectiveMembers(const proto::Plan& plan, const proto::Instruction& ins) {
  for (const proto::ProcessGroup& g : plan.groups())
    if (g.name() == ins.collective().group()) return {g.ranks().begin(), g.ranks().end()};
  std::vector<int> dp(plan.topology().dp());
  for (int r = 0; r < plan.topology().dp(); ++r) dp[r] = r;
  return dp;
}

int64_t CollectiveSentBytes(const proto::Plan& plan, const proto::Instruction& ins, int rank) {
  if (ins.collective().hierarchy_size() > 0 && ins.collective().placement() != proto::LOCAL) {
    int64_t sent = 0;
    for (const StageSends& s : HierarchySends(plan, ins))
      sent += (static_cast<int64_t>(s.members.size()) - 1) * s.per_peer;
    return sent;
  }
  if (ins.kind() == proto::Instruction::SEND)
    return ins.collective().count() * ProtoDTypeSize(ins.collective().dtype());
  if (!IsCollective(ins.kind())) return 0;
  const std::vector<int> members = CollectiveMembers(plan, ins);
  const auto at = std::find(members.begin(), members.end(), rank);
  if (at == members.end()) return SentBytes(ins, rank, plan.topology().dp());  // as a dp plan
  return SentBytes(ins, static_cast<int>(at - members.begin()), static_cast<int>(members.size()));
}

proto::RankSummary SummarizeRank(const proto::Plan& plan, const proto::RankPlan& rp) {
  proto::RankSummary r;
  const proto::MemorySummary& m = rp.memory();
  r.set_rank(rp.rank());
  r.set_param_bytes(Kind(m, Buf::PARAM_SHARD) + Kind(m, Buf::PARAM_FULL));
  r.set_grad_bytes(Kind(m, Buf::GRAD_FULL) + Kind(m, Buf::GRAD_SHARD));
  r.set_optimizer_bytes(Kind(m, Buf::MASTER_WEIGHTS) + Kind(m, Buf::OPTIMIZER_STATE));
  r.set_model_state_bytes(m.model_state_bytes());
  r.set_activation_peak_bytes(Kind(m, Buf::ACTIVATIONS));
  r.set_activation_grad_bytes(Kind(m, Buf::ACTIVATION_GRADS));
  r.set_bucket_peak_bytes(Kind(m, Buf::GRAD_BUCKET));
  r.set_gather_peak_bytes(Kind(m, Buf::GATHER_BUFFER));
  r.set_secondary_bytes(Kind(m, Buf::PARAM_SECONDARY));
  r.set_staging_peak_bytes(Kind(m, Buf::COMM_STAGING));
  r.set_peak_bytes(m.peak_bytes());
  r.set_nvme_bytes(plan.swap().file_bytes() + plan.swap().param_file_bytes());
  r.set_swap_buffer_bytes(Kind(m, Buf::SWAP_BUFFER));
  r.set_frozen_bytes(Kind(m, Buf::FROZEN_WEIGHTS));
  // The copy (runtime/worker/trainer_memory_copy.cc): the optimizer states, the master as the
  // rank holds it (in fp32 the parameters themselves: all of them, or at stage 3 the shard), and
  // at stage 3 the persistent parameters, which no step gathers (at stages 1-2 in mixed precision
  // the restored ranks gather the others' 16-bit parts instead).
  const bool fp32 = plan.settings().model_dtype() == proto::DT_F32;
  const bool stage3 = plan.settings().zero_stage() == 3;
  const int64_t master =
      fp32 ? (stage3 ? Kind(m, Buf::PARAM_SHARD) : 0) : Kind(m, Buf::MASTER_WEIGHTS);
  int64_t persistent = 0;  // the units' own sizes, without the PARAM_FULL buffer's padding
  for (const proto::PartitionUnit& u : plan.partition().units())
    if (u.persistent()) persistent += u.count() * ProtoDTypeSize(plan.settings().model_dtype());
  r.set_copy_bytes(Kind(m, Buf::OPTIMIZER_STATE) + master +
                   (stage3 ? persistent
                    : fp32 ? Kind(m, Buf::PARAM_FULL)
                           : 0));
  std::map<int, proto::CommVolume> by_kind;  // ordered by instruction kind
  for (const proto::Instruction& ins : rp.instructions()) {
    if (!IsCollective(ins.kind()) && ins.kind() != proto::Instruction::SEND) continue;
    proto::CommVolume& v = by_kind[ins.kind()];
    v.set_kind(proto::Instruction::Kind_Name(ins.kind()));
    v.set_calls(v.calls() + 1);
    v.set_payload_bytes(v.payload_bytes() +
                        ins.collective().count() * ProtoDTypeSize(ins.collective().dtype()));
    v.set_sent_bytes(v.sent_bytes() + CollectiveSentBytes(plan, ins, rp.rank()));
  }
  for (auto& [kind, v] : by_kind) {
    r.set_comm_sent_bytes(r.comm_sent_bytes() + v.sent_bytes());
    *r.add_comm() = v;
  }
  return r;
}

namespace {

// What ZeRO splits P / N stands for: P over the dp ranks, with expert parallelism the experts'
// part over the dp / ep ranks holding them (rounded down, as P / N).
int64_t PerRank(const proto::Plan& plan, int64_t bytes_per_param) {
  const int64_t n = plan.topology().dp(), ep = std::max(1, plan.topology().ep());
  int64_t dense = 0, expert = 0;
  for (const proto::PlanParam& q : plan.model().params())
    (q.expert() ? expert : dense) += q.numel();
  return bytes_per_param * dense / n + bytes_per_param * expert / (n / ep);
}

void Estimates(const proto::Plan& plan, proto::PlanSummary* s) {
  const proto::PlanSettings& c = plan.settings();
  const int64_t psi = plan.model().num_parameters(), n = plan.topology().dp();
  const int64_t p = ProtoDTypeSize(c.model_dtype()), g = p;
  const int64_t k = (c.model_dtype() == proto::DT_F32 ? 0 : 4) + 4 * c.optimizer_states();
  int64_t paper = 0;
  switch (c.zero_stage()) {
    case 0:
      paper = (p + g + k) * psi;
      break;
    case 1:
      paper = (p + g) * psi + PerRank(plan, k);
      break;
    case 2:
      paper = p * psi + PerRank(plan, g + k);
      break;
    default:
      paper = PerRank(plan, p + g + k);
      break;
  }
  s->set_paper_model_state_bytes(paper);
  if (c.zero_stage() == 2) {
    s->set_deepspeed_estimate_bytes(2 * psi + PerRank(plan, 18));
    s->set_deepspeed_estimate_formula("2P + 18P/G");
  } else if (c.zero_stage() == 3) {
    s->set_deepspeed_estimate_bytes(4 * plan.model().largest_block_parameters() +
                                    PerRank(plan, 18));
    s->set_deepspeed_estimate_formula("4L + 18P/G");
  }
  // With the optimizer (and at stage 3 the parameters) offloaded, DeepSpeed's estimator's
  // offload rows (deepspeed.md 3.5, one node): it has none for NVMe, so the CPU rows stand in.
  if (c.optimizer_swap().enabled()) {
    const int64_t largest = plan.model().largest_block_parameters();
    const bool params = c.optimizer_swap().params();
    if (c.zero_stage() == 3) {
      s->set_deepspeed_offload_device_bytes(params ? 4 * largest : 4 * largest + 2 * psi / n);
      s->set_deepspeed_offload_host_bytes((params ? 18 : 16) * psi * 3 / 2);
      s->set_deepspeed_offload_formula(params ? "ZeRO-3, optimizer + params offloaded: 4L device, "
                                                "18P x 1.5 host"
                                              : "ZeRO-3, optimizer offloaded: 4L + 2P/G device, "
                                                "16P x 1.5 host");
    } else {
      s->set_deepspeed_offload_device_bytes(2 * psi);
      s->set_deepspeed_offload_host_bytes(psi * std::max<int64_t>(4 * n, 16) * 3 / 2);
      s->set_deepspeed_offload_formula(
          "ZeRO-2, optimizer offloaded: 2P device, P max(4G, 16) x 1.5 host");
    }
  }
  const int64_t factor = c.zero_stage() == 3 ? 3 : 2;
  // Each group's ring moves (N - 1) / N of what it reduces.
  const int64_t ep = std::max(1, plan.topology().ep()), edp = n / ep;
  int64_t dense = 0, expert = 0;
  for (const proto::PlanParam& q : plan.model().params())
    (q.expert() ? expert : dense) += q.numel();
  s->set_paper_comm_bytes(factor * (dense * (n - 1) / n + expert * (edp - 1) / edp) *
                          ProtoDTypeSize(c.comm_dtype()));
}

// Korthikanti et al. (arXiv 2205.05198, Table 2): one layer's 16-bit activations for sequence
// s, micro-batch b, hidden h, heads a and tensor-parallel size t.
void ActivationFormulas(const proto::Plan& plan, proto::PlanSummary* s) {
  const proto::PlanModel& m = plan.model();
  const double sq = plan.settings().seq_len(), b = plan.settings().micro_batch_size();
  const double h = m.n_embd(), a = m.n_head();
  // The plan's per-block activations; the first and last blocks are the embedding and head.
  for (const proto::PlanBuffer& buf : plan.buffers()) {
    if (buf.kind() != proto::PlanBuffer::ACTIVATIONS || buf.name().rfind("activations.block", 0))
      continue;
    const int block = std::atoi(buf.name().c_str() + std::strlen("activations.block"));
    if (block >= 0 && block < m.n_layer())  // transformer layers, not the embedding or head
      s->set_layer_activation_bytes(std::max(s->layer_activation_bytes(), buf.bytes()));
  }
  if (h <= 0 || a <= 0) return;
  const double t = std::max(2, plan.topology().tp()), sbh = sq * b * h, att = 5 * a * sq / h;
  const std::string tp = "TP " + std::to_string(static_cast<int>(t));
  auto add = [s](const std::string& setting, const char* formula, double bytes) {
    proto::ActivationFormula* f = s->add_activation_formulas();
    f->set_setting(setting);
    f->set_formula(formula);
    f->set_bytes(static_cast<int64_t>(bytes));
  };
  add("no parallelism", "sbh(34+5as/h)", sbh * (34 + att));
  add(tp, "sbh(10+24/t+5as/(ht))", sbh * (10 + 24 / t + att / t));
  add(tp + " + SP", "sbh(34/t+5as/(ht))", sbh * (34 / t + att / t));
  add(tp + " + SP + selective recompute", "34sbh/t", 34 * sbh / t);
  add("full recompute", "2sbh", 2 * sbh);
  add("full recompute, " + tp + " + SP/partition", "2sbh/t", 2 * sbh / t);
  for (const proto::PlanBuffer& buf : plan.buffers())
    if (buf.name() == "activations.recompute") s->set_recompute_arena_bytes(buf.bytes());
  if (plan.ranks_size() > 0)
    for (const proto::Instruction& in : plan.ranks(0).instructions())
      if (in.kind() == proto::Instruction::CHECKPOINT_STASH && in.micro_batch() == 0)
        s->set_partitioned_checkpoints(s->partitioned_checkpoints() + 1);
  if (plan.topology().tp() < 2) return;
  // Bytes each rank sends per layer and micro-batch, in units of (t-1)/t x bsh x 4 (fp32):
  // an all-reduce 2, an all-gather or reduce-scatter 1.
  const bool full = plan.settings().recompute() == "full";
  const bool sp = plan.settings().sequence_parallel();
  // TP: 4 all-reduces. SP: 4 gathers + 4 scatters, and 2 gathers again in backward. Full
  // recompute runs the forward's collectives once more (SP: instead of the 2 gathers).
  const double units = full ? 12 : sp ? 10 : 8;
  s->set_megatron_tp_bytes(static_cast<int64_t>(units * (t - 1) / t * m.n_layer() * sbh * 4 *
                                                plan.settings().gradient_accumulation_steps()));
  std::string f = sp ? "SP: 4 all-gathers + 4 reduce-scatters of bsh per layer (the all-reduces' "
                       "volume)"
                     : "TP: 4 all-reduces of bsh per layer";
  f += full ? ", the forward's again (full recompute)" : sp ? ", 2 gathers again in backward" : "";
  s->set_megatron_tp_formula(f + "; x L x gas, fp32, layers only");
}

// printf into a std::string.
std::string Fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

std::string MiB(int64_t bytes) { return Fmt("%.2f", bytes / 1048576.0); }

bool SameNumbers(const proto::RankSummary& a, const proto::RankSummary& b) {
  proto::RankSummary x = a, y = b;
  x.set_rank(0);
  y.set_rank(0);
  return x.SerializeAsString() == y.SerializeAsString();
}

}  // namespace

proto::PlanSummary SummarizePlan(const proto::Plan& plan, const std::string& job) {
  proto::PlanSummary s;
  s.set_job(job);
  *s.mutable_topology() = plan.topology();
  *s.mutable_settings() = plan.settings();
  s.set_model(plan.model().name());
  s.set_num_parameters(plan.model().num_parameters());
  s.set_frozen_parameters(plan.model().frozen_parameters());
  s.set_hash(HashHex(plan.hash()));
  if (plan.ranks_size() > 0) s.set_instructions_per_rank(plan.ranks(0).instructions_size());
  for (const proto::RankPlan& rp : plan.ranks()) *s.add_ranks() = SummarizeRank(plan, rp);
  Estimates(plan, &s);
  ActivationFormulas(plan, &s);
  return s;
}

namespace {

// The job's settings, one line per concern.
std::string FormatSettings(const proto::PlanSummary& s) {
  const proto::PlanSettings& c = s.settings();
  std::string out;
  out += Fmt("ds-plan: %s, world %d (dp %d, tp %d, pp %d)\n", s.job().c_str(), s.topology().world(),
             s.topology().dp(), s.topology().tp(), s.topology().pp());
  const std::string frozen =
      s.frozen_parameters() > 0
          ? Fmt(" trained (%.4f%%) + %lld frozen",
                100.0 * s.num_parameters() / double(s.num_parameters() + s.frozen_parameters()),
                (long long)s.frozen_parameters())
          : "";
  out +=
      Fmt("model %s: %lld parameters%s; ZeRO stage %d, %s, %d fp32 optimizer "
          "states/param%s; optimizer on the %s\n",
          s.model().c_str(), (long long)s.num_parameters(), frozen.c_str(), c.zero_stage(),
          proto::DataType_Name(c.model_dtype()).c_str() + 3, c.optimizer_states(),
          c.gradient_clipping() ? ", clipping" : "", c.states_on_device() ? "device" : "host");
  out += Fmt("batch: micro %lld x gas %lld x dp %d = %lld sequences of %lld tokens\n",
             (long long)c.micro_batch_size(), (long long)c.gradient_accumulation_steps(),
             s.topology().dp(), (long long)c.train_batch_size(), (long long)c.seq_len());
  out += Fmt("buckets: reduce %lld, all-gather %lld elements; overlap_comm %s\n",
             (long long)c.reduce_bucket_size(), (long long)c.allgather_bucket_size(),
             c.overlap_comm() ? "on" : "off");
  if (c.zero_stage() == 3)
    out +=
        Fmt("stage 3: prefetch %lld, max live %lld, max reuse distance "
            "%lld, persistence "
            "threshold %lld elements\n",
            (long long)c.prefetch_bucket_size(), (long long)c.max_live_parameters(),
            (long long)c.max_reuse_distance(), (long long)c.param_persistence_threshold());
  out += ZeroPlusPlusLine(c);
  if (c.optimizer_swap().enabled()) {
    const proto::SwapSettings& w = c.optimizer_swap();
    out +=
        Fmt("offload_optimizer nvme: sub_group_size %lld elements, buffer_count %d, "
            "pipeline_read %s, pipeline_write %s\n",
            (long long)w.sub_group_size(), w.buffer_count(), w.pipeline_read() ? "on" : "off",
            w.pipeline_write() ? "on" : "off");
  }
  out += Fmt("plan %s: %lld instructions per rank\n\n", s.hash().c_str(),
             (long long)s.instructions_per_rank());

  return out;
}

// Columns: one per rank, or "each rank" when they all have the same numbers.
std::vector<const proto::RankSummary*> Columns(const proto::PlanSummary& s, bool* same) {
  std::vector<const proto::RankSummary*> cols;
  for (const proto::RankSummary& r : s.ranks())
    if (cols.empty() || !SameNumbers(*cols.front(), r)) cols.push_back(&r);
  *same = cols.size() == 1 && s.ranks_size() > 1;
  if (cols.size() > 1) {
    cols.clear();
    for (const proto::RankSummary& r : s.ranks()) cols.push_back(&r);
  }
  return cols;
}

// Memory per rank beside the ZeRO paper and DeepSpeed's estimator.
std::string FormatMemory(const proto::PlanSummary& s,
                         const std::vector<const proto::RankSummary*>& cols, bool same) {
  const proto::PlanSettings& c = s.settings();
  std::string out;
  out +=
      Fmt("%-34s", c.states_on_device() ? "device memory per rank (MiB)" : "memory per rank (MiB)");
  for (const proto::RankSummary* r : cols)
    out += same ? Fmt("%12s", "each rank") : Fmt("%12s", Fmt("rank %d", r->rank()).c_str());
  out += Fmt("%12s  %s\n", "ZeRO paper", "DeepSpeed estimate");
  auto row = [&](const char* name, int64_t (proto::RankSummary::*get)() const, std::string extra) {
    out += Fmt("  %-32s", name);
    for (const proto::RankSummary* r : cols) out += Fmt("%12s", MiB((r->*get)()).c_str());
    out += extra + "\n";
  };
  row("parameters", &proto::RankSummary::param_bytes, "");
  row("gradients", &proto::RankSummary::grad_bytes, "");
  row("optimizer state (fp32)", &proto::RankSummary::optimizer_bytes, "");
  std::string ds = s.deepspeed_estimate_bytes() > 0 ? MiB(s.deepspeed_estimate_bytes()) + " (" +
                                                          s.deepspeed_estimate_formula() + ")"
                                                    : "- (none for this stage)";
  row("model states", &proto::RankSummary::model_state_bytes,
      Fmt("%12s  %s", MiB(s.paper_model_state_bytes()).c_str(), ds.c_str()));
  if (cols.front()->frozen_bytes() > 0)
    row("frozen weights (fp32)", &proto::RankSummary::frozen_bytes,
        "  LoRA's base model: no gradients, no optimizer state");
  row("activations (peak)", &proto::RankSummary::activation_peak_bytes, "");
  row("activation gradients", &proto::RankSummary::activation_grad_bytes, "");
  row("gradient buckets (peak)", &proto::RankSummary::bucket_peak_bytes, "");
  row("gathered parameters (peak)", &proto::RankSummary::gather_peak_bytes, "");
  if (cols.front()->secondary_bytes() > 0)
    row("hpZ secondary partition", &proto::RankSummary::secondary_bytes,
        "  each unit's 1/hpz slice, kept from its first gather of the step");
  row("collective staging (peak)", &proto::RankSummary::staging_peak_bytes, "");
  if (c.optimizer_swap().enabled()) {
    row("swap buffers (peak)", &proto::RankSummary::swap_buffer_bytes, "");
    // In fp32 the master is the parameters: swapped with them, else in memory.
    const bool fp32 = s.settings().model_dtype() == proto::DT_F32;
    const bool params = s.settings().optimizer_swap().params();
    const char* what =
        fp32 ? (params ? "  fp32 parameters (the master) and optimizer state: not in memory"
                       : "  optimizer state: not in memory")
             : (params ? "  fp32 master, optimizer state, 16-bit parameters: not in memory"
                       : "  fp32 master and optimizer state: not in memory");
    row("on NVMe (swap files)", &proto::RankSummary::nvme_bytes, what);
  }
  row("peak total", &proto::RankSummary::peak_bytes, "");
  if (c.in_memory_interval() > 0) {
    const int64_t every = c.in_memory_interval();
    const int64_t copy = cols.front()->copy_bytes();
    row("in-memory copy (agents' memory)", &proto::RankSummary::copy_bytes,
        Fmt("  every %lld step(s) to its node's agent and the next node's (%s MiB per step "
            "to each); an agent keeps the last 2 of its ranks' and 3 of the previous node's",
            static_cast<long long>(every), MiB(copy / every).c_str()));
  }
  if (!s.deepspeed_offload_formula().empty())
    out +=
        Fmt("  DeepSpeed's estimator has no NVMe row; its CPU-offload one (%s) gives %s MiB device "
            "per rank, %s MiB host per node\n",
            s.deepspeed_offload_formula().c_str(), MiB(s.deepspeed_offload_device_bytes()).c_str(),
            MiB(s.deepspeed_offload_host_bytes()).c_str());

  return out;
}

std::string FormatActivations(const proto::PlanSummary& s) {
  std::string out;
  if (s.layer_activation_bytes() > 0) {
    out += Fmt("\nactivations of one transformer layer: %s MiB planned (in the graph's dtypes)\n",
               MiB(s.layer_activation_bytes()).c_str());
    if (s.recompute_arena_bytes() > 0)
      out +=
          Fmt("  recompute (%s): one segment's recomputed tensors share %s MiB\n",
              s.settings().recompute() == "full"        ? "full"
              : s.settings().recompute() == "selective" ? "selective, and sequence-parallel gathers"
                                                        : "sequence-parallel gathers",
              MiB(s.recompute_arena_bytes()).c_str());
    if (s.partitioned_checkpoints() > 0)
      out +=
          Fmt("  partition_activations: %d block input%s kept as 1/%d slices, all-gathered "
              "over tp before each recompute\n",
              s.partitioned_checkpoints(), s.partitioned_checkpoints() == 1 ? "" : "s",
              s.topology().tp());
    for (const proto::ActivationFormula& f : s.activation_formulas())
      out += Fmt("  %-36s %-24s %10s MiB (16-bit, Korthikanti et al.)\n", f.setting().c_str(),
                 f.formula().c_str(), MiB(f.bytes()).c_str());
  }
  return out;
}

}  // namespace

std::string FormatPlanSummary(const proto::PlanSummary& s) {
  const proto::PlanSettings& c = s.settings();
  bool same = false;
  const std::vector<const proto::RankSummary*> cols = Columns(s, &same);
  std::string out = FormatSettings(s) + FormatMemory(s, cols, same) + FormatActivations(s);
  out += Fmt("\n%-34s%7s %12s %9s\n",
             same ? "communication per step, each rank" : "communication per step, rank 0", "calls",
             "payload MiB", "sent MiB");
  const proto::RankSummary& r0 = *cols.front();
  for (const proto::CommVolume& v : r0.comm())
    out += Fmt("  %-32s%7lld %12s %9s\n", v.kind().c_str(), (long long)v.calls(),
               MiB(v.payload_bytes()).c_str(), MiB(v.sent_bytes()).c_str());
  out += Fmt("  %-32s%7s %12s %9s   ZeRO paper: %s MiB (%s)\n", "total sent", "", "",
             MiB(r0.comm_sent_bytes()).c_str(), MiB(s.paper_comm_bytes()).c_str(),
             c.zero_stage() == 3 ? "3P(N-1)/N" : "2P(N-1)/N");
  int64_t tp_sent = 0;
  for (const proto::CommVolume& v : r0.comm())
    if (v.kind().rfind("ACT_", 0) == 0 || v.kind() == "TP_GRAD_ALL_REDUCE")
      tp_sent += v.sent_bytes();
  if (s.megatron_tp_bytes() > 0)
    out += Fmt("  %-32s%7s %12s %9s   Megatron: %s MiB (%s)\n", "tensor-parallel sent", "", "",
               MiB(tp_sent).c_str(), MiB(s.megatron_tp_bytes()).c_str(),
               s.megatron_tp_formula().c_str());
  return out;
}

}  // namespace ds::plan
