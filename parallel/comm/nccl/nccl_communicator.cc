// NcclCommunicator: unique-id bootstrap, non-blocking init, one operation at a time on the
// communicator's stream, completion and failures through the CollectiveWatchdog.
//
// Note [Stream order]: the base class runs operations one at a time, in issue order, and an
// operation is complete when Run() returns. Run() therefore (1) makes stream_ wait for the
// compute stream (an event recorded now), (2) enqueues the NCCL calls, (3) waits until NCCL
// accepted them (non-blocking communicators report ncclInProgress meanwhile), (4) records
// done_ on stream_ and (5) waits, through the watchdog, until done_ fired. Because only one
// operation is ever in flight, one `ready_` and one `done_` event suffice. The price is a
// host round trip between consecutive collectives; the async API still overlaps them with
// the caller's compute. OrderAfter() inserts a wait into stream_ from the issuing thread,
// which orders every operation enqueued after it (possibly also one issued earlier but not
// yet run: more waiting, never less).
#include "parallel/comm/nccl/nccl_communicator.h"

#include <cstring>
#include <thread>
#include <utility>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/device.h"

namespace ds::parallel {
namespace {

using Clock = std::chrono::steady_clock;

Status CheckOptions(const NcclOptions& o) {
  std::string bad;
  if (o.size < 1) bad = "size " + std::to_string(o.size) + " < 1";
  if (bad.empty() && (o.rank < 0 || o.rank >= o.size)) {
    bad = "rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.size) + ")";
  }
  if (bad.empty() && o.device < 0) bad = "negative device";
  if (bad.empty() && (o.timeout.count() <= 0 || o.bootstrap_timeout.count() <= 0 ||
                      o.watchdog_poll.count() <= 0)) {
    bad = "timeouts must be positive";
  }
  if (bad.empty() && o.name.empty()) bad = "empty name";
  if (bad.empty()) return OkStatus();
  return InvalidArgumentError("NcclCommunicator '" + o.name + "': " + bad);
}

std::string WhoOf(const NcclOptions& o) {
  return "rank " + std::to_string(o.rank) + " of " + o.name;
}

StatusCode CodeFor(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return StatusCode::kInvalidArgument;
    case ncclSystemError:
    case ncclRemoteError:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

Status NcclStatus(ncclResult_t r, ncclComm_t comm, const std::string& what) {
  std::string msg = what + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += " (" + std::string(last) + ")";
  return Status(CodeFor(r), std::move(msg));
}

// ncclUint8 for the ops that only move bytes (any dtype); typed for reductions.
StatusOr<ncclDataType_t> ReduceType(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      return UnimplementedError(std::string("NCCL reductions over ") + DTypeName(t));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

char* Bytes(const BufferView& b) { return static_cast<char*>(b.data); }

// Polls a non-blocking communicator until it leaves ncclInProgress or `deadline` passes.
ncclResult_t PollState(ncclComm_t comm, Clock::time_point deadline, bool* timed_out) {
  *timed_out = false;
  for (auto backoff = std::chrono::microseconds(10);;
       backoff = std::min(backoff * 2, std::chrono::microseconds(2000))) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(backoff);
  }
}

// Rank 0 publishes a fresh unique id under `key`; the others wait for it.
StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclOptions& o, KvStore* store,
                                        const std::string& key) {
  ncclUniqueId id;
  if (o.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclStatus(r, nullptr, WhoOf(o) + ": ncclGetUniqueId");
    Status s = store->Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!s.ok()) return s.WithPrefix(WhoOf(o) + ": publishing the NCCL id under '" + key + "'");
    return id;
  }
  StatusOr<std::string> value = store->Get(key, o.bootstrap_timeout);
  if (!value.ok()) {
    return Status(value.status().code(),
                  WhoOf(o) + ": no NCCL id under '" + key + "' within " +
                      CollectiveWatchdog::FormatTimeout(o.bootstrap_timeout) +
                      " (rank 0 has not joined): " + value.status().message());
  }
  if (value->size() != sizeof(id.internal)) {
    return DataLossError(WhoOf(o) + ": the NCCL id under '" + key + "' has " +
                         std::to_string(value->size()) + " bytes, expected " +
                         std::to_string(sizeof(id.internal)));
  }
  std::memcpy(id.internal, value->data(), sizeof(id.internal));
  return id;
}

}  // namespace

