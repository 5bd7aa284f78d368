// What the swapper's I/O engine moves on a directory's device: one file written, then read,
// with O_DIRECT through IoEngine (io_engine.h). ds-io-bench prints it per direction;
// `parallel: auto` takes the rates of the job's nvme_path for the swaps of the layouts that
// offload to it (runtime/planner/auto_command.h).
//
//   DS_ASSIGN_OR_RETURN(IoRates r, MeasureIoRates("/nvme", 256 << 20, IoOptions{}));
//   double seconds = bytes / (r.read_gbps * 1e9);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "zero/aio/aligned_buffer.h"
#include "zero/aio/io_engine.h"

namespace ds::zero {

struct IoResult {
  double gbps = 0;                 // median over loops (1e9 bytes per second, end to end)
  double task_s = 0;               // median: submit to completion
  double e2e_s = 0;                // median: with the fdatasync of writes
  std::vector<int64_t> latencies;  // every piece of every loop, ns (IoOptions::record_latency)
};

// `loops` transfers of `size` bytes between the file at `path` and `buf`, timed; a write to a
// file it creates gets one untimed pass first, so writes go over laid-out blocks (as a swap file
// after its first step).
StatusOr<IoResult> MeasureIoDirection(const IoOptions& o, const std::string& path,
                                      AlignedBuffer& buf, int64_t size, bool write, int loops);

struct IoRates {
  double read_gbps = 0, write_gbps = 0;
};

// One file of `size` bytes in `dir` written, then read, once each; the file is removed.
StatusOr<IoRates> MeasureIoRates(const std::string& dir, int64_t size, const IoOptions& o);

}  // namespace ds::zero
