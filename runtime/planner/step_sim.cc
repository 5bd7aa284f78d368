#include "runtime/planner/step_sim.h"

#include <algorithm>
#include <deque>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/core/proto_dtype.h"
#include "runtime/plan/collective_check.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/plan/zeropp_summary.h"
#include "runtime/planner/node_costs.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/planner/transfer_costs.h"

namespace ds::planner {
namespace {

using Ins = proto::Instruction;

bool IsComm(Ins::Kind k) { return plan::IsCollective(k) || k == Ins::SEND || k == Ins::RECV; }

// Per model chunk (one without a pipeline): the node costs of one micro-batch.
using ChunkCosts = std::vector<NodeCosts>;

StatusOr<ChunkCosts> CostRank(const proto::Plan& plan, const Graph& whole,
                              const plan::PlanConfig& config, int rank, const HostRates& rates) {
  DS_ASSIGN_OR_RETURN(RankGraph rg, CutRankGraph(whole, plan.ranks(rank).cut(), config));
  const bool low = plan.settings().model_dtype() != proto::DT_F32;
  const DType matmul = plan.settings().model_dtype() == proto::DT_BF16 ? DType::kBF16 : DType::kF32;
  const DType act = low && !config.on_device ? DType::kBF16 : DType::kF32;
  const int64_t mb = plan.settings().micro_batch_size(), seq = plan.settings().seq_len();
  ChunkCosts out;
  std::vector<const Graph*> graphs;
  if (!rg.chunks.empty()) {
    for (const Graph& g : rg.chunks) graphs.push_back(&g);
  } else {
    graphs.push_back(rg.tp ? &rg.tp->graph : rg.local ? &rg.local->graph : &rg.graph);
  }
  for (const Graph* g : graphs) {
    DS_ASSIGN_OR_RETURN(NodeCosts c, CostNodes(*g, mb, seq, matmul, act, rates));
    out.push_back(std::move(c));
  }
  return out;
}

int64_t Elements(const Ins& in) {
  int64_t n = 0;
  for (const proto::ParamRange& r : in.ranges()) n += r.count();
  return n;
}

// Seconds of a compute-thread instruction on a rank whose costs are `c`.
double ComputeSeconds(const proto::Plan& plan, const Ins& in, const ChunkCosts& c,
                      const HostRates& r) {
  const NodeCosts& n = c[std::min<size_t>(std::max(in.chunk(), 0), c.size() - 1)];
  const int64_t grad = ProtoDTypeSize(plan.settings().model_dtype());
  switch (in.kind()) {
    case Ins::FORWARD:
    case Ins::RECOMPUTE:
      return n.Forward(in.node_begin(), in.node_end());
    case Ins::BACKWARD:
      return n.Backward(in.node_begin(), in.node_end());
    case Ins::BACKWARD_INPUT:
    case Ins::BACKWARD_WEIGHT:
      return 0.5 * n.Backward(in.node_begin(), in.node_end());
    case Ins::OPTIMIZER_STEP:  // master, two states and the gradient read; three written
      return Elements(in) * (28.0 + grad) / (r.optimizer_gbps * 1e9);
    case Ins::ZERO_GRADS:
      return Elements(in) * double(grad) / (r.stream_gbps * 1e9);
    default:
      return 0;
  }
}

std::vector<int> Members(const proto::Plan& plan, const Ins& in, int rank) {
  if (in.kind() == Ins::SEND) return {rank, in.collective().peer()};
  if (in.kind() == Ins::RECV) return {in.collective().peer(), rank};
  return plan::CollectiveMembers(plan, in);
}

struct Issued {
  int index = 0;
  double issue = 0, seconds = 0;
  std::string kind;
};

struct Entry {
  std::vector<int> members;
  std::map<int, Issued> by_rank;
};

struct RankState {
  int pc = 0;
  double compute = 0, comm_free = 0;
  double io_free = 0;              // the swaps' queue (one I/O engine per rank)
  std::map<int, double> done;      // async instruction index -> completion
  std::deque<std::string> fifo;    // issued, unresolved collectives in issue order
  std::set<int> issued;            // instruction indices issued
  std::map<std::string, int> seq;  // per group / link: collectives issued so far
  std::map<std::string, double> kind_s;
  double busy = 0, comm = 0;
  int64_t intra = 0, inter = 0;
};

class Simulation {
 public:
  Simulation(const proto::Plan& plan, const std::vector<int>& node_of, const HostRates& rates,
             std::vector<ChunkCosts> costs, std::vector<double> slowdown)
      : plan_(plan),
        node_of_(node_of),
        rates_(rates),
        costs_(std::move(costs)),
        slowdown_(std::move(slowdown)),
        s_(plan.ranks_size()) {}

