#include "launcher/coordinator/proto_convert.h"

namespace ds::launcher {
namespace {

// Unknown numbers from a newer peer map to the zero ("unknown") value.
template <typename Enum>
Enum EnumFromWire(int value, int max) {
  return static_cast<Enum>(value >= 0 && value <= max ? value : 0);
}

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string>& in) {
  return std::vector<std::string>(in.begin(), in.end());
}

void PositionToProto(const PlanPosition& in, proto::PlanPosition* out) {
  out->set_step(in.step);
  out->set_instruction(in.instruction);
  out->set_kind(in.kind);
  out->set_group(in.group);
  out->set_bytes(in.bytes);
}

PlanPosition PositionFromProto(const proto::PlanPosition& in) {
  return PlanPosition{in.step(), in.instruction(), in.kind(), in.group(), in.bytes()};
}

}  // namespace

void ToProto(const JobSpec& in, proto::JobSpec* out) {
  out->set_job_id(in.job_id);
  for (const std::string& arg : in.worker_argv) out->add_worker_argv(arg);
  for (const auto& [key, value] : in.env) (*out->mutable_env())[key] = value;
  out->set_resume(in.resume);
  out->set_grace_ms(in.grace_ms);
  out->set_heartbeat_interval_ms(in.heartbeat_interval_ms);
}

JobSpec FromProto(const proto::JobSpec& in) {
  JobSpec out;
  out.job_id = in.job_id();
  out.worker_argv = Strings(in.worker_argv());
  out.env = std::map<std::string, std::string>(in.env().begin(), in.env().end());
  out.resume = in.resume();
  out.grace_ms = in.grace_ms();
  out.heartbeat_interval_ms = in.heartbeat_interval_ms();
  return out;
}

void ToProto(const JoinRequest& in, proto::JoinRequest* out) {
  out->set_node_name(in.node_name);
  out->set_advertise_addr(in.advertise_addr);
  out->set_slots(in.slots);
  out->set_round(in.round);
  out->set_agent_pid(in.agent_pid);
  out->set_state_store_port(in.state_store_port);
  for (const StoredCopy& c : in.held_copies) {
    proto::StoredCopy* held = out->add_held_copies();
    held->set_rank(c.rank);
    held->set_step(c.step);
  }
}

JoinRequest FromProto(const proto::JoinRequest& in) {
  JoinRequest out{in.node_name(), in.advertise_addr(), in.slots(), in.round(), in.agent_pid()};
  out.state_store_port = in.state_store_port();
  for (const proto::StoredCopy& c : in.held_copies())
    out.held_copies.push_back({c.rank(), c.step()});
  return out;
}

void ToProto(const JoinResult& in, proto::JoinResponse* out) {
  out->set_round(in.round);
  out->set_node_rank(in.node_rank);
  out->set_num_nodes(in.num_nodes);
  out->set_world_size(in.world_size);
  for (int rank : in.global_ranks) out->add_global_ranks(rank);
  ToProto(in.job, out->mutable_job());
  out->set_advertise_addr(in.advertise_addr);
  for (const std::string& store : in.copy_stores) out->add_copy_stores(store);
  out->set_memory_step(in.memory_step);
  out->set_memory_world(in.memory_world);
  for (const std::string& source : in.memory_sources) out->add_memory_sources(source);
}

JoinResult FromProto(const proto::JoinResponse& in) {
  JoinResult out;
  out.round = in.round();
  out.node_rank = in.node_rank();
  out.num_nodes = in.num_nodes();
  out.world_size = in.world_size();
  out.global_ranks.assign(in.global_ranks().begin(), in.global_ranks().end());
  out.job = FromProto(in.job());
  out.advertise_addr = in.advertise_addr();
  out.copy_stores.assign(in.copy_stores().begin(), in.copy_stores().end());
  out.memory_step = in.memory_step();
  out.memory_world = in.memory_world();
  out.memory_sources.assign(in.memory_sources().begin(), in.memory_sources().end());
  return out;
}

void ToProto(const HeartbeatRequest& in, proto::HeartbeatRequest* out) {
  out->set_node_name(in.node_name);
  out->set_round(in.round);
  for (const WorkerReport& w : in.workers) {
    proto::WorkerState* state = out->add_workers();
    state->set_rank(w.rank);
    state->set_local_rank(w.local_rank);
    state->set_pid(w.pid);
    state->set_phase(static_cast<proto::WorkerPhase>(w.phase));
  }
}

HeartbeatRequest FromProto(const proto::HeartbeatRequest& in) {
  HeartbeatRequest out;
  out.node_name = in.node_name();
  out.round = in.round();
  for (const proto::WorkerState& w : in.workers()) {
    out.workers.push_back(
        WorkerReport{w.rank(), w.local_rank(), w.pid(), EnumFromWire<WorkerPhase>(w.phase(), 5)});
  }
  return out;
}

void ToProto(const HeartbeatReply& in, proto::HeartbeatResponse* out) {
  out->set_round(in.round);
  out->set_command(static_cast<proto::AgentCommand>(in.command));
  for (int rank : in.dump_ranks) out->add_dump_ranks(rank);
}

HeartbeatReply FromProto(const proto::HeartbeatResponse& in) {
  return HeartbeatReply{in.round(), EnumFromWire<AgentCommand>(in.command(), 3),
                        std::vector<int>(in.dump_ranks().begin(), in.dump_ranks().end())};
}

void ToProto(const StackReport& in, proto::StackReport* out) {
  out->set_node_name(in.node_name);
  out->set_round(in.round);
  out->set_rank(in.rank);
  out->set_text(in.text);
}

