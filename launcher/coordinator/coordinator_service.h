// The gRPC services of the coordinator (package-internal; CoordinatorServer owns them):
// each handler checks the job token, converts the request and calls CoordinatorState.
// Blocking handlers (Join, KvGet, KvWait, Watch) wait with the client's deadline and
// cancellation. Thread-safe: gRPC calls them on its own threads.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "launcher/coordinator/coordinator_state.h"
#include "proto/coordinator.grpc.pb.h"

namespace ds::launcher::internal {

class CoordinatorServiceImpl final : public proto::Coordinator::Service {
 public:
  // `state` is borrowed and must outlive the service.
  CoordinatorServiceImpl(CoordinatorState* state, std::string token)
      : state_(state), token_(std::move(token)) {}

  grpc::Status Join(grpc::ServerContext* context, const proto::JoinRequest* request,
                    proto::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const proto::HeartbeatRequest* request,
                         proto::HeartbeatResponse* response) override;
  grpc::Status ReportExit(grpc::ServerContext* context, const proto::ExitReport* request,
                          proto::Ack* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* context, const proto::ProgressReport* request,
                              proto::Ack* response) override;
  grpc::Status SendLogs(grpc::ServerContext* context, const proto::LogBatch* request,
                        proto::Ack* response) override;
  grpc::Status ReportStacks(grpc::ServerContext* context, const proto::StackReport* request,
                            proto::Ack* response) override;
  grpc::Status KvSet(grpc::ServerContext* context, const proto::KvSetRequest* request,
                     proto::Ack* response) override;
  grpc::Status KvGet(grpc::ServerContext* context, const proto::KvGetRequest* request,
                     proto::KvGetResponse* response) override;
  grpc::Status KvWait(grpc::ServerContext* context, const proto::KvWaitRequest* request,
                      proto::Ack* response) override;
  grpc::Status KvAdd(grpc::ServerContext* context, const proto::KvAddRequest* request,
                     proto::KvAddResponse* response) override;

 private:
  CoordinatorState* const state_;
  const std::string token_;
};

// Status is served from a cache of the serialized JobStatus through gRPC's raw callback
// API (no per-call message building): many `ds-launch status` pollers cost little. The
// cache is rebuilt when the state changed or kStatusCacheMs passed, so heartbeat ages and
// uptime may lag by that much.
class JobServiceImpl final : public proto::Job::WithRawCallbackMethod_Status<proto::Job::Service> {
 public:
  JobServiceImpl(CoordinatorState* state, std::string token)
      : state_(state), token_(std::move(token)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // Sends the status now and on every change, at most every 100 ms; ends after sending a
  // final phase (SUCCEEDED, FAILED, STOPPED).
  grpc::Status Watch(grpc::ServerContext* context, const proto::StatusRequest* request,
                     grpc::ServerWriter<proto::JobStatus>* writer) override;
  grpc::Status Stop(grpc::ServerContext* context, const proto::StopRequest* request,
                    proto::Ack* response) override;

 private:
  std::shared_ptr<const std::string> SerializedStatus();

  CoordinatorState* const state_;
  const std::string token_;
  std::mutex cache_mu_;
  std::shared_ptr<const std::string> cached_;  // guarded by cache_mu_
  uint64_t cached_version_ = 0;                // guarded by cache_mu_
  SteadyTime cached_at_;                       // guarded by cache_mu_
};

}  // namespace ds::launcher::internal