  Status Run();
  const std::vector<RankState>& ranks() const { return s_; }

 private:
  bool Step(int r);  // one instruction of rank r; false when blocked or finished
  void Issue(int r, const Ins& in);
  bool ResolveHeads();
  bool ResolvePointToPoint();
  void Occupy(int rank, const Issued& issued, double seconds);
  double CommSeconds(int r, const Ins& in, const std::vector<int>& members);
  double StagedSeconds(int r, const Ins& in);

  const proto::Plan& plan_;
  const std::vector<int>& node_of_;
  const HostRates& rates_;
  std::vector<ChunkCosts> costs_;
  std::vector<double> slowdown_;
  std::vector<RankState> s_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> p2p_;  // SEND / RECV pairs not yet resolved
};

// qgZ: each all-to-all of the hierarchy on its own link class, one after the other.
double Simulation::StagedSeconds(int r, const Ins& in) {
  double seconds = 0;
  for (const plan::StageSends& stage : plan::HierarchySends(plan_, in)) {
    const int p = static_cast<int>(stage.members.size());
    if (p <= 1) continue;
    bool across = false;
    for (int m : stage.members) across = across || node_of_[m] != node_of_[stage.members[0]];
    const LinkRate& link = across ? rates_.inter : rates_.intra;
    const int64_t sent = (p - 1) * stage.per_peer;
    (across ? s_[r].inter : s_[r].intra) += sent;
    seconds += (p - 1) * link.latency_us * 1e-6 + sent / (link.gbps * 1e9);
  }
  return seconds;
}

double Simulation::CommSeconds(int r, const Ins& in, const std::vector<int>& members) {
  const int p = static_cast<int>(members.size());
  if (p <= 1 || in.kind() == Ins::RECV) return 0;
  const double quantization = QuantizationSeconds(plan_, in, rates_);
  if (in.collective().hierarchy_size() > 0) return quantization + StagedSeconds(r, in);
  bool across = false;
  for (int m : members) across = across || node_of_[m] != node_of_[members[0]];
  const LinkRate& link = across ? rates_.inter : rates_.intra;
  const int64_t sent = plan::CollectiveSentBytes(plan_, in, r);
  (across ? s_[r].inter : s_[r].intra) += sent;
  int steps = 2 * (p - 1);
  if (in.kind() == Ins::SEND)
    steps = 1;
  else if (in.collective().rank_counts_size() > 0 || in.kind() == Ins::ACT_ALL_TO_ALL)
    steps = p - 1;
  return quantization + steps * link.latency_us * 1e-6 + sent / (link.gbps * 1e9);
}

void Simulation::Issue(int r, const Ins& in) {
  RankState& st = s_[r];
  const std::vector<int> members = Members(plan_, in, r);
  std::string link = in.collective().group();
  const bool p2p = in.kind() == Ins::SEND || in.kind() == Ins::RECV;
  if (p2p) link = "p2p " + std::to_string(members[0]) + ">" + std::to_string(members[1]);
  const std::string key = link + "#" + std::to_string(st.seq[link]++);
  Entry& e = entries_[key];
  e.members = members;
  const double seconds = CommSeconds(r, in, members);
  e.by_rank[r] = {st.pc, st.compute, seconds, Ins::Kind_Name(in.kind())};
  if (p2p) {
    p2p_.insert(key);  // posted at once: a RECV waits for its SEND, not for the rank's FIFO
  } else {
    st.fifo.push_back(key);
  }
  st.issued.insert(st.pc);
}

// A resolved collective (or point-to-point pair) occupies each member for its whole length:
// the slowest member's share decides it.
void Simulation::Occupy(int rank, const Issued& i, double seconds) {
  s_[rank].comm += seconds;
  s_[rank].kind_s[i.kind] += seconds;
}

bool Simulation::ResolvePointToPoint() {
  bool any = false;
  for (auto it = p2p_.begin(); it != p2p_.end();) {
    Entry& e = entries_[*it];
    if (e.by_rank.size() < 2) {
      ++it;
      continue;
    }
    const Issued &send = e.by_rank[e.members[0]], &recv = e.by_rank[e.members[1]];
    const double end = std::max(send.issue, recv.issue) + std::max(send.seconds, recv.seconds);
    s_[e.members[0]].done[send.index] = end;
    s_[e.members[1]].done[recv.index] = end;
    Occupy(e.members[0], send, std::max(send.seconds, recv.seconds));
    entries_.erase(*it);
    it = p2p_.erase(it);
    any = true;
  }
  return any;
}

bool Simulation::ResolveHeads() {
  bool any = ResolvePointToPoint();
  for (size_t r = 0; r < s_.size(); ++r) {
    if (s_[r].fifo.empty()) continue;
    const std::string key = s_[r].fifo.front();
    Entry& e = entries_[key];
    if (e.by_rank.size() < e.members.size()) continue;
    bool heads = true;
    for (int m : e.members) heads = heads && !s_[m].fifo.empty() && s_[m].fifo.front() == key;
    if (!heads) continue;
    double start = 0, seconds = 0;
    for (int m : e.members) {
      start = std::max({start, e.by_rank[m].issue, s_[m].comm_free});
      seconds = std::max(seconds, e.by_rank[m].seconds);
    }
    for (int m : e.members) {
      Occupy(m, e.by_rank[m], seconds);
      s_[m].comm_free = start + seconds;
      s_[m].done[e.by_rank[m].index] = start + seconds;
      s_[m].fifo.pop_front();
    }
    entries_.erase(key);
    any = true;
  }
  return any;
}

bool Simulation::Step(int r) {
  RankState& st = s_[r];
  const auto& list = plan_.ranks(r).instructions();
  if (st.pc >= list.size()) return false;
  const Ins& in = list[st.pc];
  double t = st.compute;
  for (int j : in.wait_for()) {
    auto it = st.done.find(j);
    if (it == st.done.end()) return false;
    t = std::max(t, it->second);
  }
  st.compute = t;
  if (in.kind() == Ins::SWAP_IN || in.kind() == Ins::SWAP_OUT) {  // queued on the I/O engine
    const double sec = SwapSeconds(plan_, in, rates_);
    st.io_free = std::max(st.compute, st.io_free) + sec;
    st.done[st.pc] = st.io_free;
    if (!in.async()) st.compute = st.io_free;
    st.kind_s[Ins::Kind_Name(in.kind())] += sec;
    ++st.pc;
    return true;
  }
  if (!IsComm(in.kind())) {
    const double sec = ComputeSeconds(plan_, in, costs_[r], rates_) * slowdown_[r];
    st.compute += sec;
    st.busy += sec;
    st.kind_s[Ins::Kind_Name(in.kind())] += sec;
    ++st.pc;
    return true;
  }
  if (!st.issued.count(st.pc)) Issue(r, in);
  while (ResolveHeads()) {
  }
  if (!in.async()) {
    auto it = st.done.find(st.pc);
    if (it == st.done.end()) return false;
    st.compute = std::max(st.compute, it->second);
  }
  ++st.pc;
  return true;
}

Status Simulation::Run() {
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < s_.size(); ++r)
      while (Step(static_cast<int>(r))) progress = true;
    while (ResolveHeads()) progress = true;
  }
  for (size_t r = 0; r < s_.size(); ++r) {
    if (s_[r].pc >= plan_.ranks(r).instructions_size()) continue;
    const Ins& in = plan_.ranks(r).instructions(s_[r].pc);
    return InternalError("cost model: rank " + std::to_string(r) + " cannot pass instruction " +
                         std::to_string(s_[r].pc) + " (" + Ins::Kind_Name(in.kind()) + " on \"" +
                         in.collective().group() + "\"): its collectives do not match");
  }
  return OkStatus();
}

}  // namespace

