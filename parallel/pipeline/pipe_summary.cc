#include "parallel/pipeline/pipe_summary.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>

#include "parallel/pipeline/pipe_schedule.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/plan/plan_view.h"

namespace ds::parallel {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

// "embeddings + blocks 0-1 + head", "block 1, block 3 + head" (interleaved chunks): the blocks
// its parameters are read in, runs of consecutive ones.
std::string Blocks(const proto::PlanModel& stage, int n_layer) {
  std::set<int> blocks;
  for (const proto::PlanParam& p : stage.params()) {
    blocks.insert(p.first_block());
    blocks.insert(p.last_block());
  }
  std::string out;
  if (blocks.count(-1)) out = "embeddings";
  for (auto it = blocks.lower_bound(0); it != blocks.end() && *it < n_layer;) {
    int last = *it;
    auto next = std::next(it);
    while (next != blocks.end() && *next == last + 1 && *next < n_layer) last = *next++;
    out += std::string(out.empty() ? "" : (*it == 0 ? " + " : ", ")) +
           (*it == last ? "block " + Str(*it) : "blocks " + Str(*it) + "-" + Str(last));
    it = next;
  }
  if (blocks.count(n_layer)) out += (out.empty() ? "" : " + ") + std::string("head");
  return out;
}

std::string GroupKind(const proto::Plan& plan, const std::string& name) {
  for (const proto::ProcessGroup& g : plan.groups())
    if (g.name() == name) return g.kind();
  return "";
}

void Traffic(const proto::Plan& plan, const proto::RankPlan& rp, proto::StageSummary* s) {
  for (const Ins& in : rp.instructions()) {
    const int64_t sent = plan::CollectiveSentBytes(plan, in, rp.rank());
    if (sent == 0) continue;
    const std::string kind = GroupKind(plan, in.collective().group());
    if (in.kind() == Ins::SEND)
      s->set_p2p_sent_bytes(s->p2p_sent_bytes() + sent);
    else if (kind == "tp" || kind == "kv")
      s->set_tp_sent_bytes(s->tp_sent_bytes() + sent);
    else if (kind == "dp")
      s->set_dp_sent_bytes(s->dp_sent_bytes() + sent);
    else if (kind == "embedding")
      s->set_embedding_sent_bytes(s->embedding_sent_bytes() + sent);
  }
}

void Bubble(const proto::Plan& plan, proto::PipelineSummary* p) {
  plan::PipeScheduleKind kind = plan::PipeScheduleKind::k1F1B;
  plan::ParsePipeSchedule(plan.settings().pipe_schedule(), &kind);
  auto orders = BuildPipelineSchedule(kind, p->stages(), p->micro_batches(), p->virtual_stages());
  if (!orders.ok()) return;
  const PipeCosts costs;  // F = 1, B = 2 (B_in = W = 1)
  const PipeSimulation sim = SimulateSchedule(*orders, costs);
  const double busy =
      static_cast<double>(p->micro_batches()) * orders->chunks * (costs.forward + costs.backward);
  const double idle = BubbleFormula(*orders, costs);
  p->set_bubble_formula(idle / (idle + busy));
  for (double i : sim.idle) p->add_bubble_simulated(sim.makespan > 0 ? i / sim.makespan : 0);
}

std::string Fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, a);
  return buf;
}

std::string MiB(int64_t b) { return Fmt("%.2f", b / 1048576.0); }

}  // namespace

void SummarizePipeline(const proto::Plan& plan, proto::PlanSummary* summary) {
  proto::PipelineSummary* p = summary->mutable_pipeline();
  p->set_schedule(plan.settings().pipe_schedule());
  p->set_stages(plan.topology().pp());
  p->set_virtual_stages(std::max(1, plan.settings().virtual_stages()));
  p->set_micro_batches(static_cast<int>(plan.settings().gradient_accumulation_steps()));
  std::set<std::string> first;
  int64_t params = 0;
  for (int s = 0; s < plan.stages_size(); ++s) {
    const proto::StageLayout& layout = plan.stages(s);
    for (const proto::PlanParam& q : layout.model().params())
      if (s == 0 ? first.insert(q.name()).second : !first.count(q.name())) params += q.numel();
    proto::StageSummary* st = p->add_stage();
    st->set_stage(s);
    st->set_blocks(Blocks(layout.model(), plan.model().n_layer()));
    st->set_parameters(layout.model().num_parameters());
    st->set_flops(layout.flops());
    *st->mutable_slots() = layout.slots();
    for (const proto::RankPlan& rp : plan.ranks()) {
      if (rp.stage() != s) continue;
      const proto::Plan view = plan::RankView(plan, rp.rank());
      *st->mutable_rank() = plan::SummarizeRank(view, rp);
      Traffic(view, rp, st);
      break;  // its first rank
    }
  }
  summary->set_num_parameters(params);
  Bubble(plan, p);
}

std::string FormatPipelineSummary(const proto::PlanSummary& summary) {
  const proto::PipelineSummary& p = summary.pipeline();
  std::string out = "\npipeline: " + p.schedule() + ", " + Str(p.stages()) + " stages";
  if (p.virtual_stages() > 1) out += " x " + Str(p.virtual_stages()) + " chunks";
  out += ", " + Str(p.micro_batches()) + " micro-batches per step\n";
  char line[512];
  std::snprintf(line, sizeof(line), "  %-5s %-34s %10s %7s %6s %10s %10s %9s %9s %9s %9s\n",
                "stage", "blocks", "params (M)", "GFLOP", "slots", "act. MiB", "peak MiB",
                "p2p MiB", "tp MiB", "dp MiB", "emb. MiB");
  out += line;
  double most = 0, least = 0;
  for (const proto::StageSummary& s : p.stage()) {
    most = std::max(most, s.flops());
    least = least == 0 ? s.flops() : std::min(least, s.flops());
    std::string slots;
    for (int k : s.slots()) slots += (slots.empty() ? "" : "+") + Str(k);
    std::snprintf(line, sizeof(line), "  %-5d %-34s %10.3f %7.2f %6s %10s %10s %9s %9s %9s %9s\n",
                  s.stage(), s.blocks().c_str(), s.parameters() / 1e6, s.flops() / 1e9,
                  slots.c_str(), MiB(s.rank().activation_peak_bytes()).c_str(),
                  MiB(s.rank().peak_bytes()).c_str(), MiB(s.p2p_sent_bytes()).c_str(),
                  MiB(s.tp_sent_bytes()).c_str(), MiB(s.dp_sent_bytes()).c_str(),
                  MiB(s.embedding_sent_bytes()).c_str());
    out += line;
  }
  out += "  bubble (idle fraction of a step, F = 1, B = 2): formula " +
         Fmt("%.4f", p.bubble_formula()) + ", simulated per pipeline rank";
  for (double b : p.bubble_simulated()) out += " " + Fmt("%.4f", b);
  out +=
      "\n  (GFLOP: forward and backward of one micro-batch; sent per step by each stage's "
      "first rank; activations count every slot)\n";
  // The schedule waits for its slowest stage: say when the split leaves them uneven.
  if (least > 0 && most > 1.2 * least) {
    out += "  note: the stages' compute differs by " + Fmt("%.2f", most / least) +
           "x; the others idle for the slowest";
    out += summary.settings().partition_method() == "flops"
               ? " (the blocks allow no better split)\n"
               : ": pipeline.partition_method flops balances the FLOPs\n";
  }
  return out;
}

}  // namespace ds::parallel
