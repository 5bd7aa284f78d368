#include "parallel/pipeline/pipe_streams.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

namespace ds::parallel {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

class RankBuilder {
 public:
  RankBuilder(const PipeOrders& o, const std::vector<PipeBoundary>& b,
              const std::vector<int>& nodes, int rank)
      : o_(o), b_(b), nodes_(nodes), r_(rank), free_(o.chunks), needed_(o.chunks, 0) {}

  void Run() {
    for (const PipeOp& op : o_.ops[r_]) {
      if (op.kind == PipeOp::kForward)
        Forward(op.micro, op.chunk);
      else if (op.kind == PipeOp::kBackwardWeight)
        Weight(op.micro, op.chunk);
      else
        Backward(op.micro, op.chunk, op.kind == PipeOp::kBackwardInput);
    }
  }
  std::vector<Ins>& out() { return out_; }
  const std::vector<int>& needed() const { return needed_; }

 private:
  int Last() const { return o_.stages * o_.chunks - 1; }
  int RankOf(int vs) const { return vs % o_.stages; }

  Ins Base(Ins::Kind kind, int micro, int chunk, int slot) const {
    Ins in;
    in.set_kind(kind);
    in.set_micro_batch(micro);
    in.set_chunk(chunk);
    in.set_slot(slot);
    return in;
  }
  // SENDs or RECVs of boundary `at`'s tensors (`tensor` picks which), with `peer` on the link.
  std::vector<int> P2p(Ins::Kind kind, int micro, int chunk, int slot, int at, bool grad, int peer,
                       const std::string& link, const std::vector<int> PipeBoundary::*tensor) {
    std::vector<int> idx;
    const PipeBoundary& b = b_[at];
    for (size_t k = 0; k < (b.*tensor).size(); ++k) {
      Ins in = Base(kind, micro, chunk, slot);
      in.mutable_activation()->set_tensor((b.*tensor)[k]);
      in.mutable_activation()->set_grad(grad);
      proto::Collective* c = in.mutable_collective();
      c->set_group(link);
      c->set_peer(peer);
      c->set_count(b.count[k]);
      c->set_dtype(proto::DT_F32);
      c->set_bucket(-1);
      c->set_placement(proto::HOST);
      in.set_async(true);
      idx.push_back(static_cast<int>(out_.size()));
      out_.push_back(std::move(in));
    }
    return idx;
  }
  void Compute(Ins in, int vs, const std::vector<int>& waits) {
    in.set_node_begin(0);
    in.set_node_end(nodes_[vs]);
    for (int w : waits) in.add_wait_for(w);
    out_.push_back(std::move(in));
  }
  void Forward(int micro, int chunk) {
    const int vs = chunk * o_.stages + r_;
    std::set<int>& free = free_[chunk];
    int slot = needed_[chunk];
    if (!free.empty()) {
      slot = *free.begin();
      free.erase(free.begin());
    } else {
      ++needed_[chunk];
    }
    slot_of_[{micro, chunk}] = slot;
    std::vector<int> waits = sent_[{chunk, slot, false}];  // the slot's last activations out
    if (vs > 0) {
      const int from = RankOf(vs - 1);
      for (int i : P2p(Ins::RECV, micro, chunk, slot, vs - 1, false, from, PipeLinkName(from, r_),
                       &PipeBoundary::recv))
        waits.push_back(i);
    }
    if (chunk == 0) out_.push_back(Base(Ins::LOAD_MICROBATCH, micro, chunk, slot));
    Ins f = Base(Ins::FORWARD, micro, chunk, slot);
    f.set_computes_loss(vs == Last());
    Compute(std::move(f), vs, waits);
    if (vs < Last()) {
      const int to = RankOf(vs + 1);
      sent_[{chunk, slot, false}] = P2p(Ins::SEND, micro, chunk, slot, vs, false, to,
                                        PipeLinkName(r_, to), &PipeBoundary::send);
    }
  }
  // The whole backward, or (zb-h1) its input half: the slot stays taken until the weight half.
  void Backward(int micro, int chunk, bool input_only) {
    const int vs = chunk * o_.stages + r_;
    const int slot = slot_of_.at({micro, chunk});
    std::vector<int> waits = sent_[{chunk, slot, true}];  // the slot's last gradients out
    if (vs < Last()) {
      const int from = RankOf(vs + 1);
      for (int i : P2p(Ins::RECV, micro, chunk, slot, vs, false, from, PipeLinkName(from, r_),
                       &PipeBoundary::send_grad))
        waits.push_back(i);
    }
    Ins b = Base(input_only ? Ins::BACKWARD_INPUT : Ins::BACKWARD, micro, chunk, slot);
    b.set_mean_over(o_.micro_batches);
    Compute(std::move(b), vs, waits);
    if (vs > 0) {
      const int to = RankOf(vs - 1);
      sent_[{chunk, slot, true}] = P2p(Ins::SEND, micro, chunk, slot, vs - 1, true, to,
                                       PipeLinkName(r_, to), &PipeBoundary::recv);
    }
    if (!input_only) free_[chunk].insert(slot);
  }
  // zb-h1's weight half: the parameters' gradients of the micro-batch, then its slot is free.
  void Weight(int micro, int chunk) {
    const int vs = chunk * o_.stages + r_;
    const int slot = slot_of_.at({micro, chunk});
    Ins w = Base(Ins::BACKWARD_WEIGHT, micro, chunk, slot);
    w.set_mean_over(o_.micro_batches);
    Compute(std::move(w), vs, {});
    free_[chunk].insert(slot);
  }