namespace {

// How much each rank's compute slows: its machine's threads computing at once over its cores,
// when above 1. Who computes at once follows from the step itself (a pipeline's ranks wait in
// its bubbles and leave the cores to the others), so PredictStep plays the step a few times,
// each machine's concurrency taken from the last play: the sum of its ranks' busy fractions
// (every rank busy the first time), damped by half to settle.
std::vector<double> Slowdowns(const std::vector<RankState>* last, const std::vector<double>& prev,
                              const std::vector<int>& host_of, const HostRates& rates) {
  const size_t world = prev.size();
  std::map<int, double> busy;  // per machine: ranks computing at once
  for (size_t r = 0; r < world; ++r) {
    double fraction = 1;
    if (last) {
      const RankState& st = (*last)[r];
      const double end = std::max({st.compute, st.comm_free, st.io_free});
      fraction = end > 0 ? std::min(1.0, st.busy / end) : 1;
    }
    busy[host_of[r]] += fraction;
  }
  std::vector<double> out(world);
  for (size_t r = 0; r < world; ++r) {
    const double share = std::max(1.0, busy[host_of[r]] * rates.threads / rates.cores);
    out[r] = last ? 0.5 * (prev[r] + share) : share;
  }
  return out;
}

StepPrediction Summarize(const std::vector<RankState>& ranks) {
  StepPrediction p;
  double worst = -1;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankState& st = ranks[r];
    const double end = std::max({st.compute, st.comm_free, st.io_free});
    p.intra_bytes = std::max(p.intra_bytes, st.intra);
    p.inter_bytes = std::max(p.inter_bytes, st.inter);
    if (end <= worst) continue;
    worst = end;
    p.slowest_rank = static_cast<int>(r);
    p.step_ms = end * 1e3;
    p.compute_ms = st.busy * 1e3;
    p.comm_ms = st.comm * 1e3;
    p.kind_ms.clear();
    for (const auto& [k, s] : st.kind_s) p.kind_ms[k] = s * 1e3;
  }
  p.exposed_comm_ms = std::max(0.0, p.step_ms - p.compute_ms);
  return p;
}

}  // namespace

