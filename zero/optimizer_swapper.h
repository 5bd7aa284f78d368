// OptimizerSwapper: ZeRO-Infinity's swapper (offload_optimizer device nvme, and offload_param
// device nvme). The rank's fp32 optimizer states (and a separate fp32 master) live in one swap
// file; the plan's SWAP_IN / OPTIMIZER_STEP / SWAP_OUT instructions move each sub-group through
// one of the plan's swap buffers (Note [Optimizer swapping] in zero/plan/swap_stream.cc). With
// offload_param, the 16-bit parameter shard lives in a second file (in fp32 the shard is the
// master, read from the optimizer file instead): SWAP_IN of units reads
// their chunks into the sparse shard ahead of their gather, a sub-group's SWAP_OUT writes its
// freshly stepped 16-bit values back and drops them (Note [Parameter swapping] in
// zero/plan/param_swap_stream.cc). The ParamStore's master
// and the Optimizer's state buffers are sparse staging: Store() moves what they hold into the
// file and hands their pages back (after initialization or a checkpoint load), Load() reads the
// file back into them (before a checkpoint is saved), ReleaseMemory() hands them back again.
//
//   DS_ASSIGN_OR_RETURN(auto swapper, OptimizerSwapper::Create(plan, options, &params, &opt));
//   DS_RETURN_IF_ERROR(swapper->Store());
//   DS_ASSIGN_OR_RETURN(CollectiveJob job, swapper->Start(swap_in));  // then job.wait()
//   DS_RETURN_IF_ERROR(swapper->Step(step, lr, grad_scale));
//
// Files: <nvme_path>/ds-swap/rank<R>-pid<P>/{optimizer,params}.swp, preallocated at creation (so
// a full disk is refused before the first step), removed with the swapper or on SIGTERM /
// SIGINT / SIGHUP; directories a SIGKILLed run left behind (their pid gone) are removed at
// creation. Not thread-safe: the step runner's
// thread drives it (the I/O runs on the engine's rings).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "zero/aio/aligned_buffer.h"
#include "zero/aio/io_engine.h"
#include "zero/aio/io_file.h"
#include "zero/collective_queue.h"

namespace ds::proto {
class Instruction;
class Plan;
}  // namespace ds::proto

namespace ds::zero {

class Optimizer;
class ParamStore;

struct SwapperOptions {
  std::string nvme_path;                                              // offload_optimizer.nvme_path
  std::string key = "zero_optimization.offload_optimizer.nvme_path";  // named in errors
  int rank = 0;
  IoOptions io;  // the aio block
};

// What the swaps of some steps moved and how long the runner's thread waited for them.
struct SwapStats {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double wait_s = 0;  // the runner's thread in waits on transfers: I/O the schedule did not hide
  double busy_s = 0;  // wall time with at least one transfer in flight (union of their spans)
  int64_t transfers = 0;
  // Of the busy time, the share compute overlapped: 1 - wait / busy.
  double hidden() const { return busy_s > 0 ? std::max(0.0, 1.0 - wait_s / busy_s) : 0.0; }
};

class OptimizerSwapper {
 public:
  // Creates the rank's directory and swap file under options.nvme_path with the plan's size,
  // after checking with statvfs that the filesystem has it (ResourceExhausted naming the key,
  // the path and both sizes), and allocates the plan's swap buffers once.
  static StatusOr<std::unique_ptr<OptimizerSwapper>> Create(const proto::Plan& plan,
                                                            const SwapperOptions& options,
                                                            ParamStore* params,
                                                            Optimizer* optimizer);
  ~OptimizerSwapper();  // waits for transfers in flight; removes the file and the directory

  // SWAP_IN / SWAP_OUT: submits the transfer; the job's wait completes it.
  StatusOr<CollectiveJob> Start(const proto::Instruction& in);
  // OPTIMIZER_STEP of one sub-group, on the states in its swap buffer (the first sub-group
  // begins the optimizer's step).
  Status Step(const proto::Instruction& in, float lr, float grad_scale);

