// The optimizer swap schedule of offload_optimizer nvme (Note [Optimizer swapping] in
// swap_stream.cc), checked by replaying every rank's instructions: each sub-group is read, stepped
// and written once, in that order; a buffer is never read into while another sub-group's data is
// still in it or on its way to the file; the steps cover exactly what the unswapped step updates.
#include <map>
#include <set>
#include <vector>

#include "runtime/planner/plan_test_util.h"

namespace ds::plan {
namespace {

using planner::testing::BaseConfig;
using planner::testing::MustPlan;
using planner::testing::PresetGraph;
using proto::Instruction;

PlanConfig SwapConfig(int stage, int buffer_count, bool read, bool write, int64_t sub_group) {
  PlanConfig c = BaseConfig(stage);
  c.optimizer_nvme = true;
  c.swap_buffer_count = buffer_count;
  c.pipeline_read = read;
  c.pipeline_write = write;
  c.sub_group_size = sub_group;
  return c;
}

// Flat elements the rank's OPTIMIZER_STEPs update, each element once.
std::map<int64_t, int64_t> Stepped(const proto::RankPlan& rp) {
  std::map<int64_t, int64_t> covered;
  for (const Instruction& in : rp.instructions())
    if (in.kind() == Instruction::OPTIMIZER_STEP)
      for (const proto::ParamRange& r : in.ranges()) {
        INFO("range at " << r.offset());
        REQUIRE(covered.count(r.offset()) == 0);
        covered[r.offset()] = r.count();
      }
  // Merge adjacent ranges so that a split step compares equal to a whole one.
  std::map<int64_t, int64_t> merged;
  for (const auto& [lo, n] : covered) {
    if (!merged.empty()) {
      auto last = std::prev(merged.end());
      if (last->first + last->second == lo) {
        last->second += n;
        continue;
      }
    }
    merged[lo] = n;
  }
  return merged;
}

// Replays one rank: which sub-group each slot holds, and whether its write is still in flight.
void CheckSchedule(const proto::Plan& plan, const proto::RankPlan& rp) {
  const int n = plan.swap().sub_groups_size();
  const auto& list = rp.instructions();
  std::map<int, int> owner;    // slot -> sub-group in it
  std::map<int, int> writing;  // slot -> SWAP_OUT index still in flight
  std::map<int, int> reading;  // sub-group -> SWAP_IN index (async, not yet waited)
  std::vector<int> read(n, 0), stepped(n, 0), written(n, 0);
  for (int i = 0; i < list.size(); ++i) {
    const Instruction& in = list[i];
    for (int w : in.wait_for()) {
      for (auto it = writing.begin(); it != writing.end();)
        it = it->second == w ? writing.erase(it) : std::next(it);
      for (auto it = reading.begin(); it != reading.end();)
        it = it->second == w ? reading.erase(it) : std::next(it);
    }
    if (!in.has_swap()) continue;
    const int k = in.swap().sub_group(), slot = in.swap().slot();
    INFO("instruction " << i << " " << Instruction::Kind_Name(in.kind()) << " sub-group " << k
                        << " slot " << slot);
    REQUIRE(slot >= 0);
    REQUIRE(slot < plan.swap().slots());
    switch (in.kind()) {
      case Instruction::SWAP_IN:
        REQUIRE(owner.count(slot) == 0);    // the slot is empty
        REQUIRE(writing.count(slot) == 0);  // and no write reads from it any more
        owner[slot] = k;
        ++read[k];
        if (in.async()) reading[k] = i;
        break;
      case Instruction::OPTIMIZER_STEP:
        REQUIRE(owner.at(slot) == k);
        REQUIRE(reading.count(k) == 0);  // its read completed
        REQUIRE(read[k] == 1);
        ++stepped[k];
        break;
      case Instruction::SWAP_OUT:
        REQUIRE(owner.at(slot) == k);
        REQUIRE(stepped[k] == 1);
        owner.erase(slot);
        if (in.async()) writing[slot] = i;
        ++written[k];
        break;
      default:
        FAIL("a swap reference on " << Instruction::Kind_Name(in.kind()));
    }
  }
  REQUIRE(writing.empty());  // the step waits for every write
  for (int k = 0; k < n; ++k) {
    INFO("sub-group " << k);
    REQUIRE(read[k] == 1);
    REQUIRE(stepped[k] == 1);
    REQUIRE(written[k] == 1);
  }
}

TEST_CASE("Swap plan: sub-groups tile the shard in aligned file regions", "[plan][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  const proto::Plan plan = MustPlan(g, 2, SwapConfig(2, 6, true, true, 3000));
  const proto::SwapPlan& s = plan.swap();
  REQUIRE(s.states() == 3);  // bf16: master, exp_avg, exp_avg_sq
  REQUIRE(s.master());
  REQUIRE(s.slots() == 2);
  int64_t pos = 0, offset = 0, largest = 0;
  for (const proto::SubGroup& sg : s.sub_groups()) {
    REQUIRE(sg.shard_begin() == pos);
    REQUIRE(sg.count() <= 4096);  // 3000 rounded up to 2048
    REQUIRE(sg.stride() % 2048 == 0);
    REQUIRE(sg.stride() >= sg.count());
    REQUIRE(sg.file_offset() == offset);
    REQUIRE(sg.file_offset() % 4096 == 0);
    pos += sg.count();
    offset += sg.stride() * 3 * 4;
    largest = std::max(largest, sg.stride());
  }
  REQUIRE(pos == plan.partition().shard_elements());
  REQUIRE(s.file_bytes() == offset);
  REQUIRE(s.slot_bytes() == largest * 3 * 4);
  REQUIRE(s.sub_groups_size() > 3);
  // The master and optimizer states are in the file, not in memory.
  for (const proto::PlanBuffer& b : plan.buffers()) {
    const bool swapped = b.kind() == proto::PlanBuffer::MASTER_WEIGHTS ||
                         b.kind() == proto::PlanBuffer::OPTIMIZER_STATE;
    REQUIRE(b.nvme() == swapped);
  }
  const proto::Plan plain = MustPlan(g, 2, BaseConfig(2));
  REQUIRE(plan.ranks(0).memory().model_state_bytes() < plain.ranks(0).memory().model_state_bytes());
}

TEST_CASE("Swap plan: every schedule reads, steps and writes each sub-group once, in its slot",
          "[plan][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  for (int stage : {1, 2, 3})
    for (int world : {1, 2})
      for (int buffers : {3, 4, 6, 9, 12})
        for (bool read : {false, true})
          for (bool write : {false, true}) {
            INFO("stage " << stage << " world " << world << " buffer_count " << buffers << " read "
                          << read << " write " << write);
            const proto::Plan plan =
                MustPlan(g, world, SwapConfig(stage, buffers, read, write, 2048));
            const proto::Plan whole = MustPlan(g, world, BaseConfig(stage));
            for (const proto::RankPlan& rp : plan.ranks()) {
              CheckSchedule(plan, rp);
              REQUIRE(Stepped(rp) == Stepped(whole.ranks(rp.rank())));
              int64_t swap_peak = 0;  // MakePlan walked the memory timeline
              for (const proto::KindBytes& k : rp.memory().peak_by_kind())
                if (k.kind() == proto::PlanBuffer::SWAP_BUFFER) swap_peak = k.bytes();
              REQUIRE(swap_peak <= plan.swap().slots() * plan.swap().slot_bytes());
              REQUIRE(swap_peak > 0);
            }
          }
}

TEST_CASE("Swap plan: pipelining overlaps the next read and the last write with a step",
          "[plan][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  const proto::Plan plan = MustPlan(g, 1, SwapConfig(2, 9, true, true, 2048));
  REQUIRE(plan.swap().slots() == 3);
  const auto& list = plan.ranks(0).instructions();
  int overlapped = 0;
  for (int i = 0; i < list.size(); ++i) {
    const Instruction& in = list[i];
    if (in.kind() != Instruction::OPTIMIZER_STEP) continue;
    const int k = in.swap().sub_group();
    if (k == 0 || k + 1 == plan.swap().sub_groups_size()) continue;
    // Before step k: the read of k + 1 was issued and the write of k - 1 is still in flight.
    bool next_read = false, last_write_pending = false;
    std::set<int> waited;
    for (int j = 0; j < i; ++j)
      for (int w : list[j].wait_for()) waited.insert(w);
    for (int j = 0; j < i; ++j) {
      const Instruction& p = list[j];
      if (p.kind() == Instruction::SWAP_IN && p.swap().sub_group() == k + 1) next_read = true;
      if (p.kind() == Instruction::SWAP_OUT && p.swap().sub_group() == k - 1 && p.async() &&
          !waited.count(j))
        last_write_pending = true;
    }
    overlapped += next_read && last_write_pending;
  }
  REQUIRE(overlapped == plan.swap().sub_groups_size() - 2);
  // Without the pipelines every swap is synchronous.
  const proto::Plan serial = MustPlan(g, 1, SwapConfig(2, 9, false, false, 2048));
  for (const Instruction& in : serial.ranks(0).instructions())
    if (in.has_swap()) REQUIRE_FALSE(in.async());
}

TEST_CASE("Swap plan: too few buffers for one sub-group is refused with the numbers",
          "[plan][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  auto plan = planner::MakePlan(g, Topology{1, 1}, SwapConfig(2, 2, false, false, 1 << 20));
  REQUIRE_FALSE(plan.ok());
  const std::string m = plan.status().message();
  INFO(m);
  REQUIRE(m.find("offload_optimizer.buffer_count 2 is too small") != std::string::npos);
  REQUIRE(m.find("needs 3 buffers") != std::string::npos);
  REQUIRE(m.find("exp_avg_sq") != std::string::npos);
  PlanConfig fp32 = SwapConfig(2, 2, false, false, 1 << 20);
  fp32.model_dtype = fp32.comm_dtype = DType::kF32;  // m and v only: two buffers are enough
  REQUIRE(planner::MakePlan(g, Topology{1, 1}, fp32).ok());
}

}  // namespace
}  // namespace ds::plan