StatusOr<StepPrediction> PredictStep(const proto::Plan& plan, const Graph& whole,
                                     const plan::PlanConfig& config,
                                     const std::vector<int>& node_of_rank,
                                     const std::vector<int>& host_of_rank, const HostRates& rates) {
  const int world = plan.ranks_size();
  if (static_cast<int>(node_of_rank.size()) < world ||
      static_cast<int>(host_of_rank.size()) < world)
    return InvalidArgumentError("cost model: " + std::to_string(node_of_rank.size()) +
                                " ranks placed, the plan has " + std::to_string(world));
  std::vector<ChunkCosts> costs(world);
  std::map<std::pair<int, int>, int> first;  // (stage, tp rank) -> the rank costed
  for (int r = 0; r < world; ++r) {
    const proto::RankCut& cut = plan.ranks(r).cut();
    auto [it, fresh] = first.emplace(std::make_pair(cut.stage(), cut.tp_rank()), r);
    if (fresh) {
      DS_ASSIGN_OR_RETURN(costs[r], CostRank(plan, whole, config, r, rates));
    } else {
      costs[r] = costs[it->second];
    }
  }
  std::vector<double> slowdown =
      Slowdowns(nullptr, std::vector<double>(world, 1), host_of_rank, rates);
  // A machine's ranks swap at once (the same plan): each has its share of the device's rate.
  std::map<int, int> on_host;
  int share = 1;
  for (int r = 0; r < world; ++r) share = std::max(share, ++on_host[host_of_rank[r]]);
  HostRates io = rates;
  io.nvme_read_gbps /= share;
  io.nvme_write_gbps /= share;
  std::vector<RankState> last;
  for (int round = 0; round < 4; ++round) {
    if (round > 0) slowdown = Slowdowns(&last, slowdown, host_of_rank, rates);
    Simulation sim(plan, node_of_rank, io, costs, slowdown);
    DS_RETURN_IF_ERROR(sim.Run());
    last = sim.ranks();
  }
  return Summarize(last);
}

}  // namespace ds::planner
