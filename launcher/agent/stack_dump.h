// Thread stacks of a running worker, for the coordinator's hang reports (DUMP_STACKS).
//
// CaptureStacks runs `eu-stack -p PID` (elfutils) when it is on PATH, else
// `gdb -p PID -batch -nx -ex "thread apply all bt"`, as a child with a time limit, and returns
// what it printed (stdout and stderr, capped) or why there is nothing. StackDumper runs one
// capture per requested rank on its own thread, so the agent's heartbeat loop never waits, and
// sends each result to the coordinator with ReportStacks.
//
// Attaching needs ptrace rights: under Yama ptrace_scope 1 the worker names the agent as its
// ptracer (runtime/worker/worker_main.cc), which covers the tools the agent starts.
//
//   StackDumper dumper(node_name, client, /*reap=*/false);
//   dumper.Request(round, rank, pid);   // returns at once; the report follows
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/coordinator/coordinator_client.h"

namespace ds::launcher {

struct CaptureOptions {
  std::chrono::milliseconds timeout{15000};  // then the tool is killed
  size_t max_bytes = 64 * 1024;              // output kept; the rest is dropped, "... (cut)"
  // Reap the tool here. Leave false while a Supervisor with EnableSubreaper runs: its loop
  // reaps every child of the process, and waiting for a pid it reaped could take another one.
  bool reap = false;
  const std::atomic<bool>* cancel = nullptr;  // set: kill the tool and return at once
};

struct StackCapture {
  std::string tool;  // "eu-stack", "gdb", or "" when neither is on PATH
  std::string text;  // every thread's stack as the tool printed it, or why there is none
  int64_t ms = 0;    // how long the capture took
};

// Captures every thread's stack of process `pid`. Blocks up to about options.timeout plus a
// few seconds to stop a tool that does not finish. Never fails: problems are in `text`.
StackCapture CaptureStacks(pid_t pid, const CaptureOptions& options);

// Captures and reports the stacks of the ranks a DUMP_STACKS reply names, each on its own
// thread. One capture at a time per rank; a rank whose report was sent in a round is not
// captured again in that round (a failed send is retried on the next request). Thread-safe.
class StackDumper {
 public:
  // `client` is borrowed and must outlive the dumper. `reap`: see CaptureOptions::reap.
  StackDumper(std::string node_name, CoordinatorClient* client, bool reap)
      : node_name_(std::move(node_name)), client_(client), reap_(reap) {}
  // Kills the tools still running (their reports are not sent) and joins the threads.
  ~StackDumper();
  StackDumper(const StackDumper&) = delete;
  StackDumper& operator=(const StackDumper&) = delete;

  // Starts a capture of `rank` (process `pid`) for `round` and returns at once; ignored while
  // one runs for `rank` or after one was sent for it in `round`.
  void Request(int round, int rank, pid_t pid);

 private:
  struct Slot {
    std::thread thread;
    bool running = false;
    int sent_round = -1;  // the round of the last report sent
  };
  // The body of a capture thread: capture, log, send, free the slot.
  void CaptureAndSend(int round, int rank, pid_t pid);

  const std::string node_name_;
  CoordinatorClient* const client_;
  const bool reap_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<int, Slot> slots_;  // by rank; guarded by mu_
};

}  // namespace ds::launcher
