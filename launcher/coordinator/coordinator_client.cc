#include "launcher/coordinator/coordinator_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <climits>
#include <fstream>
#include <future>
#include <sstream>

#include "launcher/coordinator/grpc_util.h"
#include "launcher/coordinator/proto_convert.h"
#include "proto/coordinator.grpc.pb.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;

StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, std::string("open ") + what + " " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int32_t ClampMs(milliseconds d) {
  return d.count() > INT_MAX ? INT_MAX : static_cast<int32_t>(d.count() < 0 ? 0 : d.count());
}

// grpc.health.v1.HealthCheckResponse is `ServingStatus status = 1;` (SERVING = 1). The
// health proto's generated code is not installed, so its two bytes are read by hand.
int ParseServingStatus(const grpc::ByteBuffer& buffer) {
  grpc::Slice slice;
  if (!buffer.DumpToSingleSlice(&slice).ok()) return -1;
  const uint8_t* p = slice.begin();
  if (slice.size() == 0) return 0;  // proto3 default: UNKNOWN
  if (slice.size() < 2 || p[0] != 0x08) return -1;
  return p[1] & 0x7f;
}

}  // namespace

struct CoordinatorClient::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::Coordinator::Stub> coordinator;
  std::unique_ptr<proto::Job::Stub> job;
  std::unique_ptr<grpc::GenericStub> generic;

  // Token and deadline of one call.
  void Prepare(grpc::ClientContext* context, milliseconds timeout) const {
    context->AddMetadata(kTokenMetadataKey, options.token);
    context->set_deadline(std::chrono::system_clock::now() + timeout);
  }
  Status Check(const grpc::Status& status, const char* method) const {
    return FromGrpc(status, std::string(method) + "(" + options.address + ")");
  }
};

StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const ClientOptions& options) {
  if (options.address.empty()) return InvalidArgumentError("coordinator client: no address");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  // Our own connection, not one shared with other clients in this process (benchmarks and
  // tests run many agents in one process; each real agent has one connection anyway).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!options.tls_ca_path.empty()) {
    grpc::SslCredentialsOptions ssl;
    DS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.tls_ca_path, "TLS CA"));
    if (!options.tls_cert_path.empty()) {
      DS_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.tls_cert_path, "TLS certificate"));
      DS_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.tls_key_path, "TLS key"));
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->channel = grpc::CreateCustomChannel(options.address, credentials, args);
  impl->coordinator = proto::Coordinator::NewStub(impl->channel);
  impl->job = proto::Job::NewStub(impl->channel);
  impl->generic = std::make_unique<grpc::GenericStub>(impl->channel);
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(std::move(impl)));
}

CoordinatorClient::CoordinatorClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorClient::~CoordinatorClient() = default;

const std::string& CoordinatorClient::address() const { return impl_->options.address; }

StatusOr<JoinResult> CoordinatorClient::Join(const JoinRequest& request, milliseconds timeout) {
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout);
  proto::JoinRequest wire;
  ToProto(request, &wire);
  proto::JoinResponse response;
  DS_RETURN_IF_ERROR(impl_->Check(impl_->coordinator->Join(&context, wire, &response), "Join"));
  return FromProto(response);
}

StatusOr<HeartbeatReply> CoordinatorClient::Heartbeat(const HeartbeatRequest& request) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::HeartbeatRequest wire;
  ToProto(request, &wire);
  proto::HeartbeatResponse response;
  DS_RETURN_IF_ERROR(
      impl_->Check(impl_->coordinator->Heartbeat(&context, wire, &response), "Heartbeat"));
  return FromProto(response);
}

Status CoordinatorClient::ReportExit(const ExitReport& report) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::ExitReport wire;
  ToProto(report, &wire);
  proto::Ack ack;
  return impl_->Check(impl_->coordinator->ReportExit(&context, wire, &ack), "ReportExit");
}

Status CoordinatorClient::ReportProgress(const ProgressReport& report) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::ProgressReport wire;
  ToProto(report, &wire);
  proto::Ack ack;
  return impl_->Check(impl_->coordinator->ReportProgress(&context, wire, &ack), "ReportProgress");
}

