#include "launcher/coordinator/rendezvous.h"

#include <cstdio>

#include "runtime/base/logging.h"

namespace ds::launcher {

std::string FormatSeconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", d.count() / 1000.0);
  return buf;
}

void Rendezvous::Open(int number, SteadyTime now) {
  round_ = number;
  opened_at_ = now;
  closed_at_ = SteadyTime();
  last_call_started_ = false;
  closed_ = false;
  error_ = OkStatus();
  joined_.clear();
  members_.clear();
  expected_.clear();
  world_size_ = 0;
}

std::vector<int> Rendezvous::Awaited() const {
  std::vector<int> awaited;
  for (int index : expected_)
    if (!joined_.count(index) && !lost_.count(index)) awaited.push_back(index);
  return awaited;
}

int Rendezvous::NodeIndex(const std::string& name) const {
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    if (config_.nodes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<uint64_t> Rendezvous::Join(int node_index, const JoinRequest& request, SteadyTime now) {
  const std::string current = "the current round is " + std::to_string(round_);
  if (request.round != 0 && request.round < round_) {
    return FailedPreconditionError("rendezvous round " + std::to_string(request.round) +
                                   " is over; " + current);
  }
  if (request.round > round_) {
    return FailedPreconditionError("rendezvous round " + std::to_string(request.round) +
                                   " does not exist; " + current);
  }
  if (!error_.ok()) return error_;
  if (closed_) {
    return FailedPreconditionError("rendezvous round " + std::to_string(round_) + " is closed (" +
                                   std::to_string(members_.size()) + " nodes); " + current);
  }
  const NodeSpec& spec = config_.nodes[node_index];
  int slots = spec.slots > 0 ? spec.slots : request.slots;
  if (spec.slots > 0 && request.slots > 0 && request.slots != spec.slots) {
    return InvalidArgumentError("node " + spec.name + " joined with " +
                                std::to_string(request.slots) + " slots; the hostfile gives " +
                                std::to_string(spec.slots));
  }
  if (slots <= 0) {
    return InvalidArgumentError("node " + spec.name +
                                ": no slot count (the hostfile gives none and the agent sent " +
                                std::to_string(request.slots) + ")");
  }
  lost_.erase(node_index);
  Joined& entry = joined_[node_index];
  entry.request = request;
  entry.slots = slots;
  entry.ticket = next_ticket_++;
  if (!last_call_started_ && static_cast<int>(joined_.size()) >= config_.min_nodes) {
    last_call_started_ = true;
    last_call_deadline_ = now + config_.last_call;
  }
  return entry.ticket;
}

void Rendezvous::Leave(int node_index, uint64_t ticket, SteadyTime now) {
  if (closed_ || !error_.ok()) return;
  auto it = joined_.find(node_index);
  if (it == joined_.end() || it->second.ticket != ticket) return;
  joined_.erase(it);
  // Below min_nodes again: the last call starts over when min_nodes is reached again.
  if (static_cast<int>(joined_.size()) < config_.min_nodes) last_call_started_ = false;
}

bool Rendezvous::Evaluate(SteadyTime now) {
  if (closed_ || !error_.ok() || round_ == 0) return false;
  const int joined = static_cast<int>(joined_.size());
  const bool deadline_passed = now >= opened_at_ + config_.join_timeout;
  // Every node that is not lost joined: no reason to wait for the last call.
  const int alive = static_cast<int>(config_.nodes.size() - lost_.size());
  const bool last_call_over = last_call_started_ && now >= last_call_deadline_ && Awaited().empty();
  if (joined >= config_.max_nodes || (joined >= config_.min_nodes && joined >= alive) ||
      (joined >= config_.min_nodes && (deadline_passed || last_call_over))) {
    Close(now);
    return true;
  }
  if (!deadline_passed) return false;
  error_ = DeadlineExceededError("rendezvous round " + std::to_string(round_) + ": " +
                                 std::to_string(joined) + "/" + std::to_string(config_.max_nodes) +
                                 " nodes joined within " + FormatSeconds(config_.join_timeout) +
                                 ", " + Describe());
  DS_LOG_ERROR("coord", "{}", error_.message());
  return true;
}

void Rendezvous::Close(SteadyTime now) {
  closed_ = true;
  closed_at_ = now;
  members_.clear();
  int next_rank = 0;
  std::string summary;
  for (const auto& [index, entry] : joined_) {
    RoundMember m;
    m.node_index = index;
    m.node_rank = static_cast<int>(members_.size());
    m.first_rank = next_rank;
    m.slots = entry.slots;
    m.advertise_addr = entry.request.advertise_addr;
    m.state_store_port = entry.request.state_store_port;
    m.held_copies = entry.request.held_copies;
    next_rank += entry.slots;
    members_.push_back(m);
    if (members_.size() > 8) continue;  // the log line names the first 8 nodes
    if (!summary.empty()) summary += ", ";
    summary +=
        config_.nodes[index].name + (entry.slots == 1 ? ": rank " + std::to_string(m.first_rank)
                                                      : ": ranks " + std::to_string(m.first_rank) +
                                                            "-" + std::to_string(next_rank - 1));
  }
  world_size_ = next_rank;
  if (members_.size() > 8) summary += ", ...";
  DS_LOG_INFO("coord", "rendezvous round {} closed: {} nodes, world size {} ({})", round_,
              members_.size(), world_size_, summary);
}

const RoundMember* Rendezvous::FindMember(int node_index) const {
  for (const RoundMember& m : members_) {
    if (m.node_index == node_index) return &m;
  }
  return nullptr;
}

std::string Rendezvous::Describe() const {
  std::string missing;
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    if (joined_.count(static_cast<int>(i))) continue;
    if (!missing.empty()) missing += ", ";
    missing += config_.nodes[i].name;
  }
  std::string text;
  if (config_.min_nodes < config_.max_nodes) {
    text = "at least " + std::to_string(config_.min_nodes) + " needed, ";
  }
  return text + "missing: " + (missing.empty() ? "none" : missing);
}

}  // namespace ds::launcher
