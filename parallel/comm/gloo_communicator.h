// GlooCommunicator: the Communicator over Gloo's TCP transport (Debian's libgloo 0.5.0), for
// CPU ranks on one or many hosts. Ranks find each other through a Gloo rendezvous store
// (GrpcStore: the coordinator's KV store); Gloo's sockets listen on port 0 at `hostname`.
//
// Every algorithm is a ring (or chain, pairwise exchange, dissemination) of Gloo unbound-buffer
// sends and receives; see Note [Own algorithms] in gloo_collectives.cc for why not Gloo's
// built-in collectives. Each wait for a peer is bounded by `timeout`: a dead or stuck peer
// fails the operation with DeadlineExceeded ("... timed out after 2000 ms receiving from rank
// 3"); the failing rank then records its error in the store and closes its connections, so
// its peers fail at once with Unavailable naming it and quoting its error (hence the root
// cause), instead of waiting for their own timeouts. Abort() does the same.
//
// Thread safety: as Communicator.
//
//   GrpcStore store(client, /*round=*/0, "gloo", std::chrono::seconds(60));
//   GlooOptions options{rank, world_size, advertise_host};
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> world,
//                       GlooCommunicator::Create(options, &store));
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace gloo {
namespace rendezvous {
class Context;
class Store;
}  // namespace rendezvous
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace ds::parallel {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string hostname = "127.0.0.1";        // this rank's address as peers reach it
  std::string name = "world";                // group name: store key prefix, error messages
  std::chrono::milliseconds timeout{30000};  // rendezvous; each wait for a peer in an op
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects to every rank of the group through `store` (keys under "<name>/"), blocking until
  // all ranks arrived or options.timeout passed (DeadlineExceeded). InvalidArgument for bad
  // options, Unavailable when `hostname` cannot be bound or a peer cannot be reached. `store`
  // is borrowed: it must outlive this communicator and every communicator Split from it.
  static StatusOr<std::unique_ptr<GlooCommunicator>> Create(const GlooOptions& options,
                                                            gloo::rendezvous::Store* store);
  ~GlooCommunicator() override;

 protected:
  Status Run(const CommOp& op) override;
  StatusOr<std::unique_ptr<Communicator>> RunSplit(const std::vector<int>& ranks,
                                                   const std::string& name,
                                                   uint64_t split_seq) override;
  void Poison(const Status& cause) override;

 private:
  struct Progress;
  class Transfers;
  // The unbound buffers of the operation in flight, so that Poison() (any thread) can release
  // its waits: Gloo's TCP pair header is not installed by Debian (it includes the missing
  // gloo/common/memory.h), so a pair's own "signal all waiters" is out of reach.
  struct InFlight {
    std::mutex mu;
    bool poisoned = false;                                 // guarded by mu
    std::vector<gloo::transport::UnboundBuffer*> buffers;  // guarded by mu
  };

  GlooCommunicator(const GlooOptions& options, gloo::rendezvous::Store* store,
                   std::string key_prefix, std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context);
  static StatusOr<std::unique_ptr<GlooCommunicator>> Connect(
      const GlooOptions& options, gloo::rendezvous::Store* store,
      std::shared_ptr<gloo::transport::Device> device, const std::string& key_prefix);

  // The algorithms (gloo_collectives.cc). Run on the comm thread; they throw Gloo's
  // exceptions, which Run() converts, naming the peer recorded in `progress`.
  void OneHop(const CommOp& op, Progress* progress);         // small AllReduce/RS/RSV/AG/Broadcast
  void AllReducePair(const CommOp& op, Progress* progress);  // two ranks, up to 64 MiB
  void AllReduceRing(const CommOp& op, Progress* progress);
  void ReduceScatterRing(const CommOp& op, Progress* progress);  // ReduceScatter(V)
  void AllGatherRing(const CommOp& op, Progress* progress);
  void BroadcastChain(const CommOp& op, Progress* progress);
  void AllToAllPairwise(const CommOp& op, Progress* progress);
  void SendRecvPair(const CommOp& op, Progress* progress);
  void BarrierDissemination(const CommOp& op, Progress* progress);
  // Comm-thread scratch of at least `bytes`.
  char* Scratch(size_t bytes);
  // See Note [Failure reports]: what `peer` recorded when it failed, "" if nothing within
  // kReportWait.
  std::string PeerReport(int peer);

  // Fixed at construction.
  const GlooOptions options_;
  gloo::rendezvous::Store* const store_;                   // borrowed
  const std::string key_prefix_;                           // this group's store keys
  const std::shared_ptr<gloo::transport::Device> device_;  // shared with Split children
  const std::shared_ptr<gloo::rendezvous::Context> context_;

  InFlight in_flight_;

  // Owned by the comm thread.
  std::vector<char> scratch_;
};

}  // namespace ds::parallel
