#include "launcher/coordinator/coordinator_service.h"

#include <thread>

#include "launcher/coordinator/grpc_util.h"
#include "launcher/coordinator/proto_convert.h"
#include "runtime/base/logging.h"

namespace ds::launcher::internal {
namespace {

constexpr std::chrono::milliseconds kWatchMinInterval(100);
constexpr std::chrono::milliseconds kStatusCache(50);

std::vector<std::string> Keys(const google::protobuf::RepeatedPtrField<std::string>& keys) {
  return std::vector<std::string>(keys.begin(), keys.end());
}

}  // namespace

// Every handler starts with this: refuse calls without the job token.
#define DS_COORD_AUTHORIZE(context, method)                        \
  do {                                                             \
    grpc::Status _ds_denied = CheckToken(context, token_, method); \
    if (!_ds_denied.ok()) return _ds_denied;                       \
  } while (0)

grpc::Status CoordinatorServiceImpl::Join(grpc::ServerContext* context,
                                          const proto::JoinRequest* request,
                                          proto::JoinResponse* response) {
  DS_COORD_AUTHORIZE(context, "Join");
  JoinRequest join = FromProto(*request);
  if (join.advertise_addr.empty()) join.advertise_addr = PeerHost(context->peer());
  StatusOr<JoinResult> result = state_->Join(join, WaitOptionsFor(context));
  if (!result.ok()) return ToGrpc(result.status());
  ToProto(*result, response);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::Heartbeat(grpc::ServerContext* context,
                                               const proto::HeartbeatRequest* request,
                                               proto::HeartbeatResponse* response) {
  DS_COORD_AUTHORIZE(context, "Heartbeat");
  StatusOr<HeartbeatReply> reply = state_->Heartbeat(FromProto(*request));
  if (!reply.ok()) return ToGrpc(reply.status());
  ToProto(*reply, response);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ReportExit(grpc::ServerContext* context,
                                                const proto::ExitReport* request,
                                                proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "ReportExit");
  return ToGrpc(state_->ReportExit(FromProto(*request)));
}

grpc::Status CoordinatorServiceImpl::ReportProgress(grpc::ServerContext* context,
                                                    const proto::ProgressReport* request,
                                                    proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "ReportProgress");
  return ToGrpc(state_->ReportProgress(FromProto(*request)));
}

grpc::Status CoordinatorServiceImpl::SendLogs(grpc::ServerContext* context,
                                              const proto::LogBatch* request,
                                              proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "SendLogs");
  std::vector<LogLine> lines;
  lines.reserve(request->lines_size());
  for (const proto::LogLine& line : request->lines()) lines.push_back(FromProto(line));
  return ToGrpc(state_->AppendLogs(request->node_name(), std::move(lines)));
}

grpc::Status CoordinatorServiceImpl::ReportStacks(grpc::ServerContext* context,
                                                  const proto::StackReport* request,
                                                  proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "ReportStacks");
  return ToGrpc(state_->ReportStacks(FromProto(*request)));
}

grpc::Status CoordinatorServiceImpl::KvSet(grpc::ServerContext* context,
                                           const proto::KvSetRequest* request,
                                           proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "KvSet");
  return ToGrpc(state_->KvSet(request->round(), request->key(), request->value()));
}

grpc::Status CoordinatorServiceImpl::KvGet(grpc::ServerContext* context,
                                           const proto::KvGetRequest* request,
                                           proto::KvGetResponse* response) {
  DS_COORD_AUTHORIZE(context, "KvGet");
  StatusOr<std::string> value =
      state_->KvGet(request->round(), request->key(),
                    std::chrono::milliseconds(request->timeout_ms()), WaitOptionsFor(context));
  if (!value.ok()) return ToGrpc(value.status());
  response->set_value(std::move(value).value());
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::KvWait(grpc::ServerContext* context,
                                            const proto::KvWaitRequest* request,
                                            proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "KvWait");
  return ToGrpc(state_->KvWait(request->round(), Keys(request->keys()),
                               std::chrono::milliseconds(request->timeout_ms()),
                               WaitOptionsFor(context)));
}

grpc::Status CoordinatorServiceImpl::KvAdd(grpc::ServerContext* context,
                                           const proto::KvAddRequest* request,
                                           proto::KvAddResponse* response) {
  DS_COORD_AUTHORIZE(context, "KvAdd");
  StatusOr<int64_t> value = state_->KvAdd(request->round(), request->key(), request->delta());
  if (!value.ok()) return ToGrpc(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

std::shared_ptr<const std::string> JobServiceImpl::SerializedStatus() {
  std::lock_guard<std::mutex> lock(cache_mu_);
  const SteadyTime now = std::chrono::steady_clock::now();
  if (cached_ == nullptr || state_->version() != cached_version_ ||
      now - cached_at_ >= kStatusCache) {
    uint64_t version = 0;
    proto::JobStatus message;
    ToProto(state_->Snapshot(&version), &message);
    cached_ = std::make_shared<const std::string>(message.SerializeAsString());
    cached_version_ = version;
    cached_at_ = now;
  }
  return cached_;
}

grpc::ServerUnaryReactor* JobServiceImpl::Status(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status denied = CheckToken(context, token_, "Status");
  if (!denied.ok()) {
    reactor->Finish(denied);
    return reactor;
  }
  // The slice borrows the cached bytes and keeps them alive until gRPC is done with them.
  auto* keep = new std::shared_ptr<const std::string>(SerializedStatus());
  grpc::Slice slice(
      const_cast<char*>((*keep)->data()), (*keep)->size(),
      [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, keep);
  *response = grpc::ByteBuffer(&slice, 1);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::Status JobServiceImpl::Watch(grpc::ServerContext* context,
                                   const proto::StatusRequest* request,
                                   grpc::ServerWriter<proto::JobStatus>* writer) {
  DS_COORD_AUTHORIZE(context, "Watch");
  const WaitOptions wait = WaitOptionsFor(context);
  for (;;) {
    uint64_t version = 0;
    const JobStatus status = state_->Snapshot(&version);
    proto::JobStatus message;
    ToProto(status, &message);
    if (!writer->Write(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
    if (IsTerminal(status.phase)) return grpc::Status::OK;
    const auto earliest = std::chrono::steady_clock::now() + kWatchMinInterval;
    StatusOr<uint64_t> changed = state_->WaitForChange(version, wait);
    if (!changed.ok()) return ToGrpc(changed.status());
    // Coalesce bursts of changes (progress reports of many ranks) into one message.
    const auto until = std::min(earliest, wait.deadline);
    if (std::chrono::steady_clock::now() < until) std::this_thread::sleep_until(until);
  }
}

grpc::Status JobServiceImpl::Stop(grpc::ServerContext* context, const proto::StopRequest* request,
                                  proto::Ack* response) {
  DS_COORD_AUTHORIZE(context, "Stop");
  DS_LOG_WARN("coord", "Stop from {}: {}", context->peer(), request->reason());
  return ToGrpc(state_->Stop(request->reason()));
}

#undef DS_COORD_AUTHORIZE

}  // namespace ds::launcher::internal
