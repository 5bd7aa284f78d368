// ds-io-bench: what the swapper's I/O engine moves on this machine, as DeepSpeed's ds_io
// measures its aio library. Writes and reads one file of --size bytes with O_DIRECT through
// IoEngine and prints, per direction, the median over --loops of GB/s (1e9 bytes; GiB/s
// beside), per-piece latency percentiles, the task time (submit to completion) and the
// end-to-end time (with the fdatasync of writes). --sweep tries block_size {1M, 8M} x
// queue_depth {8, 32, 128} x single_submit {false, true} x intra_op_parallelism {1, 2, 4} and
// prints the best as an `aio` block a job config takes as it is. A file it creates gets one
// untimed write first, so writes overwrite laid-out blocks (as fio's reused file and a swap
// file after its first step).
//
//   bin/ds-io-bench --path /nvme --size 1G
//   bin/ds-io-bench --path /nvme --size 256M --sweep
//   bin/ds-io-bench --path /nvme --config job.yaml        (the job's aio block)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/config/job_config.h"
#include "zero/aio/aligned_buffer.h"
#include "zero/aio/io_engine.h"
#include "zero/aio/io_rates.h"

namespace ds::zero {
namespace {

double Percentile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]);
}

void Print(const char* dir, IoResult& r, bool direct) {
  std::printf(
      "%-5s %7.3f GB/s (%6.3f GiB/s)  latency ms p50 %.2f p90 %.2f p99 %.2f  task %.3f s"
      "  e2e %.3f s%s\n",
      dir, r.gbps, r.gbps * 1e9 / (1 << 30), Percentile(r.latencies, 0.5) / 1e6,
      Percentile(r.latencies, 0.9) / 1e6, Percentile(r.latencies, 0.99) / 1e6, r.task_s, r.e2e_s,
      direct ? "" : "  (buffered: the filesystem refused O_DIRECT)");
}

std::string AioJson(const IoOptions& o) {
  return "{\"aio\": {\"block_size\": " + std::to_string(o.block_size) +
         ", \"queue_depth\": " + std::to_string(o.queue_depth) +
         ", \"intra_op_parallelism\": " + std::to_string(o.intra_op_parallelism) +
         ", \"single_submit\": " + (o.single_submit ? "true" : "false") +
         ", \"overlap_events\": " + (o.overlap_events ? "true" : "false") + "}}";
}

int64_t ParseSize(const std::string& s) {
  const char unit = s.empty() ? 0 : s.back();
  const int64_t mult = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
  return std::stoll(mult == 1 ? s : s.substr(0, s.size() - 1)) * mult;
}

int Sweep(const std::string& path, AlignedBuffer& buf, int64_t size, int loops) {
  IoOptions best_r, best_w;
  double best_read = 0, best_write = 0, best_both = 0;
  IoOptions best;
  for (int64_t block : {int64_t{1} << 20, int64_t{8} << 20})
    for (int qd : {8, 32, 128})
      for (bool single : {false, true})
        for (int par : {1, 2, 4}) {
          IoOptions o{block, qd, par, single, true, true};
          auto w = MeasureIoDirection(o, path, buf, size, true, loops);
          auto r = MeasureIoDirection(o, path, buf, size, false, loops);
          if (!w.ok() || !r.ok()) {
            std::fprintf(stderr, "ds-io-bench: %s\n",
                         (w.ok() ? r.status() : w.status()).ToString().c_str());
            return 1;
          }
          std::printf("block %5lldK qd %3d single %d par %d: write %6.3f read %6.3f GB/s\n",
                      static_cast<long long>(block >> 10), qd, single, par, w->gbps, r->gbps);
          if (w->gbps > best_write) best_write = w->gbps, best_w = o;
          if (r->gbps > best_read) best_read = r->gbps, best_r = o;
          if (w->gbps + r->gbps > best_both) best_both = w->gbps + r->gbps, best = o;
        }
  std::printf("best write %.3f GB/s: %s\n", best_write, AioJson(best_w).c_str());
  std::printf("best read  %.3f GB/s: %s\n", best_read, AioJson(best_r).c_str());
  std::printf("best both (for a job config):\n%s\n", AioJson(best).c_str());
  return 0;
}