Status CoordinatorClient::SendLogs(const std::string& node_name,
                                   const std::vector<LogLine>& lines) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::LogBatch batch;
  batch.set_node_name(node_name);
  for (const LogLine& line : lines) ToProto(line, batch.add_lines());
  proto::Ack ack;
  return impl_->Check(impl_->coordinator->SendLogs(&context, batch, &ack), "SendLogs");
}

Status CoordinatorClient::ReportStacks(const StackReport& report) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::StackReport wire;
  ToProto(report, &wire);
  proto::Ack ack;
  return impl_->Check(impl_->coordinator->ReportStacks(&context, wire, &ack), "ReportStacks");
}

Status CoordinatorClient::KvSet(int round, const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::KvSetRequest request;
  request.set_round(round);
  request.set_key(key);
  request.set_value(value);
  proto::Ack ack;
  return impl_->Check(impl_->coordinator->KvSet(&context, request, &ack), "KvSet");
}

StatusOr<std::string> CoordinatorClient::KvGet(int round, const std::string& key,
                                               milliseconds timeout) {
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout + impl_->options.rpc_timeout);
  proto::KvGetRequest request;
  request.set_round(round);
  request.set_key(key);
  request.set_timeout_ms(ClampMs(timeout));
  proto::KvGetResponse response;
  DS_RETURN_IF_ERROR(
      impl_->Check(impl_->coordinator->KvGet(&context, request, &response), "KvGet"));
  return std::move(*response.mutable_value());
}

Status CoordinatorClient::KvWait(int round, const std::vector<std::string>& keys,
                                 milliseconds timeout) {
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout + impl_->options.rpc_timeout);
  proto::KvWaitRequest request;
  request.set_round(round);
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(ClampMs(timeout));
  proto::Ack ack;
  return impl_->Check(impl_->coordinator->KvWait(&context, request, &ack), "KvWait");
}

StatusOr<int64_t> CoordinatorClient::KvAdd(int round, const std::string& key, int64_t delta) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::KvAddRequest request;
  request.set_round(round);
  request.set_key(key);
  request.set_delta(delta);
  proto::KvAddResponse response;
  DS_RETURN_IF_ERROR(
      impl_->Check(impl_->coordinator->KvAdd(&context, request, &response), "KvAdd"));
  return static_cast<int64_t>(response.value());
}

StatusOr<JobStatus> CoordinatorClient::GetStatus() {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  // A status has a message per rank and per node: an arena saves their mallocs.
  google::protobuf::Arena arena;
  auto* response = google::protobuf::Arena::CreateMessage<proto::JobStatus>(&arena);
  DS_RETURN_IF_ERROR(
      impl_->Check(impl_->job->Status(&context, proto::StatusRequest(), response), "Status"));
  return FromProto(*response);
}

Status CoordinatorClient::Watch(const std::function<bool(const JobStatus&)>& on_status,
                                milliseconds timeout) {
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout);
  std::unique_ptr<grpc::ClientReader<proto::JobStatus>> reader =
      impl_->job->Watch(&context, proto::StatusRequest());
  proto::JobStatus message;
  while (reader->Read(&message)) {
    if (!on_status(FromProto(message))) {
      context.TryCancel();
      reader->Finish().IgnoreError();
      return OkStatus();
    }
  }
  return impl_->Check(reader->Finish(), "Watch");
}

Status CoordinatorClient::Stop(const std::string& reason) {
  grpc::ClientContext context;
  impl_->Prepare(&context, impl_->options.rpc_timeout);
  proto::StopRequest request;
  request.set_reason(reason);
  proto::Ack ack;
  return impl_->Check(impl_->job->Stop(&context, request, &ack), "Stop");
}

Status CoordinatorClient::HealthCheck() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + impl_->options.rpc_timeout);
  // HealthCheckRequest{service: ""} encodes to no bytes.
  grpc::Slice empty(std::string{});
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  impl_->generic->UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                            &response, [&done](grpc::Status status) { done.set_value(status); });
  DS_RETURN_IF_ERROR(impl_->Check(done.get_future().get(), "HealthCheck"));
  const int serving = ParseServingStatus(response);
  if (serving != 1) {
    return UnavailableError("HealthCheck(" + impl_->options.address + "): status " +
                            std::to_string(serving) + ", not SERVING");
  }
  return OkStatus();
}

}  // namespace ds::launcher
