// OptimizerSwapper against the in-memory optimizer: running a plan's SWAP_IN / OPTIMIZER_STEP /
// SWAP_OUT instructions gives bit-for-bit the master, moments and 16-bit copy of the unswapped
// step (AdamW in bf16 and fp32, SGD with momentum), Store() hands the staging pages back, the
// swap file and directory go with the swapper, a killed run's directory is removed, and a
// filesystem without room is refused with the key and both sizes before anything is written.
#include "zero/optimizer_swapper.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "proto/plan.pb.h"
#include "runtime/planner/plan_test_util.h"
#include "zero/optimizer.h"
#include "zero/param_store.h"
#include "zero/shard_layout.h"

namespace ds::zero {
namespace {

using planner::testing::BaseConfig;
using planner::testing::MustPlan;
using planner::testing::PresetGraph;

std::string TmpDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  mkdir(path.c_str(), 0700);
  return path;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

plan::PlanConfig SwapConfig(int stage, DType dtype, int buffers) {
  plan::PlanConfig c = BaseConfig(stage, dtype);
  c.optimizer_nvme = true;
  c.swap_buffer_count = buffers;
  c.pipeline_read = c.pipeline_write = true;
  c.sub_group_size = 2048;
  return c;
}

// One rank's model states, sharded as `plan` says.
struct States {
  States(const Graph& g, const proto::Plan& plan, DType dtype, const OptimizerOptions& o)
      : params(g, dtype) {
    params.Shard(LayoutFor(plan, 0, params.total_elements()));
    params.Initialize(g, 11);
    optimizer = std::make_unique<Optimizer>(o, &params);
  }
  ParamStore params;
  std::unique_ptr<Optimizer> optimizer;
};

void FillGrads(ParamStore* p, int step) {
  std::mt19937 gen(100 + step);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const ParamSlot& s : p->slots()) {
    Tensor g = p->GradView(s);
    for (int64_t i = 0; i < s.numel; ++i) StoreFloat(g.data(), p->model_dtype(), i, normal(gen));
  }
}

// The plan's swap instructions and sub-group steps, in order, waiting where the plan does.
void RunSwaps(const proto::Plan& plan, OptimizerSwapper* w, float lr, float scale) {
  CollectiveQueue queue;
  const auto& list = plan.ranks(0).instructions();
  for (int i = 0; i < list.size(); ++i) {
    const proto::Instruction& in = list[i];
    for (int wait : in.wait_for()) REQUIRE(queue.WaitFor(wait).ok());
    if (in.kind() == proto::Instruction::SWAP_IN || in.kind() == proto::Instruction::SWAP_OUT) {
      auto job = w->Start(in);
      REQUIRE(job.ok());
      REQUIRE(queue.Track(i, in.async(), std::move(job).value()).ok());
    } else if (in.kind() == proto::Instruction::OPTIMIZER_STEP) {
      REQUIRE(w->Step(in, lr, scale).ok());
    }
  }
  REQUIRE(queue.WaitAll().ok());
}

TEST_CASE("OptimizerSwapper: swapped sub-group steps equal the in-memory step bit for bit",
          "[zero][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  struct Case {
    DType dtype;
    OptimizerOptions::Type type;
    int buffers;
  };
  for (const Case c : {Case{DType::kBF16, OptimizerOptions::Type::kAdamW, 9},
                       Case{DType::kF32, OptimizerOptions::Type::kAdamW, 2},
                       Case{DType::kBF16, OptimizerOptions::Type::kSgd, 2}}) {
    for (int stage : {1, 3}) {
      INFO(DTypeName(c.dtype) << " stage " << stage << " buffers " << c.buffers);
      OptimizerOptions o;
      o.type = c.type;
      o.lr = 0.01f;
      o.weight_decay = 0.1f;
      o.momentum = 0.9f;
      plan::PlanConfig config = SwapConfig(stage, c.dtype, c.buffers),
                       whole = BaseConfig(stage, c.dtype);
      config.optimizer_states = whole.optimizer_states =
          c.type == OptimizerOptions::Type::kSgd ? 1 : 2;
      const proto::Plan plan = MustPlan(g, 1, config);
      const proto::Plan plain = MustPlan(g, 1, whole);
      REQUIRE(plan.swap().sub_groups_size() > 2);
      States ref(g, plain, c.dtype, o), swapped(g, plan, c.dtype, o);
      SwapperOptions so;
      so.nvme_path = TmpDir("swap_equal");
      auto w = OptimizerSwapper::Create(plan, so, &swapped.params, swapped.optimizer.get());
      REQUIRE(w.ok());
      const std::string file = (*w)->path();
      REQUIRE(Exists(file));
      REQUIRE((*w)->Store().ok());
      for (const auto& [role, bytes] : swapped.params.ResidentBytes())
        if (role == "master" && plan.swap().master()) CHECK(bytes < 65536);
      CHECK(swapped.optimizer->ResidentBytes() < 65536);
      for (int step = 0; step < 3; ++step) {
        FillGrads(&ref.params, step);
        FillGrads(&swapped.params, step);
        ref.optimizer->Step(0.01f, 0.5f);
        RunSwaps(plan, w->get(), 0.01f, 0.5f);
      }
      CHECK(swapped.optimizer->step() == 3);
      REQUIRE((*w)->Load().ok());
      const int64_t n = ref.params.shard_elements();
      CHECK(std::memcmp(ref.params.master_data(), swapped.params.master_data(), n * 4) == 0);
      const auto a = ref.optimizer->state(), b = swapped.optimizer->state();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(std::memcmp(a[i].data, b[i].data, n * 4) == 0);
      if (stage < 3)
        CHECK(std::memcmp(ref.params.model(), swapped.params.model(),
                          ref.params.total_elements() * DTypeSize(c.dtype)) == 0);
      else if (c.dtype != DType::kF32)
        CHECK(std::memcmp(ref.params.param_shard(), swapped.params.param_shard(),
                          n * DTypeSize(c.dtype)) == 0);
      const SwapStats stats = (*w)->TakeStats();
      CHECK(stats.bytes_read == stats.bytes_written);  // 3 steps, one Load, one Store each way
      CHECK(stats.bytes_read > 0);
      w->reset();
      CHECK_FALSE(Exists(file));
    }
  }
}

