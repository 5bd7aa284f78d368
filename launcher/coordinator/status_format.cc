#include "launcher/coordinator/status_format.h"

#include <google/protobuf/util/json_util.h>
#include <time.h>

#include <algorithm>
#include <cstdio>

#include "launcher/coordinator/proto_convert.h"

namespace ds::launcher {
namespace {

using Row = std::vector<std::string>;

std::string Printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// Left-aligned columns, two spaces apart.
std::string Table(const std::vector<Row>& rows) {
  std::vector<size_t> width;
  for (const Row& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string Duration(int64_t ms) {
  const int64_t s = ms / 1000;
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm%02lds", long(s / 3600), long(s / 60 % 60),
                  long(s % 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", long(s / 60), long(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fs", ms / 1000.0);
  }
  return buf;
}

std::string LocalTime(int64_t unix_ms) {
  time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string ExitText(const RankStatus& r) {
  if (r.phase != WorkerPhase::kSucceeded && r.phase != WorkerPhase::kFailed &&
      r.phase != WorkerPhase::kStopped) {
    return "-";
  }
  return r.signaled ? "signal " + std::to_string(r.exit_code) : std::to_string(r.exit_code);
}

std::string NodesTable(const JobStatus& status) {
  std::vector<Row> rows = {{"NODE", "ADDRESS", "NODE_RANK", "STATE", "HEARTBEAT", "RANKS"}};
  for (const NodeStatus& n : status.nodes) {
    rows.push_back(
        {n.name, n.advertise_addr.empty() ? "-" : n.advertise_addr,
         n.node_rank < 0 ? "-" : std::to_string(n.node_rank), AgentStateName(n.state),
         n.last_heartbeat_ms_ago < 0 ? "never" : Duration(n.last_heartbeat_ms_ago) + " ago",
         FormatRankList(n.ranks)});
  }
  return Table(rows);
}

// Where the rank is in its plan and for how long: "7 ALL_REDUCE dp.0 (1.2 s)", "validation".
std::string PositionText(const RankStatus& r) {
  if (!r.position) return "-";
  const PlanPosition& p = *r.position;
  std::string s = p.instruction < 0 ? p.kind : std::to_string(p.instruction) + " " + p.kind;
  if (!p.group.empty()) s += " " + p.group;
  if (r.position_age_ms >= 1000) s += Printf(" (%.1f s)", r.position_age_ms / 1000.0);
  return s;
}

std::string RanksTable(const JobStatus& status) {
  std::vector<Row> rows = {
      {"RANK", "HOST", "PID", "PHASE", "EXIT", "STEP", "LOSS", "TOKENS/S", "AT (INSTRUCTION)"}};
  for (const RankStatus& r : status.ranks) {
    const bool progress = r.step > 0 || r.total_steps > 0;
    std::string step = !progress ? "-"
                       : r.total_steps > 0
                           ? std::to_string(r.step) + "/" + std::to_string(r.total_steps)
                           : std::to_string(r.step);
    rows.push_back({std::to_string(r.rank), r.host, r.pid == 0 ? "-" : std::to_string(r.pid),
                    WorkerPhaseName(r.phase), ExitText(r), step,
                    progress ? Printf("%.4f", r.loss) : "-",
                    progress ? Printf("%.0f", r.tokens_per_s) : "-", PositionText(r)});
  }
  return Table(rows);
}

}  // namespace

std::string FormatRankList(const std::vector<int>& ranks) {
  if (ranks.empty()) return "-";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous &= ranks[i] == ranks[i - 1] + 1;
  if (contiguous && ranks.size() > 1) {
    return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  }
  std::string out;
  for (int rank : ranks) out += (out.empty() ? "" : ", ") + std::to_string(rank);
  return out;
}

std::string FormatJobStatus(const JobStatus& status) {
  std::string out = "job " + (status.job_id.empty() ? std::string("-") : status.job_id) + "  " +
                    JobPhaseName(status.phase) + "  round " + std::to_string(status.round) +
                    "  restarts " + std::to_string(status.restarts) + "/" +
                    std::to_string(status.max_restarts) + "  uptime " + Duration(status.uptime_ms) +
                    "\n\n";
  out += NodesTable(status);
  if (!status.ranks.empty()) out += "\n" + RanksTable(status);
  if (status.first_failure) {
    const Failure& f = *status.first_failure;
    std::string where = f.rank >= 0      ? "rank " + std::to_string(f.rank) + " on " + f.host
                        : f.host.empty() ? std::string("rendezvous")
                                         : "node " + f.host;
    out += "\nfirst failure (root cause): " + where + ": " + f.cause;
    if (f.time_ms > 0) out += " at " + LocalTime(f.time_ms);
    out += "\n";
    for (const std::string& line : f.last_lines) out += "  | " + line + "\n";
  }
  return out;
}

StatusOr<std::string> JobStatusToJson(const JobStatus& status, bool pretty) {
  proto::JobStatus message;
  ToProto(status, &message);
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto result = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!result.ok()) return InternalError("JobStatus to JSON: " + result.ToString());
  return json;
}

}  // namespace ds::launcher