// The watchdog's view of this communicator. Finished: the done_ event of the one operation
// in flight. AsyncError: ncclCommGetAsyncError. Abort: ncclCommAbort, once.
class NcclCommunicator::Probe final : public WatchdogProbe {
 public:
  explicit Probe(NcclCommunicator* comm) : c_(comm) {}

  StatusOr<bool> Finished(uint64_t id) override {
    if (c_->done_for_.load() != id) return false;  // done_ not recorded for it yet
    const cudaError_t err = cudaEventQuery(c_->done_.get());
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return cuda::CudaErrorToStatus(err, "cudaEventQuery", nullptr, 0);
  }

  Status AsyncError() override {
    std::lock_guard<std::mutex> lock(c_->comm_mu_);
    if (c_->comm_ == nullptr) return OkStatus();  // aborted: the watchdog knows why
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(c_->comm_, &state);
    if (r != ncclSuccess) return NcclStatus(r, c_->comm_, "ncclCommGetAsyncError");
    if (state == ncclSuccess || state == ncclInProgress) return OkStatus();
    return NcclStatus(state, c_->comm_, "NCCL async error");
  }

  void Abort(const Status& cause) override {
    std::lock_guard<std::mutex> lock(c_->comm_mu_);
    if (c_->comm_ == nullptr) return;
    DS_LOG_ERROR("comm", "nccl '{}' rank {}: aborting the NCCL communicator: {}", c_->name(),
                 c_->rank(), cause.message());
    (void)ncclCommAbort(c_->comm_);
    c_->comm_ = nullptr;
  }

 private:
  NcclCommunicator* const c_;
};

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const NcclOptions& options,
                                                                     KvStore* store) {
  DS_RETURN_IF_ERROR(CheckOptions(options));
  if (store == nullptr) return InvalidArgumentError("NcclCommunicator: null store");
  DS_ASSIGN_OR_RETURN(int devices, cuda::CudaDeviceCount());
  if (options.device >= devices) {
    return UnavailableError(WhoOf(options) + ": no CUDA device " + std::to_string(options.device) +
                            " (" + cuda::ProbeCudaDevices().reason + ")");
  }
  return Connect(options, store, options.name);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Connect(
    const NcclOptions& options, KvStore* store, const std::string& key_prefix) {
  const auto start = Clock::now();
  DS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  DS_ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeUniqueId(options, store, key_prefix + "/nccl-id"));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // see the header: nothing may hang the calling thread
  config.commName = options.name.c_str();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  bool timed_out = false;
  if (r == ncclInProgress || (r == ncclSuccess && comm != nullptr)) {
    r = PollState(comm, start + options.bootstrap_timeout, &timed_out);
  }
  if (timed_out || r != ncclSuccess) {
    Status s =
        timed_out
            ? DeadlineExceededError(WhoOf(options) + ": NCCL init of " +
                                    std::to_string(options.size) + " ranks did not finish within " +
                                    CollectiveWatchdog::FormatTimeout(options.bootstrap_timeout) +
                                    " (a rank did not join)")
            : NcclStatus(r, comm, WhoOf(options) + ": ncclCommInitRankConfig");
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return s;
  }

  // Everything below is on options.device (set above).
  auto fail = [&](Status s) {
    (void)ncclCommAbort(comm);
    return s.WithPrefix(WhoOf(options));
  };
  StatusOr<cuda::Stream> stream = cuda::Stream::Create();
  if (!stream.ok()) return fail(stream.status());
  StatusOr<cuda::Event> ready = cuda::Event::Create();
  if (!ready.ok()) return fail(ready.status());
  StatusOr<cuda::Event> done = cuda::Event::Create();
  if (!done.ok()) return fail(done.status());
  void* scratch = nullptr;
  cudaError_t err = cudaMalloc(&scratch, sizeof(int32_t));
  if (err == cudaSuccess) err = cudaMemset(scratch, 0, sizeof(int32_t));
  if (err != cudaSuccess) {
    if (scratch != nullptr) (void)cudaFree(scratch);
    return fail(cuda::CudaErrorToStatus(err, "barrier scratch", nullptr, 0));
  }
  if (options.rank == 0) {
    DS_LOG_INFO(
        "comm", "nccl '{}': {} ranks initialized in {} ms", options.name, options.size,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(
      options, store, comm, std::move(*stream), std::move(*ready), std::move(*done), scratch));
}

NcclCommunicator::NcclCommunicator(const NcclOptions& options, KvStore* store, ncclComm_t comm,
                                   cuda::Stream stream, cuda::Event ready, cuda::Event done,
                                   void* scratch)
    : Communicator(options.rank, options.size, options.name),
      options_(options),
      store_(store),
      stream_(std::move(stream)),
      ready_(std::move(ready)),
      done_(std::move(done)),
      scratch_(scratch),
      comm_(comm) {
  probe_ = std::make_unique<Probe>(this);
  WatchdogOptions wd;
  wd.timeout = options.timeout;
  wd.poll_interval = options.watchdog_poll;
  watchdog_ = std::make_unique<CollectiveWatchdog>(Who(), wd, probe_.get());
  watchdog_->Start();
}

NcclCommunicator::~NcclCommunicator() {
  StopCommThread();
  watchdog_->Stop();
  if (mark_) (void)cudaEventDestroy(mark_);
  {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ != nullptr) {
      (void)cudaSetDevice(options_.device);
      // Flush, bounded; a communicator that cannot flush (a peer gone) is aborted instead.
      bool timed_out = false;
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        r = PollState(comm_, Clock::now() + options_.timeout, &timed_out);
      }
      if (r == ncclSuccess && !timed_out) {
        (void)ncclCommDestroy(comm_);
      } else {
        (void)ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
  }
  (void)cudaFree(scratch_);
}

std::string NcclCommunicator::Who() const { return WhoOf(options_); }

Status NcclCommunicator::NcclError(ncclResult_t r, const std::string& what) {
  return NcclStatus(r, comm_, Who() + ": " + what);
}

Status NcclCommunicator::OrderAfter(cudaEvent_t ready) {
  DS_RETURN_IF_ERROR(status());
  DS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), ready, 0));
  return OkStatus();
}