// offload_param nvme: the whole plan run on the swapper, gathers and steps by hand. The gathered
// parameters (what forward reads) and the shard after three steps equal the unswapped store's,
// and between uses only the persistent chunks stay resident.
TEST_CASE("OptimizerSwapper: swapped parameter chunks reach the gathers and come back updated",
          "[zero][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  plan::PlanConfig c = SwapConfig(3, DType::kBF16, 6);
  c.param_nvme = true;
  c.param_persistence_threshold = 100;
  c.prefetch_bucket_size = 4000;
  plan::PlanConfig whole = BaseConfig(3, DType::kBF16);
  whole.param_persistence_threshold = 100;
  const proto::Plan plan = MustPlan(g, 1, c);
  OptimizerOptions o;
  o.lr = 0.01f;
  States swapped(g, plan, DType::kBF16, o);
  // The reference: the same layout (the swap plan's 4 KiB chunks), kept in memory.
  States ref(g, plan, DType::kBF16, o);
  SwapperOptions so;
  so.nvme_path = TmpDir("swap_params");
  auto w = OptimizerSwapper::Create(plan, so, &swapped.params, swapped.optimizer.get());
  REQUIRE(w.ok());
  REQUIRE((*w)->Store().ok());
  int64_t persistent = 0;
  for (const proto::PartitionUnit& u : plan.partition().units())
    if (u.persistent()) persistent += u.chunk();
  auto shard_resident = [&]() {
    for (const auto& [role, bytes] : swapped.params.ResidentBytes())
      if (role == "params") return bytes;
    return size_t{0};
  };
  CHECK(shard_resident() <= static_cast<size_t>(persistent * 2 + 8192));
  const int64_t n = ref.params.shard_elements();
  for (int step = 0; step < 3; ++step) {
    FillGrads(&ref.params, step);
    FillGrads(&swapped.params, step);
    CollectiveQueue queue;
    const auto& list = plan.ranks(0).instructions();
    for (int i = 0; i < list.size(); ++i) {
      const proto::Instruction& in = list[i];
      for (int wait : in.wait_for()) REQUIRE(queue.WaitFor(wait).ok());
      if (in.kind() == proto::Instruction::GATHER_PARAMS) {
        for (int u : in.units()) {  // what the gather would copy out, then drop
          const proto::PartitionUnit& unit = plan.partition().units(u);
          CHECK(std::memcmp(
                    static_cast<char*>(swapped.params.param_shard()) + unit.shard_offset() * 2,
                    static_cast<char*>(ref.params.param_shard()) + unit.shard_offset() * 2,
                    unit.chunk() * 2) == 0);
          swapped.params.ReleaseParamShardRange(unit.shard_offset(), unit.chunk());
        }
      } else if (in.kind() == proto::Instruction::SWAP_IN ||
                 in.kind() == proto::Instruction::SWAP_OUT) {
        auto job = (*w)->Start(in);
        REQUIRE(job.ok());
        REQUIRE(queue.Track(i, in.async(), std::move(job).value()).ok());
      } else if (in.kind() == proto::Instruction::OPTIMIZER_STEP) {
        REQUIRE((*w)->Step(in, 0.01f, 0.5f).ok());
      }
    }
    REQUIRE(queue.WaitAll().ok());
    ref.optimizer->Step(0.01f, 0.5f);
    CHECK(shard_resident() <= static_cast<size_t>(persistent * 2 + 8192));
  }
  REQUIRE((*w)->LoadParams().ok());
  CHECK(std::memcmp(ref.params.param_shard(), swapped.params.param_shard(), n * 2) == 0);
  (*w)->DropParams();
  REQUIRE((*w)->Load().ok());
  CHECK(std::memcmp(ref.params.master_data(), swapped.params.master_data(), n * 4) == 0);
}