StackReport FromProto(const proto::StackReport& in) {
  return StackReport{in.node_name(), in.round(), in.rank(), in.text()};
}

void ToProto(const ExitReport& in, proto::ExitReport* out) {
  out->set_node_name(in.node_name);
  out->set_round(in.round);
  out->set_rank(in.rank);
  out->set_pid(in.pid);
  out->set_signaled(in.signaled);
  out->set_code(in.code);
  for (const std::string& line : in.last_lines) out->add_last_lines(line);
  out->set_exit_ms(in.exit_ms);
}

ExitReport FromProto(const proto::ExitReport& in) {
  return ExitReport{
      in.node_name(),           in.round(),  in.rank(), in.pid(), in.signaled(), in.code(),
      Strings(in.last_lines()), in.exit_ms()};
}

void ToProto(const ProgressReport& in, proto::ProgressReport* out) {
  out->set_rank(in.rank);
  out->set_round(in.round);
  out->set_step(in.step);
  out->set_total_steps(in.total_steps);
  out->set_loss(in.loss);
  out->set_tokens_per_s(in.tokens_per_s);
  out->set_rss_bytes(in.rss_bytes);
  if (in.position) PositionToProto(*in.position, out->mutable_position());
}

ProgressReport FromProto(const proto::ProgressReport& in) {
  ProgressReport out{in.rank(), in.round(),        in.step(),     in.total_steps(),
                     in.loss(), in.tokens_per_s(), in.rss_bytes()};
  if (in.has_position()) out.position = PositionFromProto(in.position());
  return out;
}

void ToProto(const LogLine& in, proto::LogLine* out) {
  out->set_rank(in.rank);
  out->set_is_stderr(in.is_stderr);
  out->set_text(in.text);
  out->set_time_ms(in.time_ms);
}

LogLine FromProto(const proto::LogLine& in) {
  return LogLine{in.rank(), in.is_stderr(), in.text(), in.time_ms()};
}

void ToProto(const JobStatus& in, proto::JobStatus* out) {
  out->set_job_id(in.job_id);
  out->set_phase(static_cast<proto::JobPhase>(in.phase));
  out->set_round(in.round);
  out->set_restarts(in.restarts);
  out->set_max_restarts(in.max_restarts);
  for (const NodeStatus& n : in.nodes) {
    proto::NodeStatus* node = out->add_nodes();
    node->set_name(n.name);
    node->set_advertise_addr(n.advertise_addr);
    node->set_node_rank(n.node_rank);
    node->set_state(static_cast<proto::AgentState>(n.state));
    node->set_last_heartbeat_ms_ago(n.last_heartbeat_ms_ago);
    for (int rank : n.ranks) node->add_ranks(rank);
  }
  for (const RankStatus& r : in.ranks) {
    proto::RankStatus* rank = out->add_ranks();
    rank->set_rank(r.rank);
    rank->set_host(r.host);
    rank->set_pid(r.pid);
    rank->set_phase(static_cast<proto::WorkerPhase>(r.phase));
    rank->set_signaled(r.signaled);
    rank->set_exit_code(r.exit_code);
    rank->set_step(r.step);
    rank->set_total_steps(r.total_steps);
    rank->set_loss(r.loss);
    rank->set_tokens_per_s(r.tokens_per_s);
    rank->set_rss_bytes(r.rss_bytes);
    if (r.position) PositionToProto(*r.position, rank->mutable_position());
    rank->set_position_age_ms(r.position_age_ms);
  }
  if (in.first_failure) {
    proto::Failure* failure = out->mutable_first_failure();
    failure->set_rank(in.first_failure->rank);
    failure->set_host(in.first_failure->host);
    failure->set_cause(in.first_failure->cause);
    for (const std::string& line : in.first_failure->last_lines) failure->add_last_lines(line);
    failure->set_time_ms(in.first_failure->time_ms);
  }
  out->set_uptime_ms(in.uptime_ms);
}

JobStatus FromProto(const proto::JobStatus& in) {
  JobStatus out;
  out.job_id = in.job_id();
  out.phase = EnumFromWire<JobPhase>(in.phase(), 6);
  out.round = in.round();
  out.restarts = in.restarts();
  out.max_restarts = in.max_restarts();
  for (const proto::NodeStatus& n : in.nodes()) {
    NodeStatus node;
    node.name = n.name();
    node.advertise_addr = n.advertise_addr();
    node.node_rank = n.node_rank();
    node.state = EnumFromWire<AgentState>(n.state(), 4);
    node.last_heartbeat_ms_ago = n.last_heartbeat_ms_ago();
    node.ranks.assign(n.ranks().begin(), n.ranks().end());
    out.nodes.push_back(std::move(node));
  }
  for (const proto::RankStatus& r : in.ranks()) {
    out.ranks.push_back(RankStatus{
        r.rank(), r.host(), r.pid(), EnumFromWire<WorkerPhase>(r.phase(), 5), r.signaled(),
        r.exit_code(), r.step(), r.total_steps(), r.loss(), r.tokens_per_s(), r.rss_bytes()});
    if (r.has_position()) out.ranks.back().position = PositionFromProto(r.position());
    out.ranks.back().position_age_ms = r.position_age_ms();
  }
  if (in.has_first_failure()) {
    const proto::Failure& f = in.first_failure();
    out.first_failure =
        Failure{f.rank(), f.host(), f.cause(), Strings(f.last_lines()), f.time_ms()};
  }
  out.uptime_ms = in.uptime_ms();
  return out;
}

}  // namespace ds::launcher
