// NcclCommunicator: the Communicator over NCCL, for ranks that each own one GPU. Buffers are
// device pointers on the communicator's device.
//
// Bootstrap: rank 0 of the group calls ncclGetUniqueId and stores it under
// "<name>/nccl-id" in a KvStore (GrpcKvStore: the coordinator's store; InMemoryKvStore for
// ranks as threads); the others read it, waiting up to bootstrap_timeout. The NCCL
// communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL call can hang the
// calling thread: init and every enqueue are polled with ncclCommGetAsyncError.
//
// Streams (see Note [Stream order] in the .cc): collectives run on the communicator's own
// CUDA stream, stream(). Before each operation that stream waits (on the device) for
// options.compute_stream as it is when the operation starts: for a sync call that is the
// moment of the call; for an async call, the moment the ds-comm thread reaches it, which
// can be later (it then also waits for compute issued in between: correct, with less
// overlap). For exact ordering, set order_after_compute_stream = false and call
// OrderAfter(event) with an event recorded after the producers of the inputs, before
// issuing the operation. An operation is complete (Wait() returned, or the sync call
// returned) once it finished on the device: outputs may then be read from any stream.
//
// Failure: a watchdog (watchdog.h) times every operation and polls for NCCL's asynchronous
// errors. An operation that does not finish within options.timeout, or an async error,
// aborts the NCCL communicator (ncclCommAbort) and fails this communicator with, e.g.,
// "rank 3 of world: AllReduce #12 (bf16 x 4194304, sum) did not finish within 30 s;
// communicator aborted" (DeadlineExceeded); every later call returns that error. Abort()
// and a failed operation abort the NCCL communicator too. Nothing waits without a bound.
//
// Point to point: NCCL matches sends and receives per peer in issue order and has no tags;
// the tag is only checked by the base class, so both ranks must issue their transfers
// between the same pair in the same order (operations here run one at a time anyway).
//
// Thread safety: as Communicator.
//
//   InMemoryKvStore store;  // or GrpcKvStore over the coordinator
//   NcclOptions options;
//   options.rank = rank; options.size = world; options.device = local_rank;
//   DS_ASSIGN_OR_RETURN(auto comm, NcclCommunicator::Create(options, &store));
//   DS_RETURN_IF_ERROR(comm->AllReduce({grads_dev, n, DType::kBF16}, ReduceOp::kSum));
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/comm/nccl/kv_store.h"
#include "parallel/comm/nccl/watchdog.h"
#include "runtime/cuda/stream.h"

namespace ds::parallel {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;                                      // CUDA device ordinal of this rank
  std::string name = "world";                          // group name: store keys, messages
  std::chrono::milliseconds bootstrap_timeout{60000};  // unique id exchange and NCCL init
  std::chrono::milliseconds timeout{300000};           // watchdog: per operation
  std::chrono::milliseconds watchdog_poll{100};        // watchdog thread period
  // The stream the inputs are produced on (nullptr: the legacy default stream); see the
  // header comment. Borrowed: must outlive the communicator and its Split children.
  cudaStream_t compute_stream = nullptr;
  bool order_after_compute_stream = true;
};

class NcclCommunicator final : public Communicator {
 public:
  // Exchanges the unique id through `store` and initializes NCCL on options.device.
  // InvalidArgument for bad options, Unavailable without that GPU, DeadlineExceeded when rank
  // 0 did not publish the id or not all ranks joined within bootstrap_timeout, Internal (with
  // NCCL's last error) when NCCL refuses. `store` is borrowed: it must outlive this
  // communicator and every communicator Split from it. Leaves options.device current on the
  // calling thread.
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclOptions& options,
                                                            KvStore* store);
  // Flushes and destroys the NCCL communicator (aborts it if it failed or does not flush
  // within options.timeout).
  ~NcclCommunicator() override;
  bool device_buffers() const override { return true; }

  // The stream collectives run on.
  cudaStream_t stream() const { return stream_.get(); }
  int device() const { return options_.device; }
  // Operations issued after this call wait (on the device) for `ready` as recorded now.
  // Any thread that issues operations; the event may be re-recorded right after.
  Status OrderAfter(cudaEvent_t ready);
  // OrderAfter an event recorded now on `native_stream` (a cudaStream_t).
  Status OrderAfterStream(void* native_stream) override;

 protected:
  Status Run(const CommOp& op) override;
  StatusOr<std::unique_ptr<Communicator>> RunSplit(const std::vector<int>& ranks,
                                                   const std::string& name,
                                                   uint64_t split_seq) override;
  void Poison(const Status& cause) override;

 private:
  class Probe;

  NcclCommunicator(const NcclOptions& options, KvStore* store, ncclComm_t comm, cuda::Stream stream,
                   cuda::Event ready, cuda::Event done, void* scratch);
  static StatusOr<std::unique_ptr<NcclCommunicator>> Connect(const NcclOptions& options,
                                                             KvStore* store,
                                                             const std::string& key_prefix);

  // The NCCL calls of one operation (ncclGroupStart/End around several), under comm_mu_.
  ncclResult_t Issue(const CommOp& op);
  ncclResult_t IssueReduceScatterV(const CommOp& op);  // unequal chunks: a reduce per chunk
  ncclResult_t IssueAllToAll(const CommOp& op);
  // Polls ncclCommGetAsyncError until the enqueue finished; the watchdog bounds it.
  Status WaitEnqueued(const CommOp& op);
  // "rank 3 of world" (messages).
  std::string Who() const;
  // Status for a failed NCCL call, with NCCL's last error.
  Status NcclError(ncclResult_t r, const std::string& what);

  // Fixed at construction.
  const NcclOptions options_;
  KvStore* const store_;       // borrowed
  const cuda::Stream stream_;  // collectives run here
  const cuda::Event ready_;    // recorded on the compute stream before each op
  const cuda::Event done_;     // recorded on stream_ after each op
  void* const scratch_;        // one int32 on the device, for Barrier

  std::mutex comm_mu_;         // every use of comm_ (NCCL calls, abort)
  ncclComm_t comm_ = nullptr;  // guarded by comm_mu_; null once aborted or destroyed

  std::atomic<uint64_t> done_for_{~uint64_t{0}};  // op id done_ was recorded for
  uint64_t next_op_id_ = 0;                       // comm thread only

  std::mutex mark_mu_;
  cudaEvent_t mark_ = nullptr;  // OrderAfterStream's event, made on first use; guarded by mark_mu_

  std::unique_ptr<Probe> probe_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace ds::parallel