namespace ds::plan {
namespace {

PlanConfig ParamSwapConfig(int64_t buffer_size = 100000000) {
  PlanConfig c = BaseConfig(3);
  c.optimizer_nvme = true;
  c.swap_buffer_count = 6;
  c.pipeline_read = c.pipeline_write = true;
  c.sub_group_size = 4096;
  c.param_nvme = true;
  c.param_buffer_size = buffer_size;
  c.prefetch_bucket_size = 4000;
  c.param_persistence_threshold = 100;
  return c;
}

TEST_CASE("Swap plan: each gather waits for a swap-in of its units, issued one gather ahead",
          "[plan][swap]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  for (int world : {1, 2}) {
    INFO("world " << world);
    const proto::Plan plan = planner::testing::MustPlan(g, world, ParamSwapConfig());
    REQUIRE(plan.swap().params());
    for (const proto::PartitionUnit& u : plan.partition().units()) {
      REQUIRE(u.chunk() % 2048 == 0);  // whole 4 KiB pages of bf16
      REQUIRE(u.shard_offset() % 2048 == 0);
    }
    REQUIRE(plan.swap().param_file_bytes() == plan.partition().shard_elements() * 2);
    const auto& list = plan.ranks(0).instructions();
    int previous_gather = -1, gathers = 0;
    for (int i = 0; i < list.size(); ++i) {
      if (list[i].kind() != Instruction::GATHER_PARAMS) continue;
      ++gathers;
      int found = -1;
      for (int w : list[i].wait_for())
        if (list[w].kind() == Instruction::SWAP_IN && list[w].swap().sub_group() < 0) found = w;
      INFO("gather at " << i);
      REQUIRE(found >= 0);
      REQUIRE(std::vector<int>(list[found].units().begin(), list[found].units().end()) ==
              std::vector<int>(list[i].units().begin(), list[i].units().end()));
      REQUIRE(found > previous_gather);  // issued after the previous gather, not before
      previous_gather = i;
    }
    REQUIRE(gathers >= 3);
    // The 16-bit shard is not resident: the plan's peak is below the unswapped one's.
    const proto::Plan plain = planner::testing::MustPlan(g, world, BaseConfig(3));
    REQUIRE(plan.ranks(0).memory().model_state_bytes() <
            plain.ranks(0).memory().model_state_bytes());
  }
}

// fp32: the parameter shard is the master itself: swapped as the first of the sub-groups' three
// arrays in the optimizer file, with no second file; the shard is not resident.
TEST_CASE("Swap plan: fp32 parameters swap as the master, in the optimizer file", "[plan][swap]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  PlanConfig c = ParamSwapConfig();
  c.model_dtype = c.comm_dtype = DType::kF32;
  const proto::Plan plan = planner::testing::MustPlan(g, 2, c);
  REQUIRE(plan.swap().params());
  REQUIRE(plan.swap().master());
  REQUIRE(plan.swap().states() == 3);  // the master (the parameters), exp_avg, exp_avg_sq
  REQUIRE(plan.swap().param_file_bytes() == 0);
  for (const proto::PlanBuffer& b : plan.buffers()) {
    INFO(b.name());
    if (b.kind() == proto::PlanBuffer::PARAM_SHARD ||
        b.kind() == proto::PlanBuffer::OPTIMIZER_STATE)
      REQUIRE(b.nvme());
    REQUIRE(b.kind() != proto::PlanBuffer::MASTER_WEIGHTS);  // no copy besides the shard
  }
  PlanConfig optimizer_only = c;
  optimizer_only.param_nvme = false;
  const proto::Plan states = planner::testing::MustPlan(g, 2, optimizer_only);
  REQUIRE_FALSE(states.swap().master());  // without offload_param the shard stays in memory
  REQUIRE(states.swap().states() == 2);
  REQUIRE(plan.swap().file_bytes() > states.swap().file_bytes());
  REQUIRE(plan.ranks(0).memory().model_state_bytes() <
          states.ranks(0).memory().model_state_bytes());
}

TEST_CASE("Swap plan: parameter buffers too small, or no optimizer swap, are refused",
          "[plan][swap]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  auto small = planner::MakePlan(g, Topology{1, 1}, ParamSwapConfig(1000));
  REQUIRE_FALSE(small.ok());
  INFO(small.status().message());
  REQUIRE(small.status().message().find("offload_param.buffer_size 1000 elements is smaller") !=
          std::string::npos);
  REQUIRE(small.status().message().find("raise it to at least") != std::string::npos);
  PlanConfig alone = ParamSwapConfig();
  alone.optimizer_nvme = false;
  auto refused = planner::MakePlan(g, Topology{1, 1}, alone);
  REQUIRE_FALSE(refused.ok());
  REQUIRE(refused.status().message().find("needs offload_optimizer device nvme") !=
          std::string::npos);
}

}  // namespace
}  // namespace ds::plan