// Someone else's write over the swap file, or a truncation, is caught when the sub-group is
// read back, naming the file and the sub-group, instead of stepping on zeros.
TEST_CASE("OptimizerSwapper: a swap file changed under the job is refused on read",
          "[zero][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  const proto::Plan plan = MustPlan(g, 1, SwapConfig(2, DType::kBF16, 3));
  OptimizerOptions o;
  States s(g, plan, DType::kBF16, o);
  SwapperOptions so;
  so.nvme_path = TmpDir("swap_changed");
  auto w = OptimizerSwapper::Create(plan, so, &s.params, s.optimizer.get());
  REQUIRE(w.ok());
  REQUIRE((*w)->Store().ok());
  REQUIRE((*w)->Load().ok());
  // Zeros over sub-group 1's region (a hole, as a truncation followed by later writes leaves).
  const proto::SubGroup& g1 = plan.swap().sub_groups(1);
  std::vector<char> zeros(g1.stride() * plan.swap().states() * 4, 0);
  std::FILE* f = std::fopen((*w)->path().c_str(), "r+b");
  REQUIRE(f != nullptr);
  REQUIRE(std::fseek(f, g1.file_offset(), SEEK_SET) == 0);
  REQUIRE(std::fwrite(zeros.data(), 1, zeros.size(), f) == zeros.size());
  std::fclose(f);
  Status loaded = (*w)->Load();
  REQUIRE_FALSE(loaded.ok());
  INFO(loaded.message());
  CHECK(loaded.message().find("sub-group 1 reads back other bytes") != std::string::npos);
  CHECK(loaded.message().find((*w)->path()) != std::string::npos);
  REQUIRE(truncate((*w)->path().c_str(), 0) == 0);
  loaded = (*w)->Load();
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.message().find("optimizer.swp") != std::string::npos);
}

TEST_CASE("OptimizerSwapper: a killed run's directory goes, room is checked first",
          "[zero][swap]") {
  const Graph g = PresetGraph("gpt2-tiny");
  const proto::Plan plan = MustPlan(g, 1, SwapConfig(2, DType::kBF16, 3));
  OptimizerOptions o;
  States s(g, plan, DType::kBF16, o);
  SwapperOptions so;
  so.nvme_path = TmpDir("swap_stale");
  // A dead process's directory, with a file in it.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  mkdir((so.nvme_path + "/ds-swap").c_str(), 0700);
  const std::string stale = so.nvme_path + "/ds-swap/rank0-pid" + std::to_string(child);
  REQUIRE(mkdir(stale.c_str(), 0700) == 0);
  std::FILE* f = std::fopen((stale + "/optimizer.swp").c_str(), "w");
  REQUIRE(f != nullptr);
  std::fclose(f);
  // A live one (this test's parent) stays.
  const std::string live = so.nvme_path + "/ds-swap/rank1-pid" + std::to_string(getppid());
  REQUIRE(mkdir(live.c_str(), 0700) == 0);
  {
    auto w = OptimizerSwapper::Create(plan, so, &s.params, s.optimizer.get());
    REQUIRE(w.ok());
    CHECK_FALSE(Exists(stale));
    CHECK(Exists(live));
  }
  rmdir(live.c_str());

  proto::Plan huge = plan;
  huge.mutable_swap()->set_file_bytes(int64_t{1} << 60);
  auto refused = OptimizerSwapper::Create(huge, so, &s.params, s.optimizer.get());
  REQUIRE_FALSE(refused.ok());
  const std::string m = refused.status().message();
  INFO(m);
  CHECK(m.find("zero_optimization.offload_optimizer.nvme_path " + so.nvme_path) !=
        std::string::npos);
  CHECK(m.find("swap files need 1073741824.00 GiB") != std::string::npos);
  CHECK(m.find("free") != std::string::npos);
  CHECK_FALSE(Exists(so.nvme_path + "/ds-swap/rank0-pid" + std::to_string(getpid())));
}

}  // namespace
}  // namespace ds::zero