  Status Store();
  // Stores the sub-groups not stored yet that end at or below shard position `end` (streaming
  // initialization: ParamStore::Initialize's callback with ShardBound); Store() = all of them.
  Status StoreUpTo(int64_t end);
  // The next StoreUpTo calls write every sub-group again from the first (a second fill of the
  // states: weights loaded after the initialization was stored).
  void Rewind() { stored_ = 0; }
  Status Load();
  void ReleaseMemory();
  // offload_param: the whole 16-bit shard into memory (evaluation, export gather everything),
  // and dropped again (the persistent units' chunks stay).
  Status LoadParams();
  void DropParams();

  const std::string& path() const { return file_.path(); }
  int64_t file_bytes() const;
  int64_t buffer_bytes() const;  // the swap buffers in host memory
  // Totals since the last call.
  SwapStats TakeStats();

 private:
  struct Arrays;
  OptimizerSwapper(const proto::Plan& plan, ParamStore* params, Optimizer* optimizer);
  Status Open(const SwapperOptions& options);
  // The host arrays (master when swapped, then each state) of sub-group `k`'s positions.
  std::vector<float*> HostArrays(int k) const;
  std::vector<float*> SlotArrays(int slot, int k) const;
  int64_t Bytes(int k) const;  // one sub-group's transfer
  Status Transfer(int k, int slot, bool write, bool wait_now, IoTicket* ticket);
  // A hash of a few pages of each state array of sub-group `k` in `slot` (first, middle, last),
  // recorded when it is written and checked when it is read back: a swap file truncated or
  // overwritten under the job reads back holes or foreign bytes, which this catches (a sample,
  // not a checksum of every byte).
  uint64_t SampleTag(int slot, int k) const;
  Status CheckRead(int slot, int k) const;
  Status Wait(IoTicket& ticket);
  // offload_param: shard positions [pos, pos + n) of the 16-bit shard to or from its file.
  Status ParamTransfer(int64_t pos, int64_t n, bool write, IoTicket* ticket);
  // fp32 with offload_param: the parameter shard is the master, swapped with the states in the
  // optimizer file (no second file); MasterRead reads shard positions [pos, pos + n) of it into
  // the shard (one read per sub-group it spans), ReleaseMaster drops a range of the master's
  // pages (in fp32 with swapped parameters all but the persistent units' chunks).
  bool MasterIsParams() const;
  Status MasterRead(int64_t pos, int64_t n, std::vector<IoTicket>* tickets);
  void ReleaseMaster(int64_t pos, int64_t n);
  void DropParamPages(int64_t pos, int64_t n);  // all but the persistent units' chunks
  StatusOr<CollectiveJob> StartParamsIn(const proto::Instruction& in);
  char* ParamShardAt(int64_t pos) const;

  const proto::Plan& plan_;
  ParamStore* params_;
  Optimizer* optimizer_;
  std::unique_ptr<IoEngine> engine_;
  IoFile file_;
  IoFile params_file_;                             // offload_param
  std::vector<std::pair<int64_t, int64_t>> keep_;  // persistent chunks: (pos, n), ascending
  int64_t param_size_ = 2;                         // bytes of a 16-bit value
  std::string dir_;
  std::vector<AlignedBuffer> slots_;
  SwapStats stats_;
  std::vector<IoEngine::Times> spans_;  // of the transfers waited for since TakeStats
  std::vector<uint64_t> tags_;          // per sub-group: SampleTag of its last write; 0 before any
  int stored_ = 0;  // sub-groups stored since the last Store (all: nothing left to store)
};

// Removes `<nvme_path>/ds-swap/rank<R>-pid<P>` directories whose process is gone (a killed
// run's); returns how many it removed.
int RemoveStaleSwapDirs(const std::string& nvme_path);

}  // namespace ds::zero
