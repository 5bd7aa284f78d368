#include "launcher/state_store/state_store_server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <mutex>
#include <string_view>

#include "launcher/coordinator/grpc_util.h"
#include "proto/state_store.grpc.pb.h"
#include "runtime/base/crc32c.h"
#include "runtime/base/logging.h"

namespace ds::launcher {
namespace {

// A 1 MiB chunk plus its header and framing, with room to spare.
constexpr int kMaxMessageBytes = 8 << 20;

std::string CopyName(int rank, int64_t step) { return fmt::format("rank {} step {}", rank, step); }

// The header of a Put stream: the first chunk's fields.
struct CopyHeader {
  int rank = 0;
  int64_t step = 0;
  int64_t total_bytes = 0;
  uint32_t crc32c = 0;
};

// Logs the refusal of a copy (one line) and returns its status, "rank R step S: why".
grpc::Status Refuse(const grpc::ServerContext* context, grpc::StatusCode code,
                    const std::string& what, const std::string& why) {
  DS_LOG_WARN("store", "refused copy of {} from {}: {}", what, context->peer(), why);
  return grpc::Status(code, what + ": " + why);
}

// The StateStore service over a borrowed CopyStore. Thread-safe (the store is).
class StateStoreService final : public proto::StateStore::Service {
 public:
  StateStoreService(std::string token, CopyStore* store)
      : token_(std::move(token)), store_(store) {}

  grpc::Status Put(grpc::ServerContext* context, grpc::ServerReader<proto::CopyChunk>* reader,
                   proto::PutReply* reply) override;
  grpc::Status Get(grpc::ServerContext* context, const proto::GetRequest* request,
                   grpc::ServerWriter<proto::CopyChunk>* writer) override;
  grpc::Status List(grpc::ServerContext* context, const proto::ListRequest* request,
                    proto::ListReply* reply) override;

 private:
  // OK when the call carries the job token; else UNAUTHENTICATED, logged once.
  grpc::Status Authorize(const grpc::ServerContext* context, const char* method) const;
  // The NOT_FOUND of Get, naming the steps held for the rank.
  grpc::Status Missing(int rank, int64_t step) const;

  const std::string token_;
  CopyStore* const store_;
};

grpc::Status StateStoreService::Authorize(const grpc::ServerContext* context,
                                          const char* method) const {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  const char* why = nullptr;
  if (it == metadata.end()) {
    why = "no job token";
  } else if (!ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()), token_)) {
    why = "wrong job token";
  }
  if (why == nullptr) return grpc::Status::OK;
  DS_LOG_WARN("store", "refused {} from {}: {}", method, context->peer(), why);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      fmt::format("{} (metadata {})", why, kTokenMetadataKey));
}

// Checks the header of a Put stream; an error status (already logged) when it is bad.
grpc::Status CheckHeader(const grpc::ServerContext* context, const CopyHeader& header) {
  const std::string what = CopyName(header.rank, header.step);
  if (header.rank < 0 || header.step < 0) {
    return Refuse(context, grpc::StatusCode::INVALID_ARGUMENT, what, "negative rank or step");
  }
  if (header.total_bytes < 0) {
    return Refuse(context, grpc::StatusCode::INVALID_ARGUMENT, what,
                  fmt::format("negative total_bytes {}", header.total_bytes));
  }
  if (header.total_bytes > kMaxCopyBytes) {
    return Refuse(
        context, grpc::StatusCode::RESOURCE_EXHAUSTED, what,
        fmt::format("total_bytes {} over the limit of {}", header.total_bytes, kMaxCopyBytes));
  }
  return grpc::Status::OK;
}

// Reads the data of a Put stream, `chunk` (the first) included, into `blob`; OK only when
// exactly header.total_bytes arrived and their CRC-32C is header.crc32c.
grpc::Status ReadCopy(const grpc::ServerContext* context, const CopyHeader& header,
                      proto::CopyChunk* chunk, grpc::ServerReader<proto::CopyChunk>* reader,
                      std::string* blob) {
  const std::string what = CopyName(header.rank, header.step);
  const size_t total = static_cast<size_t>(header.total_bytes);
  blob->reserve(total);
  uint32_t crc = 0;
  do {
    const std::string& data = chunk->data();
    if (data.size() > total - blob->size()) {
      return Refuse(context, grpc::StatusCode::INVALID_ARGUMENT, what,
                    fmt::format("more than total_bytes = {} bytes sent", total));
    }
    crc = Crc32cExtend(crc, data.data(), data.size());
    blob->append(data);
  } while (reader->Read(chunk));
  if (blob->size() != total) {
    return Refuse(context, grpc::StatusCode::DATA_LOSS, what,
                  fmt::format("stream ended after {} of {} bytes", blob->size(), total));
  }
  if (crc != header.crc32c) {
    return Refuse(context, grpc::StatusCode::DATA_LOSS, what,
                  fmt::format("CRC32C mismatch: {} of the bytes received, {} in the header",
                              Crc32cHex(crc), Crc32cHex(header.crc32c)));
  }
  return grpc::Status::OK;
}

