#include "launcher/state_store/state_store_client.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "launcher/coordinator/grpc_util.h"
#include "proto/state_store.grpc.pb.h"
#include "runtime/base/crc32c.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;

// A 1 MiB chunk plus its header and framing, with room to spare (as the server's).
constexpr int kMaxMessageBytes = 8 << 20;

// Gathers the chunks of a Get stream and checks them against the header of the first.
class CopyReceiver {
 public:
  CopyReceiver(int rank, int64_t step) : rank_(rank), step_(step) {}

  // DataLoss for a header of another copy or a bad size, or more bytes than it announced.
  Status Add(const proto::CopyChunk& chunk) {
    if (!has_header_) {
      has_header_ = true;
      total_ = chunk.total_bytes();
      expected_crc_ = chunk.crc32c();
      if (chunk.rank() != rank_ || chunk.step() != step_) {
        return DataLossError(
            fmt::format("the server sent rank {} step {}", chunk.rank(), chunk.step()));
      }
      if (total_ < 0 || total_ > kMaxCopyBytes) {
        return DataLossError(fmt::format("the server announced {} bytes", total_));
      }
      blob_.reserve(static_cast<size_t>(total_));
    }
    const std::string& data = chunk.data();
    if (data.size() > static_cast<size_t>(total_) - blob_.size()) {
      return DataLossError(fmt::format("more than the {} bytes announced arrived", total_));
    }
    crc_ = Crc32cExtend(crc_, data.data(), data.size());
    blob_.append(data);
    return OkStatus();
  }

  // The copy, once the stream ended well. DataLoss when it had no header, came short or
  // fails its CRC-32C.
  StatusOr<std::string> Take() {
    if (!has_header_) return DataLossError("the stream ended without a header");
    if (static_cast<int64_t>(blob_.size()) != total_) {
      return DataLossError(fmt::format("got {} of {} bytes", blob_.size(), total_));
    }
    if (crc_ != expected_crc_) {
      return DataLossError(fmt::format("CRC32C mismatch: {} of the bytes received, {} sent",
                                       Crc32cHex(crc_), Crc32cHex(expected_crc_)));
    }
    return std::move(blob_);
  }

 private:
  const int rank_;
  const int64_t step_;
  bool has_header_ = false;
  int64_t total_ = 0;
  uint32_t expected_crc_ = 0;
  uint32_t crc_ = 0;
  std::string blob_;
};

}  // namespace

struct StateStoreClient::Impl {
  std::string address;
  std::string token;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::StateStore::Stub> stub;

  // Token and deadline of one call.
  void Prepare(grpc::ClientContext* context, milliseconds timeout) const {
    context->AddMetadata(kTokenMetadataKey, token);
    context->set_deadline(std::chrono::system_clock::now() + timeout);
  }
  // "StateStore.Put(10.0.0.2:7000, rank 3 step 1200)".
  std::string Prefix(const char* method, int rank, int64_t step) const {
    return fmt::format("StateStore.{}({}, rank {} step {})", method, address, rank, step);
  }
};

StateStoreClient::StateStoreClient(std::string address, std::string token)
    : impl_(std::make_unique<Impl>()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  impl_->address = std::move(address);
  impl_->token = std::move(token);
  impl_->channel =
      grpc::CreateCustomChannel(impl_->address, grpc::InsecureChannelCredentials(), args);
  impl_->stub = proto::StateStore::NewStub(impl_->channel);
}

StateStoreClient::~StateStoreClient() = default;

const std::string& StateStoreClient::address() const { return impl_->address; }

Status StateStoreClient::Put(int rank, int64_t step, const char* data, size_t n,
                             milliseconds timeout) {
  const std::string prefix = impl_->Prefix("Put", rank, step);
  if (rank < 0 || step < 0) return InvalidArgumentError(prefix + ": negative rank or step");
  if (n > static_cast<size_t>(kMaxCopyBytes)) {
    return ResourceExhaustedError(
        fmt::format("{}: {} bytes over the limit of {}", prefix, n, kMaxCopyBytes));
  }
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout);
  proto::PutReply reply;
  std::unique_ptr<grpc::ClientWriter<proto::CopyChunk>> writer = impl_->stub->Put(&context, &reply);
  proto::CopyChunk chunk;
  chunk.set_rank(rank);
  chunk.set_step(step);
  chunk.set_total_bytes(static_cast<int64_t>(n));
  chunk.set_crc32c(Crc32c(data, n));
  size_t offset = 0;
  bool open = true;
  do {  // at least one chunk, for the header of an empty copy
    const size_t len = std::min(kCopyChunkBytes, n - offset);
    chunk.set_data(data + offset, len);
    open = writer->Write(chunk);  // false: the call failed; Finish() says why
    offset += len;
    chunk.Clear();  // the header goes on the first chunk only
  } while (open && offset < n);
  if (open) writer->WritesDone();
  DS_RETURN_IF_ERROR(FromGrpc(writer->Finish(), prefix));
  if (offset < n)
    return UnknownError(prefix + ": the server answered OK before all bytes were sent");
  return OkStatus();
}

StatusOr<std::string> StateStoreClient::Get(int rank, int64_t step, milliseconds timeout) {
  const std::string prefix = impl_->Prefix("Get", rank, step);
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout);
  proto::GetRequest request;
  request.set_rank(rank);
  request.set_step(step);
  std::unique_ptr<grpc::ClientReader<proto::CopyChunk>> reader =
      impl_->stub->Get(&context, request);
  CopyReceiver receiver(rank, step);
  proto::CopyChunk chunk;
  while (reader->Read(&chunk)) {
    if (Status bad = receiver.Add(chunk); !bad.ok()) {
      context.TryCancel();
      reader->Finish();  // ends the call; its CANCELLED says nothing new
      return bad.WithPrefix(prefix);
    }
  }
  DS_RETURN_IF_ERROR(FromGrpc(reader->Finish(), prefix));
  StatusOr<std::string> blob = receiver.Take();
  if (!blob.ok()) return blob.status().WithPrefix(prefix);
  return blob;
}

StatusOr<std::vector<HeldCopy>> StateStoreClient::List(milliseconds timeout) {
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout);
  proto::ListRequest request;
  proto::ListReply reply;
  DS_RETURN_IF_ERROR(FromGrpc(impl_->stub->List(&context, request, &reply),
                              "StateStore.List(" + impl_->address + ")"));
  std::vector<HeldCopy> held;
  held.reserve(reply.copies_size());
  for (const proto::HeldCopy& copy : reply.copies()) {
    held.push_back(HeldCopy{copy.rank(), copy.step(), copy.bytes()});
  }
  return held;
}

}  // namespace ds::launcher
