// GlooCommunicator: rendezvous (Gloo's connectFullMesh over the store), Split and Poison. The
// algorithms and the exception conversion of operations are in gloo_collectives.cc.
#include "parallel/comm/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdio>
#include <utility>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::parallel {
namespace {

Status CheckOptions(const GlooOptions& o) {
  std::string bad;
  if (o.size < 1) bad = "size " + std::to_string(o.size) + " < 1";
  if (bad.empty() && (o.rank < 0 || o.rank >= o.size)) {
    bad = "rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.size) + ")";
  }
  if (bad.empty() && o.timeout.count() <= 0) bad = "timeout must be positive";
  if (bad.empty() && o.hostname.empty()) bad = "empty hostname";
  if (bad.empty() && o.name.empty()) bad = "empty name";
  if (bad.empty()) return OkStatus();
  return InvalidArgumentError("GlooCommunicator '" + o.name + "': " + bad);
}

// A rendezvous failure: the store's errors carry their own code in the text. Gloo's keys are
// "<prefix>/rank_<r>" (the host) and "<prefix>/<r>" (the pair addresses) of rank r.
Status RendezvousError(const GlooOptions& o, const std::string& key_prefix,
                       const std::string& what) {
  std::string msg = "GlooCommunicator '" + o.name + "' rank " + std::to_string(o.rank) + "/" +
                    std::to_string(o.size) + ": rendezvous failed: " + what;
  const size_t at = what.rfind(key_prefix + "/");
  if (at != std::string::npos) {
    std::string key = what.substr(at + key_prefix.size() + 1);
    if (key.rfind("rank_", 0) == 0) key = key.substr(5);
    key = key.substr(0, key.find_first_not_of("0123456789"));
    if (!key.empty()) msg += " (rank " + key + " has not joined)";
  }
  if (what.find("DEADLINE_EXCEEDED") != std::string::npos ||
      what.find("Timed out") != std::string::npos || what.find("timeout") != std::string::npos) {
    return DeadlineExceededError(std::move(msg));
  }
  return UnavailableError(std::move(msg));
}

// Gloo's CreateDeviceAttr checks getaddrinfo's result against -1 only, and dereferences a null
// result for a name that does not resolve (SIGSEGV, seen with "no-such-host.invalid"): resolve
// it here first.
Status CheckResolvable(const GlooOptions& o) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(o.hostname.c_str(), nullptr, &hints, &result);
  if (result != nullptr) freeaddrinfo(result);
  if (rv == 0 && result != nullptr) return OkStatus();
  return UnavailableError("GlooCommunicator '" + o.name + "': cannot resolve hostname '" +
                          o.hostname + "': " + gai_strerror(rv));
}

}  // namespace

StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    const GlooOptions& options, gloo::rendezvous::Store* store) {
  DS_RETURN_IF_ERROR(CheckOptions(options));
  if (store == nullptr) return InvalidArgumentError("GlooCommunicator: null store");
  DS_RETURN_IF_ERROR(CheckResolvable(options));
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return UnavailableError("GlooCommunicator '" + options.name + "': cannot use hostname '" +
                            options.hostname + "': " + e.what());
  }
  return Connect(options, store, std::move(device), options.name);
}

StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(
    const GlooOptions& options, gloo::rendezvous::Store* store,
    std::shared_ptr<gloo::transport::Device> device, const std::string& key_prefix) {
  const auto start = std::chrono::steady_clock::now();
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  try {
    context->setTimeout(options.timeout);
    gloo::rendezvous::PrefixStore prefixed(key_prefix, *store);
    context->connectFullMesh(prefixed, device);
  } catch (const std::exception& e) {
    return RendezvousError(options, key_prefix, e.what());
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  if (options.rank == 0) {
    DS_LOG_INFO("comm", "gloo '{}': {} ranks connected in {} ms ({})", options.name, options.size,
                ms, device->str());
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(options, store, key_prefix, std::move(device), std::move(context)));
}

GlooCommunicator::GlooCommunicator(const GlooOptions& options, gloo::rendezvous::Store* store,
                                   std::string key_prefix,
                                   std::shared_ptr<gloo::transport::Device> device,
                                   std::shared_ptr<gloo::rendezvous::Context> context)
    : Communicator(options.rank, options.size, options.name),
      options_(options),
      store_(store),
      key_prefix_(std::move(key_prefix)),
      device_(std::move(device)),
      context_(std::move(context)) {}

GlooCommunicator::~GlooCommunicator() {
  StopCommThread();
  // The context's destructor closes the pairs; peers still using them see the connection
  // close, which is what they should see.
}

// Note [Failure reports]: a rank that fails closes its connections, and its peers see only
// "Connection closed by peer". So that every rank can name the root cause, the failing rank
// first stores its error under "<group>/failure/<rank>"; a peer that sees the connection to
// rank P fail waits briefly for P's report and quotes it. P's report quotes the report of the
// rank P saw fail, so the chain ends at the rank that timed out or aborted.
constexpr std::chrono::milliseconds kReportWait{1000};

std::string GlooCommunicator::PeerReport(int peer) {
  const std::string key = key_prefix_ + "/failure/" + std::to_string(peer);
  try {
    store_->wait({key}, kReportWait);
    const std::vector<char> report = store_->get(key);
    return std::string(report.begin(), report.end());
  } catch (const std::exception& e) {
    return "";
  }
}

void GlooCommunicator::Poison(const Status& cause) {
  try {
    const std::string report = cause.ToString();
    store_->set(key_prefix_ + "/failure/" + std::to_string(rank()),
                std::vector<char>(report.begin(), report.end()));
  } catch (const std::exception& e) {
    DS_LOG_WARN("comm", "gloo '{}' rank {}: cannot record the failure: {}", name(), rank(),
                e.what());
  }
  {
    std::lock_guard<std::mutex> lock(in_flight_.mu);
    in_flight_.poisoned = true;
    for (gloo::transport::UnboundBuffer* buf : in_flight_.buffers) {
      buf->abortWaitRecv();
      buf->abortWaitSend();
    }
  }
  // Close every connection (a reset): peers waiting on this rank fail at once. Pair::close
  // takes the pair's lock, so it is safe against the comm thread and Gloo's device thread.
  for (int i = 0; i < size(); ++i) {
    if (i == rank()) continue;
    try {
      std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(i);
      if (pair) pair->close();
    } catch (const std::exception& e) {
      DS_LOG_WARN("comm", "gloo '{}' rank {}: closing the connection to rank {}: {}", name(),
                  rank(), i, e.what());
    }
  }
}

StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::RunSplit(const std::vector<int>& ranks,
                                                                   const std::string& name,
                                                                   uint64_t split_seq) {
  const SplitChild split = ChildOfSplit(ranks, name, split_seq);
  GlooOptions child = options_;
  child.name = split.name;
  child.size = split.size;
  child.rank = split.rank;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> comm,
                      Connect(child, store_, device_, split.key_prefix));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace ds::parallel
