// The Trainer's part of ZeRO-Infinity (offload_optimizer / offload_param device nvme): the
// swapper the plan's swaps run on, the move of initialized or loaded states into its files, and
// the per-step report of its I/O.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer_swapper.h"

namespace ds::worker {

Status Trainer::BuildSwapper() {
  if (plan_->swap().sub_groups_size() == 0) return OkStatus();
  zero::SwapperOptions o;
  o.nvme_path = config_.zero.offload_optimizer.nvme_path;
  o.rank = world_rank_;  // swap files are per process, whatever its groups
  const config::AioConfig& a = config_.aio;
  o.io.block_size = a.block_size;
  o.io.queue_depth = a.queue_depth;
  o.io.intra_op_parallelism = a.intra_op_parallelism;
  o.io.single_submit = a.single_submit;
  o.io.overlap_events = a.overlap_events;
  DS_ASSIGN_OR_RETURN(swapper_,
                      zero::OptimizerSwapper::Create(*plan_, o, params_.get(), optimizer_.get()));
  return OkStatus();
}

Status Trainer::StoreSwappedStates() {
  if (!swapper_) return OkStatus();
  DS_RETURN_IF_ERROR(swapper_->Store());
  swapper_->TakeStats();  // the first step's figures are the first step's
  return OkStatus();
}

// NVMe offload: each finished sub-group goes to the swap files while the next parameters are
// drawn or read, and stage 3's flat copy is handed back every 64M elements, so initialization
// never holds more than a sub-group and one parameter of the states the files will hold.
// Without a swapper only the hand-backs remain.
Status Trainer::InitializeStreaming(const zero::ParamStore::ParamSource& source, bool kept_only) {
  const auto t0 = std::chrono::steady_clock::now();
  Status status;
  int64_t since_release = 0;
  if (swapper_) swapper_->Rewind();
  Status filled = params_->Fill(
      source,
      [&](int64_t flat_end, int64_t numel) {
        if (swapper_ && status.ok()) status = swapper_->StoreUpTo(params_->ShardBound(flat_end));
        since_release += numel;
        if (since_release > (int64_t{1} << 26)) {
          runner_->ReleaseGatheredParams();
          since_release = 0;
        }
      },
      init_slicer_.get(), kept_only ? &runner_->PersistentRanges() : nullptr);
  runner_->ReleaseGatheredParams();
  DS_RETURN_IF_ERROR(filled);
  DS_RETURN_IF_ERROR(status);
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Upload());
  if (!swapper_) return OkStatus();
  DS_RETURN_IF_ERROR(swapper_->StoreUpTo(INT64_MAX));
  const zero::SwapStats io = swapper_->TakeStats();
  DS_LOG_INFO("swap", "initialized {:.2f}M parameters into the swap files ({:.2f} GB) in {:.1f} s",
              params_->num_parameters() / 1e6, io.bytes_written / 1e9,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return OkStatus();
}

// The checkpoint writers read the master and optimizer states from the ParamStore's and the
// Optimizer's (sparse) buffers, so a save with the states on NVMe reads them back there first,
// whole, and hands the pages back after. When that would not fit the memory the system has free,
// the save is refused with the numbers before anything is read (the last checkpoint stays the
// latest) rather than the rank being killed for memory. Streaming the states from the swap file
// into the checkpoint would lift the limit.
Status Trainer::StageSwappedStates() {
  if (!swapper_) return OkStatus();
  const int64_t need = swapper_->file_bytes();
  const int64_t avail = AvailableMemoryBytes();
  if (avail > 0 && need > avail)
    return ResourceExhaustedError(
        "checkpoint: rank " + std::to_string(world_rank_) + " would stage its " +
        std::to_string(need) + " bytes of NVMe optimizer states in memory to save them, and " +
        std::to_string(avail) + " bytes are available; the save is refused");
  return swapper_->Load();
}

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

// One line per step: what the swaps moved, how fast, and how much of it compute hid.
void Trainer::ReportSwaps(StepMetrics* m) {
  StepMetrics& r = *m;
  const zero::SwapStats io = swapper_->TakeStats();
  r.swap_read_bytes = io.bytes_read;
  r.swap_written_bytes = io.bytes_written;
  r.io_busy_ms = io.busy_s * 1e3;
  r.io_wait_ms = io.wait_s * 1e3;
  DS_LOG_INFO("swap",
              "step {}: NVMe read {:.3f} GB, wrote {:.3f} GB in {:.2f} s of I/O ({:.2f} GB/s); "
              "waited {:.2f} s, so {:.1f}% of the I/O hid behind {:.2f} s of compute",
              r.step, io.bytes_read / 1e9, io.bytes_written / 1e9, io.busy_s,
              io.busy_s > 0 ? (io.bytes_read + io.bytes_written) / 1e9 / io.busy_s : 0.0, io.wait_s,
              100.0 * io.hidden(), r.step_ms / 1e3 - io.wait_s);
}

}  // namespace ds::worker