Status NcclCommunicator::OrderAfterStream(void* native_stream) {
  std::lock_guard<std::mutex> lock(mark_mu_);
  DS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (!mark_) DS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&mark_, cudaEventDisableTiming));
  DS_CUDA_RETURN_IF_ERROR(cudaEventRecord(mark_, static_cast<cudaStream_t>(native_stream)));
  return OrderAfter(mark_);
}

// NCCL has no reduce-scatter with unequal chunks: one reduce per chunk, rooted at its owner,
// all in one group so they run together.
ncclResult_t NcclCommunicator::IssueReduceScatterV(const CommOp& op) {
  cudaStream_t s = stream_.get();
  const int64_t esize = static_cast<int64_t>(DTypeSize(op.in.dtype));
  ncclResult_t r = ncclGroupStart();
  int64_t offset = 0;
  for (int k = 0; k < size() && r == ncclSuccess; ++k) {
    const int64_t n = op.counts[k];
    if (n > 0) {
      r = ncclReduce(Bytes(op.in) + offset * esize, k == rank() ? op.out.data : nullptr, n,
                     *ReduceType(op.in.dtype), NcclOp(op.reduce), k, comm_, s);
    }
    offset += n;
  }
  const ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

// The rank's own chunk copied on the stream, every other one sent and received in one group.
ncclResult_t NcclCommunicator::IssueAllToAll(const CommOp& op) {
  cudaStream_t s = stream_.get();
  const int64_t chunk = op.in.bytes() / size();
  if (chunk > 0 && cudaMemcpyAsync(Bytes(op.out) + rank() * chunk, Bytes(op.in) + rank() * chunk,
                                   chunk, cudaMemcpyDeviceToDevice, s) != cudaSuccess) {
    return ncclUnhandledCudaError;
  }
  ncclResult_t r = ncclGroupStart();
  for (int p = 0; p < size() && r == ncclSuccess && chunk > 0; ++p) {
    if (p == rank()) continue;
    r = ncclSend(Bytes(op.in) + p * chunk, chunk, ncclUint8, p, comm_, s);
    if (r == ncclSuccess) r = ncclRecv(Bytes(op.out) + p * chunk, chunk, ncclUint8, p, comm_, s);
  }
  const ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

ncclResult_t NcclCommunicator::Issue(const CommOp& op) {
  cudaStream_t s = stream_.get();
  switch (op.kind) {
    case CommOpKind::kAllReduce:
      return ncclAllReduce(op.in.data, op.in.data, op.in.count, *ReduceType(op.in.dtype),
                           NcclOp(op.reduce), comm_, s);
    case CommOpKind::kReduceScatter:
      return ncclReduceScatter(op.in.data, op.out.data, op.out.count, *ReduceType(op.in.dtype),
                               NcclOp(op.reduce), comm_, s);
    case CommOpKind::kReduceScatterV:
      return IssueReduceScatterV(op);
    case CommOpKind::kAllGather:
      return ncclAllGather(op.in.data, op.out.data, op.in.bytes(), ncclUint8, comm_, s);
    case CommOpKind::kBroadcast:
      return ncclBroadcast(op.in.data, op.in.data, op.in.bytes(), ncclUint8, op.root, comm_, s);
    case CommOpKind::kBarrier:
      return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, s);
    case CommOpKind::kAllToAll:
      return IssueAllToAll(op);
    case CommOpKind::kSendRecv: {
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess && op.dst >= 0) {
        r = ncclSend(op.in.data, op.in.bytes(), ncclUint8, op.dst, comm_, s);
      }
      if (r == ncclSuccess && op.src >= 0) {
        r = ncclRecv(op.out.data, op.out.bytes(), ncclUint8, op.src, comm_, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
  }
  return ncclInvalidUsage;
}

Status NcclCommunicator::WaitEnqueued(const CommOp& op) {
  for (auto backoff = std::chrono::microseconds(5);;
       backoff = std::min(backoff * 2, std::chrono::microseconds(1000))) {
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ == nullptr) break;
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return NcclError(r, DescribeOp(op));
      if (state == ncclSuccess) return OkStatus();
      if (state != ncclInProgress) return NcclError(state, DescribeOp(op));
    }
    // The watchdog times the operation from Track, enqueue included.
    DS_RETURN_IF_ERROR(watchdog_->Poll());
    std::this_thread::sleep_for(backoff);
  }
  Status s = watchdog_->status();
  return s.ok() ? AbortedError(Who() + ": " + DescribeOp(op) + ": communicator aborted") : s;
}

Status NcclCommunicator::Run(const CommOp& op) {
  if (op.kind == CommOpKind::kAllReduce || op.kind == CommOpKind::kReduceScatter ||
      op.kind == CommOpKind::kReduceScatterV) {
    DS_RETURN_IF_ERROR(ReduceType(op.in.dtype).status());
  }
  DS_RETURN_IF_ERROR(watchdog_->status());
  const uint64_t id = next_op_id_++;
  watchdog_->Track(id, DescribeOp(op));
  {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr) {
      Status s = watchdog_->status();
      return s.ok() ? AbortedError(Who() + ": communicator aborted") : s;
    }
    DS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
    if (options_.order_after_compute_stream) {
      DS_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_.get(), options_.compute_stream));
      DS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
    }
    const ncclResult_t r = Issue(op);
    if (r != ncclSuccess && r != ncclInProgress) return NcclError(r, DescribeOp(op));
  }
  DS_RETURN_IF_ERROR(WaitEnqueued(op));
  DS_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_.get(), stream_.get()));
  done_for_.store(id);
  return watchdog_->Wait(id);
}

void NcclCommunicator::Poison(const Status& cause) {
  // Aborts the NCCL communicator (through the probe), which makes the peers' operations
  // with this rank fail, and releases a Run() waiting in the watchdog.
  watchdog_->Fail(cause);
}

StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::RunSplit(const std::vector<int>& ranks,
                                                                   const std::string& name,
                                                                   uint64_t split_seq) {
  const SplitChild split = ChildOfSplit(ranks, name, split_seq);
  NcclOptions child = options_;
  child.name = split.name;
  child.size = split.size;
  child.rank = split.rank;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                      Connect(child, store_, split.key_prefix));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace ds::parallel
