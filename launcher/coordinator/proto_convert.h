// Conversions between the plain types of coordinator_types.h and the generated messages of
// proto/coordinator.proto. Package-internal (server, client, status JSON): this is the
// only header of the package that includes generated code. Pure functions, thread-safe.
//
//   proto::JoinRequest wire;
//   ToProto(request, &wire);
//   JoinRequest back = FromProto(wire);
#pragma once

#include "launcher/coordinator/coordinator_types.h"
#include "proto/coordinator.pb.h"

namespace ds::launcher {

void ToProto(const JobSpec& in, proto::JobSpec* out);
JobSpec FromProto(const proto::JobSpec& in);
void ToProto(const JoinRequest& in, proto::JoinRequest* out);
JoinRequest FromProto(const proto::JoinRequest& in);
void ToProto(const JoinResult& in, proto::JoinResponse* out);
JoinResult FromProto(const proto::JoinResponse& in);
void ToProto(const HeartbeatRequest& in, proto::HeartbeatRequest* out);
HeartbeatRequest FromProto(const proto::HeartbeatRequest& in);
void ToProto(const HeartbeatReply& in, proto::HeartbeatResponse* out);
HeartbeatReply FromProto(const proto::HeartbeatResponse& in);
void ToProto(const StackReport& in, proto::StackReport* out);
StackReport FromProto(const proto::StackReport& in);
void ToProto(const ExitReport& in, proto::ExitReport* out);
ExitReport FromProto(const proto::ExitReport& in);
void ToProto(const ProgressReport& in, proto::ProgressReport* out);
ProgressReport FromProto(const proto::ProgressReport& in);
void ToProto(const LogLine& in, proto::LogLine* out);
LogLine FromProto(const proto::LogLine& in);
void ToProto(const JobStatus& in, proto::JobStatus* out);
JobStatus FromProto(const proto::JobStatus& in);

}  // namespace ds::launcher