  const PipeOrders& o_;
  const std::vector<PipeBoundary>& b_;
  const std::vector<int>& nodes_;
  const int r_;
  std::vector<Ins> out_;
  std::vector<std::set<int>> free_;  // per chunk
  std::vector<int> needed_;          // per chunk
  std::map<std::pair<int, int>, int> slot_of_;
  std::map<std::tuple<int, int, bool>, std::vector<int>> sent_;  // (chunk, slot, grad) -> SENDs
};

// Each RECV moved as early as its buffers allow, so the transfer overlaps the compute before
// it: just after the last BACKWARD of its chunk and slot (the previous micro-batch there reads
// them until then), and after the RECV before it on its link (a link's receives stay in the
// sender's order). Waits are renumbered.
std::vector<Ins> HoistRecvs(std::vector<Ins> in) {
  std::vector<int> order;                            // old indices in their new order
  std::map<std::string, int> last_on_link;           // link -> position in `order` of its last RECV
  std::map<std::pair<int, int>, int> last_backward;  // (chunk, slot) -> position in `order`
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    const Ins& x = in[i];
    if (x.kind() != Ins::RECV) {
      if (x.kind() == Ins::BACKWARD || x.kind() == Ins::BACKWARD_INPUT ||
          x.kind() == Ins::BACKWARD_WEIGHT)  // the slot's last reader
        last_backward[{x.chunk(), x.slot()}] = static_cast<int>(order.size());
      order.push_back(i);
      continue;
    }
    int at = 0;
    if (auto b = last_backward.find({x.chunk(), x.slot()}); b != last_backward.end())
      at = b->second + 1;
    if (auto l = last_on_link.find(x.collective().group()); l != last_on_link.end())
      at = std::max(at, l->second + 1);
    order.insert(order.begin() + at, i);
    // What sat at or after `at` moved one on.
    for (auto& [link, pos] : last_on_link)
      if (pos >= at) ++pos;
    for (auto& [key, pos] : last_backward)
      if (pos >= at) ++pos;
    last_on_link[x.collective().group()] = at;
  }
  std::vector<int> moved(in.size());
  for (size_t k = 0; k < order.size(); ++k) moved[order[k]] = static_cast<int>(k);
  std::vector<Ins> out;
  for (int i : order) {
    Ins x = std::move(in[i]);
    for (int& w : *x.mutable_wait_for()) w = moved[w];
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace

std::string PipeLinkName(int from, int to) { return "pipe." + Str(from) + "-" + Str(to); }

StatusOr<PipeStreams> PipelineStreams(const PipeOrders& o,
                                      const std::vector<PipeBoundary>& boundaries,
                                      const std::vector<int>& stage_nodes) {
  const int stages = o.stages * o.chunks;
  if (static_cast<int>(boundaries.size()) != stages - 1 ||
      static_cast<int>(stage_nodes.size()) != stages)
    return InvalidArgumentError("pipeline: " + Str(stages) + " virtual stages need " +
                                Str(stages - 1) + " boundaries and " + Str(stages) +
                                " node counts, got " + Str(boundaries.size()) + " and " +
                                Str(stage_nodes.size()));
  for (size_t s = 0; s < boundaries.size(); ++s) {
    const PipeBoundary& b = boundaries[s];
    if (b.recv.size() != b.send.size() || b.send_grad.size() != b.send.size() ||
        b.count.size() != b.send.size())
      return InvalidArgumentError("pipeline: boundary " + Str(s) + " lists differ in length");
  }
  PipeStreams out;
  for (int r = 0; r < o.stages; ++r) {
    RankBuilder b(o, boundaries, stage_nodes, r);
    b.Run();
    out.ranks.push_back(HoistRecvs(std::move(b.out())));
    out.slots.push_back(b.needed());
  }
  return out;
}

namespace {

// One rank's queue of async point-to-point operations on one link group.
using Queue = std::deque<int>;

}  // namespace

StreamSimulation SimulateStreams(const PipeStreams& s) {
  const int p = static_cast<int>(s.ranks.size());
  std::vector<size_t> pc(p, 0);
  std::vector<std::set<int>> done(p);
  std::map<std::pair<int, std::string>, Queue> queues;  // (rank, group) -> pending, in order
  StreamSimulation sim;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r)
      for (; pc[r] < s.ranks[r].size(); ++pc[r], moved = true) {
        const Ins& in = s.ranks[r][pc[r]];
        bool ready = true;
        for (int w : in.wait_for()) ready = ready && done[r].count(w);
        if (!ready) break;
        const int idx = static_cast<int>(pc[r]);
        if (in.kind() == Ins::SEND || in.kind() == Ins::RECV)
          queues[{r, in.collective().group()}].push_back(idx);
        else
          done[r].insert(idx);
      }
    // A SEND at the head of its queue meets the peer's RECV at the head of the same link's.
    for (auto& [key, q] : queues) {
      if (q.empty()) continue;
      const int r = key.first;
      const Ins& head = s.ranks[r][q.front()];
      if (head.kind() != Ins::SEND) continue;
      const int peer = head.collective().peer();
      Queue& other = queues[{peer, key.second}];
      if (other.empty()) continue;
      const Ins& recv = s.ranks[peer][other.front()];
      if (recv.kind() != Ins::RECV || recv.collective().peer() != r ||
          recv.collective().count() != head.collective().count() ||
          recv.micro_batch() != head.micro_batch()) {
        sim.stuck = "link " + key.second + ": rank " + Str(r) + " sends micro-batch " +
                    Str(head.micro_batch()) + " (" + Str(head.collective().count()) +
                    " elements) where rank " + Str(peer) + " expects micro-batch " +
                    Str(recv.micro_batch()) + " (" + Str(recv.collective().count()) + ")";
        return sim;
      }
      done[r].insert(q.front());
      done[peer].insert(other.front());
      q.pop_front();
      other.pop_front();
      moved = true;
    }
  }
  for (int r = 0; r < p; ++r)
    if (pc[r] < s.ranks[r].size()) {
      sim.stuck = "rank " + Str(r) + " waits at instruction " + Str(pc[r]) + " (" +
                  Ins::Kind_Name(s.ranks[r][pc[r]].kind()) + ")";
      return sim;
    }
  for (const auto& [key, q] : queues)
    if (!q.empty()) {
      sim.stuck = "rank " + Str(key.first) + "'s " + key.second + " queue never drains";
      return sim;
    }
  sim.finished = true;
  return sim;
}

}  // namespace ds::parallel