// --config: the job config's aio block replaces the I/O options.
Status ApplyJobAio(const std::string& config_path, IoOptions* o) {
  StatusOr<config::JobConfig> job = config::LoadJobConfig(config_path);
  if (!job.ok()) return job.status();
  o->block_size = job->aio.block_size;
  o->queue_depth = job->aio.queue_depth;
  o->intra_op_parallelism = job->aio.intra_op_parallelism;
  o->single_submit = job->aio.single_submit;
  o->overlap_events = job->aio.overlap_events;
  return OkStatus();
}

// Measures and prints each direction --only picks (both when empty) with the options `o`, or
// the --sweep grid, then removes the test file (not when the write that prepares --only read
// fails); returns the exit code.
int Bench(const IoOptions& o, const std::string& dir, int64_t size, int loops, bool sweep,
          const std::string& only) {
  const std::string path = dir + "/ds_io_bench." + std::to_string(::getpid()) + ".dat";
  auto buf = AlignedBuffer::Allocate(size);
  if (!buf.ok())
    return std::fprintf(stderr, "ds-io-bench: %s\n", buf.status().ToString().c_str()), 1;
  int rc = 0;
  if (sweep) {
    rc = Sweep(path, *buf, size, loops);
  } else {
    std::printf("ds-io-bench: %s, %.3f GB, %s\n", path.c_str(), size / 1e9, AioJson(o).c_str());
    for (bool write : {true, false}) {
      if (!only.empty() && only != (write ? "write" : "read")) continue;
      if (!write && only == "read") {  // a file to read
        auto w = MeasureIoDirection(o, path, *buf, size, true, 1);
        if (!w.ok())
          return std::fprintf(stderr, "ds-io-bench: %s\n", w.status().ToString().c_str()), 1;
      }
      auto r = MeasureIoDirection(o, path, *buf, size, write, loops);
      if (!r.ok()) {
        std::fprintf(stderr, "ds-io-bench: %s\n", r.status().ToString().c_str());
        rc = 1;
        break;
      }
      auto f = IoFile::Open(path, IoFile::kRead);
      Print(write ? "write" : "read", *r, f.ok() && f->direct());
    }
  }
  ::unlink(path.c_str());
  return rc;
}

int Main(int argc, char** argv) {
  CLI::App app{"ds-io-bench: GB/s of the swapper's I/O engine on a directory"};
  std::string dir = ".", size_text = "256M", only;
  IoOptions o;
  o.record_latency = true;
  int loops = 3;
  bool sweep = false;
  app.add_option("--path", dir, "directory of the test file (the nvme_path to be)");
  app.add_option("--size", size_text, "file size, bytes or with K/M/G (binary)");
  app.add_option("--block_size", o.block_size, "bytes per request");
  app.add_option("--queue_depth", o.queue_depth, "requests in flight per worker");
  app.add_option("--intra_op_parallelism", o.intra_op_parallelism, "workers (rings)");
  app.add_flag("--single_submit", o.single_submit, "one submit per request");
  app.add_option("--overlap_events", o.overlap_events, "refill as completions arrive (true)");
  app.add_option("--loops", loops, "repetitions per direction; the median is printed");
  app.add_option("--only", only, "read or write (default: both)");
  app.add_flag("--sweep", sweep, "try the grid and print the best aio block");
  std::string config_path;
  app.add_option("--config", config_path, "a job config whose aio block sets the options");
  CLI11_PARSE(app, argc, argv);
  if (!config_path.empty()) {
    if (Status s = ApplyJobAio(config_path, &o); !s.ok())
      return std::fprintf(stderr, "ds-io-bench: %s\n", s.ToString().c_str()), 2;
  }
  const int64_t size = ParseSize(size_text);
  if (Status s = CheckIoOptions(o); !s.ok() || size < 1 || loops < 1) {
    std::fprintf(stderr, "ds-io-bench: %s\n",
                 s.ok() ? "--size and --loops must be >= 1" : s.ToString().c_str());
    return 2;
  }
  return Bench(o, dir, size, loops, sweep, only);
}

}  // namespace
}  // namespace ds::zero

int main(int argc, char** argv) { return ds::zero::Main(argc, argv); }