grpc::Status StateStoreService::Put(grpc::ServerContext* context,
                                    grpc::ServerReader<proto::CopyChunk>* reader,
                                    proto::PutReply* reply) {
  if (grpc::Status denied = Authorize(context, "Put"); !denied.ok()) return denied;
  proto::CopyChunk chunk;
  if (!reader->Read(&chunk)) {
    DS_LOG_WARN("store", "refused copy from {}: empty Put stream", context->peer());
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty Put stream (no header)");
  }
  CopyHeader header;
  header.rank = chunk.rank();
  header.step = chunk.step();
  header.total_bytes = chunk.total_bytes();
  header.crc32c = chunk.crc32c();
  if (grpc::Status bad = CheckHeader(context, header); !bad.ok()) return bad;
  auto blob = std::make_shared<std::string>();
  if (grpc::Status bad = ReadCopy(context, header, &chunk, reader, blob.get()); !bad.ok()) {
    return bad;
  }
  store_->Add(header.rank, header.step, std::move(blob));
  DS_LOG_DEBUG("store", "stored {} ({} bytes) from {}", CopyName(header.rank, header.step),
               header.total_bytes, context->peer());
  reply->set_bytes(header.total_bytes);
  return grpc::Status::OK;
}

grpc::Status StateStoreService::Missing(int rank, int64_t step) const {
  std::string steps;
  for (const HeldCopy& held : store_->Held()) {
    if (held.rank != rank) continue;
    steps += (steps.empty() ? "" : ", ") + std::to_string(held.step);
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      fmt::format("no copy of {} (held for rank {}: {})", CopyName(rank, step),
                                  rank, steps.empty() ? "none" : "steps " + steps));
}

grpc::Status StateStoreService::Get(grpc::ServerContext* context, const proto::GetRequest* request,
                                    grpc::ServerWriter<proto::CopyChunk>* writer) {
  if (grpc::Status denied = Authorize(context, "Get"); !denied.ok()) return denied;
  // Holding the blob keeps it alive while Add or DropAfter drop it from the store.
  const std::shared_ptr<const std::string> blob = store_->Get(request->rank(), request->step());
  if (blob == nullptr) return Missing(request->rank(), request->step());
  proto::CopyChunk chunk;
  chunk.set_rank(request->rank());
  chunk.set_step(request->step());
  chunk.set_total_bytes(static_cast<int64_t>(blob->size()));
  chunk.set_crc32c(Crc32c(blob->data(), blob->size()));
  size_t offset = 0;
  do {  // at least one chunk, for the header of an empty copy
    const size_t n = std::min(kCopyChunkBytes, blob->size() - offset);
    chunk.set_data(blob->data() + offset, n);
    if (!writer->Write(chunk)) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          CopyName(request->rank(), request->step()) + ": stream closed");
    }
    offset += n;
    chunk.Clear();  // the header goes on the first chunk only
  } while (offset < blob->size());
  return grpc::Status::OK;
}

grpc::Status StateStoreService::List(grpc::ServerContext* context,
                                     const proto::ListRequest* request, proto::ListReply* reply) {
  if (grpc::Status denied = Authorize(context, "List"); !denied.ok()) return denied;
  for (const HeldCopy& held : store_->Held()) {
    proto::HeldCopy* copy = reply->add_copies();
    copy->set_rank(held.rank);
    copy->set_step(held.step);
    copy->set_bytes(held.bytes);
  }
  return grpc::Status::OK;
}

}  // namespace

struct StateStoreServer::Impl {
  std::unique_ptr<StateStoreService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // host:port actually bound
  int port = 0;

  std::mutex mu;         // serializes Shutdown()
  bool stopped = false;  // guarded by mu
};

StatusOr<std::unique_ptr<StateStoreServer>> StateStoreServer::Start(const std::string& bind_host,
                                                                    int port, std::string token,
                                                                    CopyStore* store) {
  if (token.empty()) return InvalidArgumentError("state store: empty job token");
  if (store == nullptr) return InvalidArgumentError("state store: no CopyStore");
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(fmt::format("state store: port {} out of range", port));
  }
  std::string host = bind_host;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<StateStoreService>(std::move(token), store);
  grpc::ServerBuilder builder;
  // Exactly this address: no SO_REUSEPORT, so a second server on the port fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  const std::string requested = host + ":" + std::to_string(port);
  builder.AddListeningPort(requested, grpc::InsecureServerCredentials(), &impl->port);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    impl->server.reset();
    return UnavailableError("state store: cannot listen on " + requested +
                            " (address in use, or not an address of this host?)");
  }
  impl->address = host + ":" + std::to_string(impl->port);
  DS_LOG_INFO("store", "state store listening on {}, keeping {} copies per rank", impl->address,
              store->keep());
  return std::unique_ptr<StateStoreServer>(new StateStoreServer(std::move(impl)));
}

StateStoreServer::StateStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StateStoreServer::~StateStoreServer() { Shutdown(); }

int StateStoreServer::port() const { return impl_->port; }

void StateStoreServer::Shutdown(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
  DS_LOG_INFO("store", "state store on {} stopped", impl_->address);
}

}  // namespace ds::launcher
