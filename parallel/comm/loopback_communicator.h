// LoopbackCommunicator: the ranks of a group as threads of one process, exchanging data
// through shared memory. Same semantics as the real backends (FIFO comm thread, timeouts,
// sticky errors, Abort, Split), so higher layers test N-rank behaviour in one process.
// Collectives are checked across ranks: a rank that issues a different collective, count or
// dtype than its peers fails the group with FailedPrecondition naming both (a real backend
// would hang until the timeout or corrupt data).
//
// Thread safety: as Communicator; each rank's object is used by its own thread. The group's
// shared state is guarded by one mutex.
//
//   std::vector<std::unique_ptr<Communicator>> ranks = LoopbackCommunicator::CreateGroup(4);
//   for (int r = 0; r < 4; ++r) threads.emplace_back([&, r] { Train(*ranks[r]); });
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace ds::parallel {

namespace internal {
struct LoopbackGroup;
}  // namespace internal

struct LoopbackOptions {
  std::string name = "world";                // group name in errors
  std::chrono::milliseconds timeout{30000};  // longest wait for a peer in one operation
  // Claims device_buffers(): stands in for NCCL where the "device" is host memory (the
  // device path on HostMemory in tests). Splits inherit it.
  bool device_buffers = false;
  // With device_buffers: whether [data, data + bytes) is device memory; an operation with
  // another buffer fails, naming it (tests: a host pointer handed to an NCCL-like group).
  std::function<bool(const void* data, size_t bytes)> is_device_memory;
};

class LoopbackCommunicator final : public Communicator {
 public:
  // The `size` ranks of one group; element r is rank r. size >= 1.
  static std::vector<std::unique_ptr<Communicator>> CreateGroup(
      int size, const LoopbackOptions& options = LoopbackOptions());

  LoopbackCommunicator(std::shared_ptr<internal::LoopbackGroup> group, int rank);
  ~LoopbackCommunicator() override;
  bool device_buffers() const override;

 protected:
  Status Run(const CommOp& op) override;
  StatusOr<std::unique_ptr<Communicator>> RunSplit(const std::vector<int>& ranks,
                                                   const std::string& name,
                                                   uint64_t split_seq) override;
  void Poison(const Status& cause) override;

 private:
  Status RunCollective(const CommOp& op);
  Status RunSendRecv(const CommOp& op);
  void Compute(const CommOp& op, const std::vector<const CommOp*>& all,
               const std::vector<std::vector<char>>& staged);

  // Shared by the group's ranks (and kept alive by each of them).
  const std::shared_ptr<internal::LoopbackGroup> group_;
};

}  // namespace ds::parallel
