// Note [Optimizer swapping]: offload_optimizer device nvme, ZeRO-Infinity's optimizer swapper.
//
// Each rank's shard positions [0, shard_elements) are cut into sub-groups of sub_group_size
// elements (rounded up to kSwapAlign, 2048: whole 4 KiB pages of fp32 and of 16-bit values).
// A sub-group's `states` fp32 arrays (the master when it is separate from the model copy, then
// exp_avg, exp_avg_sq or SGD's momentum buffer) lie end to end in the rank's swap file, each
// rounded up to whole pages, so one sub-group moves in one O_DIRECT transfer. The step reads a
// sub-group into a swap buffer, steps it there (reading the in-memory gradients, writing the 16-bit
// copy in memory) and writes it back.
//
// Buffers count as DeepSpeed's buffer_count does: buffers of the largest sub-group, one per
// state array, so a sub-group in flight takes `states` of them and there are
// slots = buffer_count / states swap buffers. The schedule is greedy over the slots:
//   - pipeline_read: sub-group i+1 is read (async) before i steps, and the first reads are
//     issued before the gradient-norm reduction; else each read is synchronous;
//   - pipeline_write: the write of i is async and completes when its slot is next needed or at
//     the end of the step; else it is synchronous;
//   - a read that finds no free slot first waits for the oldest write.
// With slots >= 3 both pipelines run: read i+1, step i and write i-1 at once, as DeepSpeed's
// PipelinedOptimizerSwapper does. The gradients stay in memory (16-bit shard or flat): only the
// states a step carries over are swapped.
#include <algorithm>
#include <deque>
#include <map>
#include <string>

#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

std::string StateNames(const Context& ctx, int states) {
  std::string s;
  const bool master = states > ctx.config.optimizer_states;
  const char* adam[] = {"exp_avg", "exp_avg_sq"};
  if (master) s = "the fp32 master";
  for (int i = 0; i < ctx.config.optimizer_states; ++i)
    s += std::string(s.empty() ? "" : ", ") +
         (ctx.config.optimizer_states == 1 ? "momentum_buffer" : adam[i]);
  return s.empty() ? Str(states) + " states" : s;
}

// The greedy schedule over the swap buffers (the Note).
class SwapSchedule {
 public:
  SwapSchedule(const Context& ctx, Stream* stream) : ctx_(ctx), s_(stream) {
    for (int i = 0; i < ctx.swap.slots(); ++i) free_.push_back(i);
  }

  void Read(int k) {
    proto::Instruction in = Swap(proto::Instruction::SWAP_IN, k, AcquireSlot(&pending_wait_));
    in.set_async(ctx_.config.pipeline_read);
    const int slot = in.swap().slot();
    in.add_allocs(Buffer(slot));
    in.add_writes(Buffer(slot));
    reads_[k] = {s_->Add(std::move(in)), slot};
  }

  // A slot is free, or one will be once the oldest write completes.
  bool CanAcquire() const { return !free_.empty() || !writes_.empty(); }

  void Step(int k) {
    proto::Instruction in = StepInstruction(ctx_);
    const Slot r = reads_.at(k);
    if (ParamBuffer(r.slot) >= 0) in.add_allocs(ParamBuffer(r.slot));  // the 16-bit pages
    if (ctx_.config.pipeline_read) in.add_wait_for(r.instruction);
    in.mutable_swap()->set_sub_group(k);
    in.mutable_swap()->set_slot(r.slot);
    in.add_reads(Buffer(r.slot));
    in.add_writes(Buffer(r.slot));
    s_->Add(std::move(in));
  }

  void Write(int k) {
    const Slot r = reads_.at(k);
    proto::Instruction in = Swap(proto::Instruction::SWAP_OUT, k, r.slot);
    in.add_reads(Buffer(r.slot));
    in.set_async(ctx_.config.pipeline_write);
    if (!in.async()) {
      in.add_frees(Buffer(r.slot));
      if (ParamBuffer(r.slot) >= 0) in.add_frees(ParamBuffer(r.slot));
    }
    const int idx = s_->Add(std::move(in));
    if (ctx_.config.pipeline_write)
      writes_.push_back({idx, r.slot});
    else
      free_.push_back(r.slot);
  }

  // Writes still in flight complete at the step's end (the stream's last WaitAll).
  void Finish() {
    for (const Slot& w : writes_)
      s_->pending.push_back({w.instruction, Buffer(w.slot), ParamBuffer(w.slot)});
    writes_.clear();
  }

 private:
  struct Slot {
    int instruction = -1;
    int slot = -1;
  };

