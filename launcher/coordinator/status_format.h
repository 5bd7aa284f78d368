// Renderings of a JobStatus for `ds-launch status`: a text table (phase, round, restarts;
// per node: state and heartbeat age; per rank: host, pid, phase, exit, step/total, loss,
// tokens/s; the first failure with its last lines) and JSON (protobuf's JSON mapping of
// ds.proto.JobStatus, so field names follow the proto). Pure functions, thread-safe.
//
//   DS_ASSIGN_OR_RETURN(JobStatus status, client->GetStatus());
//   std::fputs(FormatJobStatus(status).c_str(), stdout);
#pragma once

#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_types.h"
#include "runtime/base/status.h"

namespace ds::launcher {

std::string FormatJobStatus(const JobStatus& status);

// Internal if protobuf refuses the message (it should not).
StatusOr<std::string> JobStatusToJson(const JobStatus& status, bool pretty = true);

// "0-7", "0, 2, 5", "-" for none.
std::string FormatRankList(const std::vector<int>& ranks);

}  // namespace ds::launcher
