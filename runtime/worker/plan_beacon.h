// Where this rank is in its plan: the step runner marks each instruction before it runs it, the
// training loop marks what it does between steps, and the progress reporter's thread samples
// it for the coordinator's hang diagnosis (launcher/coordinator/hang.h). Relaxed atomics: a
// sample, not a synchronisation; the instruction pointed to lives in the plan, which outlives
// the runner.
//
//   beacon.Enter(step, index, &instruction);   // StepRunner, before each instruction
//   beacon.Outside(step, "validation");         // the training loop
//   BeaconSample s = beacon.Sample();            // the reporter's thread
//
// A test hook (fault injection): ArmHang(step, kind) makes the first instruction of that kind
// in that step sleep until the process is killed, inside the instruction the plan is at.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "proto/plan.pb.h"
#include "runtime/core/proto_dtype.h"

namespace ds::worker {

struct BeaconSample {
  int64_t step = 0;      // from 1; 0: before the first step
  int instruction = -1;  // -1: outside a step
  std::string kind;      // the instruction's kind, or what the rank does outside a step
  std::string group;     // a collective's group
  int64_t bytes = 0;     // a collective's payload
};

class PlanBeacon {
 public:
  void Enter(int64_t step, int index, const proto::Instruction* instruction) {
    outside_.store(nullptr, std::memory_order_relaxed);
    instruction_.store(instruction, std::memory_order_relaxed);
    index_.store(index, std::memory_order_relaxed);
    step_.store(step, std::memory_order_relaxed);
    if (step == hang_step_ && instruction->kind() == hang_kind_) HangHere();
  }
  // `what` must be a string literal (it is kept by pointer).
  void Outside(int64_t step, const char* what) {
    outside_.store(what, std::memory_order_relaxed);
    index_.store(-1, std::memory_order_relaxed);
    step_.store(step, std::memory_order_relaxed);
  }
  BeaconSample Sample() const {
    BeaconSample s;
    s.step = step_.load(std::memory_order_relaxed);
    s.instruction = index_.load(std::memory_order_relaxed);
    const char* outside = outside_.load(std::memory_order_relaxed);
    const proto::Instruction* in = instruction_.load(std::memory_order_relaxed);
    if (outside || s.instruction < 0 || !in) {
      s.instruction = -1;
      s.kind = outside ? outside : "starting";
      return s;
    }
    s.kind = proto::Instruction::Kind_Name(in->kind());
    if (in->has_collective()) {
      s.group = in->collective().group();
      s.bytes = in->collective().count() * ProtoDTypeSize(in->collective().dtype());
    }
    return s;
  }
  // The test hook: sleep in the first `kind` instruction of `step` (see the file comment).
  void ArmHang(int64_t step, proto::Instruction::Kind kind) {
    hang_step_ = step;
    hang_kind_ = kind;
  }

 private:
  void HangHere() {
    hang_step_ = -1;
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // until killed
  }

  std::atomic<int64_t> step_{0};
  std::atomic<int> index_{-1};
  std::atomic<const proto::Instruction*> instruction_{nullptr};
  std::atomic<const char*> outside_{nullptr};
  int64_t hang_step_ = -1;
  proto::Instruction::Kind hang_kind_ = proto::Instruction::FORWARD;
};

}  // namespace ds::worker