  int Buffer(int slot) const { return ctx_.buf.swap_slots[slot]; }
  int ParamBuffer(int slot) const {
    return ctx_.buf.param_slots.empty() ? -1 : ctx_.buf.param_slots[slot];
  }

  proto::Instruction Swap(proto::Instruction::Kind kind, int k, int slot) {
    proto::Instruction in;
    in.set_kind(kind);
    in.set_micro_batch(-1);
    in.mutable_swap()->set_sub_group(k);
    in.mutable_swap()->set_slot(slot);
    for (const Slot& w : pending_wait_) {
      in.add_wait_for(w.instruction);
      in.add_frees_before(Buffer(w.slot));
      if (ParamBuffer(w.slot) >= 0) in.add_frees_before(ParamBuffer(w.slot));
    }
    pending_wait_.clear();
    return in;
  }

  // A free slot, waiting for the oldest write when there is none (recorded in `waits`).
  int AcquireSlot(std::vector<Slot>* waits) {
    if (free_.empty()) {
      const Slot w = writes_.front();
      writes_.pop_front();
      waits->push_back(w);
      free_.push_back(w.slot);
    }
    const int slot = free_.front();
    free_.pop_front();
    return slot;
  }

  const Context& ctx_;
  Stream* s_;
  std::deque<int> free_;
  std::deque<Slot> writes_;  // async writes in issue order
  std::map<int, Slot> reads_;
  std::vector<Slot> pending_wait_;
};

}  // namespace

Status MakeSwapPlan(const Context& ctx, int64_t shard_elements, proto::SwapPlan* swap) {
  const PlanConfig& c = ctx.config;
  // The master is swapped when it is separate from the model copy, and in fp32 when the
  // parameters are: the parameter shard is then the master itself (param_swap_stream.cc).
  const bool master = c.model_dtype != DType::kF32 || c.param_nvme;
  const int states = (master ? 1 : 0) + c.optimizer_states;
  const std::string key = "zero_optimization.offload_optimizer.buffer_count";
  if (states == 0)
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer: device nvme has nothing to swap: fp32 SGD without "
        "momentum keeps no optimizer state");
  if (c.swap_buffer_count < states)
    return InvalidArgumentError(key + " " + Str(c.swap_buffer_count) +
                                " is too small: a sub-group needs " + Str(states) +
                                " buffers, one each for " + StateNames(ctx, states));
  const int64_t sub = AlignUp(std::max<int64_t>(1, c.sub_group_size), kSwapAlign);
  swap->set_states(states);
  swap->set_master(master);
  swap->set_slots(c.swap_buffer_count / states);
  int64_t offset = 0, largest = 0;
  for (int64_t begin = 0; begin < shard_elements; begin += sub) {
    proto::SubGroup* g = swap->add_sub_groups();
    g->set_shard_begin(begin);
    g->set_count(std::min(sub, shard_elements - begin));
    g->set_stride(AlignUp(g->count(), kSwapAlign));
    g->set_file_offset(offset);
    offset += g->stride() * states * static_cast<int64_t>(sizeof(float));
    largest = std::max(largest, g->stride());
  }
  swap->set_file_bytes(offset);
  swap->set_slot_bytes(largest * states * static_cast<int64_t>(sizeof(float)));
  if (c.param_nvme) {
    swap->set_params(true);
    // fp32: no second file (the master in optimizer.swp is the parameter shard).
    if (c.model_dtype != DType::kF32)
      swap->set_param_file_bytes(shard_elements * static_cast<int64_t>(DTypeSize(c.model_dtype)));
  }
  return OkStatus();
}

void EmitOptimizerSteps(const Context& ctx, std::vector<proto::Instruction> scalars,
                        Stream* stream) {
  const int n = ctx.swap.sub_groups_size();
  if (n == 0) {
    for (proto::Instruction& in : scalars) stream->Add(std::move(in));
    stream->Add(StepInstruction(ctx));
    return;
  }
  SwapSchedule schedule(ctx, stream);
  const bool ahead = ctx.config.pipeline_read;
  // The first reads overlap the norm's reduction: all but one slot (one with a single slot).
  const int early = ahead ? std::min(n, std::max(1, ctx.swap.slots() - 1)) : 0;
  int next = 0;
  while (next < early) schedule.Read(next++);
  for (proto::Instruction& in : scalars) stream->Add(std::move(in));
  for (int k = 0; k < n; ++k) {
    if (next == k) schedule.Read(next++);
    if (ahead && next == k + 1 && next < n && schedule.CanAcquire()) schedule.Read(next++);
    schedule.Step(k);
    schedule.Write(k);
  }
  schedule.Finish();
}

}  // namespace ds::zero::internal
