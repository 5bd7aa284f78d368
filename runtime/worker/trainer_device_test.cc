// Model states on the device (the plan's states_on_device), run on the CPU: device.type cuda
// with the accelerator replaced by HostMemory, so parameters, gradients, the fp32 master and
// Adam's moments live in "device" memory (DeviceStates), the optimizer steps there through
// OptimizerKernels, and data-parallel collectives stage their ranges through the host.
// It must reproduce the host-state curves: one rank, DP = 2 at stages 0 and 1 against one rank,
// checkpoints that resume exactly (on the device and on the host), and offload_optimizer
// keeping the optimizer on the host. bf16 runs too: the CPU's bf16 kernels are the fp32 ones
// between conversions (kernels/widen.h), so activations round to bf16 as on a GPU.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "proto/plan.pb.h"
#include "runtime/core/device_memory.h"
#include "runtime/data/token_file.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/tiny_gpt_job.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/plan/bucket_arena.h"

namespace ds::worker {
namespace {

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string MakeData() {
  const std::string path = TmpDir() + "/device_train.tok";
  std::mt19937 gen(7);
  std::vector<uint32_t> tokens(30000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = gen() % 4 == 0 ? gen() % 32 : static_cast<uint32_t>((i * 5) % 31);
  REQUIRE(data::WriteTokenFile(path, tokens, data::TokenDType::kUint16, 32).ok());
  return path;
}

// `device`: device.type cuda on HostMemory; else the CPU with host states.
std::string Config(const std::string& data, int micro, int stage, bool device,
                   const std::string& extra = "") {
  return testing::TinyGptJob(data, micro, stage, device ? "cuda" : "cpu", extra);
}

StatusOr<std::unique_ptr<Trainer>> MakeTrainer(const std::string& yaml,
                                               parallel::Communicator* comm, DeviceMemory* memory,
                                               parallel::Communicator* host_comm = nullptr) {
  auto config = config::ParseJobConfig(yaml, "device.yaml");
  if (!config.ok()) return config.status();
  auto graph = plan::LoadModelGraph(*config);
  if (!graph.ok()) return graph.status();
  return Trainer::Create(*config, std::move(graph).value(), comm, memory, host_comm);
}

// Host memory standing in for a GPU that knows its allocations, so that a communicator on
// "device buffers" can refuse anything else (a host pointer handed to NCCL would crash).
class TrackedMemory final : public DeviceMemory {
 public:
  static bool Contains(const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(Mu());
    const auto p = reinterpret_cast<uintptr_t>(data);
    auto it = Ranges().upper_bound(p);
    if (it == Ranges().begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return host_.name(); }
  StatusOr<void*> Allocate(size_t bytes) override {
    auto p = host_.Allocate(bytes);
    if (p.ok()) {
      std::lock_guard<std::mutex> lock(Mu());
      Ranges()[reinterpret_cast<uintptr_t>(*p)] = std::max<size_t>(bytes, 1);
    }
    return p;
  }
  void Free(void* ptr) override {
    {
      std::lock_guard<std::mutex> lock(Mu());
      Ranges().erase(reinterpret_cast<uintptr_t>(ptr));
    }
    host_.Free(ptr);
  }
  Status Zero(void* p, size_t n) override { return host_.Zero(p, n); }
  Status CopyToDevice(void* d, const void* s, size_t n) override {
    return host_.CopyToDevice(d, s, n);
  }
  Status CopyToHost(void* d, const void* s, size_t n) override { return host_.CopyToHost(d, s, n); }
  Status Copy(void* d, const void* s, size_t n) override { return host_.Copy(d, s, n); }
  void Bind() override {}

 private:
  static std::mutex& Mu() {
    static std::mutex m;
    return m;
  }
  static std::map<uintptr_t, size_t>& Ranges() {
    static std::map<uintptr_t, size_t> r;
    return r;
  }
  HostMemory host_;
};

struct Run {
  std::vector<double> losses;  // rank 0's
  bool states_on_device = false;
};

// `steps` steps on `world` ranks (threads over the loopback communicator), each rank with its
// own HostMemory standing in for its GPU; with `save`, every rank checkpoints at the end. With
// `device_comm` the communicator claims device buffers, standing in for NCCL: collectives then
// run on the device states' buffers instead of staging through the host.
Run Train(const std::string& yaml, int world, int steps, bool save = false,
          bool device_comm = false) {
  parallel::LoopbackOptions lo;
  lo.device_buffers = device_comm;
  lo.is_device_memory = &TrackedMemory::Contains;
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world, lo);
  auto host_comms = parallel::LoopbackCommunicator::CreateGroup(world);  // beside the "NCCL" one
  std::vector<TrackedMemory> memories(world);
  std::vector<std::vector<double>> losses(world);
  std::vector<Status> errors(world);
  Run run;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto t = MakeTrainer(yaml, comms[r].get(), &memories[r],
                           device_comm ? host_comms[r].get() : nullptr);
      if (!t.ok()) return void(errors[r] = t.status());
      if (r == 0) run.states_on_device = (*t)->plan().settings().states_on_device();
      if (Status s = (*t)->Initialize(); !s.ok()) return void(errors[r] = s);
      for (int i = 0; i < steps; ++i) {
        auto m = (*t)->TrainStep();
        if (!m.ok()) return void(errors[r] = m.status());
        losses[r].push_back(m->loss);
      }
      if (save) errors[r] = (*t)->SaveCheckpoint();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r].ToString());
    REQUIRE(errors[r].ok());
  }
  run.losses = losses[0];
  return run;
}

void CheckClose(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i + 1 << ": want " << want[i] << " got " << got[i]);
    CHECK(std::abs(got[i] - want[i]) <= rel * std::abs(want[i]));
  }
}

TEST_CASE("Device states: one rank follows the host-state curve", "[worker][device]") {
  const std::string data = MakeData();
  const Run host = Train(Config(data, 8, 0, false), 1, 20);
  CHECK(!host.states_on_device);
  CHECK(host.losses.back() < host.losses.front());
  for (int stage : {0, 1, 2, 3}) {
    INFO("stage " << stage);
    const Run device = Train(Config(data, 4, stage, true), 1, 20);  // gas 2
    CHECK(device.states_on_device);
    CheckClose(device.losses, host.losses, 1e-6);
  }
  // SGD with momentum steps on the device too.
  auto sgd = [&](bool device) {
    std::string yaml = Config(data, 8, 1, device);
    yaml.replace(yaml.find("{type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}"), 53,
                 "{type: SGD, params: {lr: 0.05, momentum: 0.9, weight_decay: 0.01}}");
    return Train(yaml, 1, 20).losses;
  };
  const std::vector<double> sgd_host = sgd(false);
  CHECK(sgd_host.back() < sgd_host.front());
  CheckClose(sgd(true), sgd_host, 1e-6);
}

// cpu_checkpointing: with full recompute on a device, each block's input is copied to host
// memory after forward (CHECKPOINT_STASH) and back before its recompute (CHECKPOINT_RELOAD); the
// device keeps it only in the forward-only arena. The same arithmetic: losses bit for bit; the
// device's activations shrink by what the host keeps.
TEST_CASE("Device states: cpu_checkpointing keeps the block inputs in host memory",
          "[worker][device]") {
  const std::string data = MakeData();
  struct Result {
    std::vector<double> losses;
    int64_t device_bytes = 0, kept_bytes = 0, host_bytes = 0;
    int stashes = 0, local_restores = 0;
  };
  auto run = [&](const std::string& ac) {
    std::string yaml = Config(data, 8, 1, true, ac);
    yaml.replace(yaml.find("train_iters: 20}"), 16, "train_iters: 6, recompute: full}");
    HostMemory memory;
    auto t = MakeTrainer(yaml, nullptr, &memory);
    REQUIRE(t.ok());
    REQUIRE((*t)->Initialize().ok());
    Result r;
    for (int i = 0; i < 6; ++i) {
      auto m = (*t)->TrainStep();
      REQUIRE(m.ok());
      r.losses.push_back(m->loss);
    }
    r.device_bytes = (*t)->executor().activation_bytes();
    r.kept_bytes = (*t)->executor().kept_activation_bytes();
    r.host_bytes = (*t)->executor().host_checkpoint_bytes();
    for (const proto::Instruction& in : (*t)->plan().ranks(0).instructions()) {
      r.stashes += in.kind() == proto::Instruction::CHECKPOINT_STASH;
      r.local_restores += in.kind() == proto::Instruction::CHECKPOINT_RELOAD;
    }
    return r;
  };
  const Result kept = run("");
  const Result host = run("activation_checkpointing: {cpu_checkpointing: true}\n");
  CHECK(host.losses == kept.losses);
  CHECK(kept.host_bytes == 0);
  CHECK(host.host_bytes > 0);
  CHECK(host.kept_bytes + host.host_bytes == kept.kept_bytes);  // moved, not copied
  CHECK(host.device_bytes < kept.device_bytes);
  CHECK(host.stashes == 2);  // one per block input (2 blocks), gas 1
  CHECK(host.local_restores == 2);
  CHECK(kept.stashes == 0);
}

// Stage 2 reduces every micro-batch's buckets into the gradient shard (gas 2 here: micro 2 x
// 2 ranks x 2), from the plan's gradient bucket arena on the device.
TEST_CASE("Device states: DP = 2 at stages 0-2 follows the single-rank curve", "[worker][device]") {
  const std::string data = MakeData();
  const Run single = Train(Config(data, 8, 0, false), 1, 20);
  for (bool device_comm : {false, true}) {
    for (int stage : {0, 1, 2}) {
      INFO("dp 2 stage " << stage
                         << (device_comm ? ", collectives on device buffers"
                                         : ", through the host"));
      const Run dp = Train(Config(data, 4, stage, true), 2, 20, false, device_comm);
      CHECK(dp.states_on_device);
      CheckClose(dp.losses, single.losses, 1e-5);
    }
  }
  // The same bits either way: the collectives see the same values.
  CHECK(Train(Config(data, 4, 1, true), 2, 5, false, true).losses ==
        Train(Config(data, 4, 1, true), 2, 5).losses);
  for (bool device_comm : {false, true}) {
    INFO("dp 2 stage 2, gas 2" << (device_comm ? ", collectives on device buffers"
                                               : ", through the host"));
    std::string yaml = Config(data, 2, 2, true);
    yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
                 "reduce_bucket_size: 3000, overlap_comm: true");
    CheckClose(Train(yaml, 2, 20, false, device_comm).losses, single.losses, 1e-5);
  }
}

// ZeRO-3 with the states on the device: every weight matrix (persistence threshold 100) is
// gathered into the device's gather arena before its block and its place reused after; the
// gradients reduce-scatter per unit into the gradient shard. On device buffers (NCCL's way).
TEST_CASE("Device states: ZeRO-3 at DP = 2 and 4 follows the single-rank curve",
          "[worker][device]") {
  const std::string data = MakeData();
  const Run single = Train(Config(data, 8, 0, false), 1, 20);
  for (int world : {2, 4}) {
    for (int micro : {8 / world, 1}) {  // gas 1, and gas 8 / world
      INFO("dp " << world << " micro " << micro);
      std::string yaml = Config(data, micro, 3, true);
      yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
                   "reduce_bucket_size: 3000, overlap_comm: true");
      const Run dp = Train(yaml, world, 20, false, /*device_comm=*/true);
      CHECK(dp.states_on_device);
      CheckClose(dp.losses, single.losses, 1e-5);
    }
  }
  const std::string bf16 = "bf16: {enabled: true}\n";
  const Run one = Train(Config(data, 8, 3, true, bf16), 1, 15);
  const Run host = Train(Config(data, 8, 3, false, bf16), 1, 15);
  CheckClose(one.losses, host.losses, 0.02);
  CheckClose(Train(Config(data, 4, 3, true, bf16), 2, 15, false, true).losses, one.losses, 0.01);
}

TEST_CASE("Device states: checkpoints resume exactly, on the device and on the host",
          "[worker][device][ckpt]") {
  const std::string data = MakeData();
  const std::string dir = TmpDir() + "/device_ckpt";
  std::filesystem::remove_all(dir);
  auto with_ckpt = [&](int world, bool device, bool load) {
    return Config(data, 8 / world, 1, device,
                  "checkpoint: {dir: " + dir + (load ? ", load: latest" : "") + "}\n");
  };
  const Run whole = Train(with_ckpt(2, true, false), 2, 20);
  std::filesystem::remove_all(dir);
  const Run first = Train(with_ckpt(2, true, false), 2, 10, /*save=*/true);
  const Run again = Train(with_ckpt(2, true, true), 2, 10);
  for (size_t i = 0; i < 10; ++i) {
    INFO("step " << i + 11 << " after a device-state checkpoint");
    CHECK(again.losses[i] == whole.losses[i + 10]);  // bit for bit
  }
  // The same checkpoint on one CPU rank with host states (the sharded master and moments
  // were downloaded into the shard files).
  const Run host = Train(with_ckpt(1, false, true), 1, 10);
  std::vector<double> tail(whole.losses.begin() + 10, whole.losses.end());
  CheckClose(host.losses, tail, 1e-5);
  // ZeRO-3 on the device: its shard files resume on the device bit for bit, and as one CPU rank.
  auto stage3 = [&](int world, bool device, bool load) {
    return Config(data, 8 / world, 3, device,
                  "checkpoint: {dir: " + dir + (load ? ", load: latest" : "") + "}\n");
  };
  std::filesystem::remove_all(dir);
  const Run whole3 = Train(stage3(2, true, false), 2, 20, false, true);
  std::filesystem::remove_all(dir);
  Train(stage3(2, true, false), 2, 10, /*save=*/true, true);
  const Run again3 = Train(stage3(2, true, true), 2, 10, false, true);
  for (size_t i = 0; i < 10; ++i) {
    INFO("step " << i + 11 << " after a ZeRO-3 device-state checkpoint");
    CHECK(again3.losses[i] == whole3.losses[i + 10]);
  }
  std::vector<double> tail3(whole3.losses.begin() + 10, whole3.losses.end());
  CheckClose(Train(stage3(1, false, true), 1, 10).losses, tail3, 1e-5);
}

TEST_CASE("Device states: offload_optimizer keeps the optimizer on the host", "[worker][device]") {
  const std::string data = MakeData();
  const Run host = Train(Config(data, 8, 1, false), 1, 20);
  std::string yaml = Config(data, 8, 1, true);
  yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
               "reduce_bucket_size: 3000, offload_optimizer: {device: cpu}");
  const Run offloaded = Train(yaml, 1, 20);
  CHECK(!offloaded.states_on_device);
  CheckClose(offloaded.losses, host.losses, 1e-6);
}

// ZeRO-Offload at stage 3: forward and backward on the device, the shards, the gathers and the
// optimizer on the host; each block range's gathered parameters are uploaded before it runs and
// its gradients come back. The host stage-3 curve, one rank and DP = 2 (Gloo on host memory).
TEST_CASE("Device states: stage 3 with offload_optimizer trains on the device, states on the host",
          "[worker][device]") {
  const std::string data = MakeData();
  for (int world : {1, 2}) {
    INFO("world " << world);
    const Run host = Train(Config(data, 8 / world, 3, false), world, 12);
    std::string yaml = Config(data, 8 / world, 3, true);
    yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
                 "reduce_bucket_size: 3000, offload_optimizer: {device: cpu}");
    const Run offloaded = Train(yaml, world, 12);
    CHECK(!offloaded.states_on_device);
    CheckClose(offloaded.losses, host.losses, 1e-6);
  }
}

// bf16 on the device keeps activations and their gradients in bf16 where the host path keeps
// them in fp32: within 2% of the host bf16 curve, as trainer_gpu_test allows the GPU. DP = 2
// at stage 1 against one device rank: within 1%, the DP bf16 bound of trainer_dp_test.
TEST_CASE("Device states: bf16 follows the host bf16 curve, one rank and DP = 2",
          "[worker][device]") {
  const std::string data = MakeData();
  const std::string bf16 = "bf16: {enabled: true}\n";
  const Run host = Train(Config(data, 8, 1, false, bf16), 1, 15);
  const Run one = Train(Config(data, 8, 1, true, bf16), 1, 15);
  CHECK(one.states_on_device);
  CheckClose(one.losses, host.losses, 0.02);
  const Run dp = Train(Config(data, 4, 1, true, bf16), 2, 15);
  CheckClose(dp.losses, one.losses, 0.01);
  const Run dp_device_comm = Train(Config(data, 4, 1, true, bf16), 2, 15, false, true);
  CHECK(dp_device_comm.losses == dp.losses);
  std::string yaml = Config(data, 8, 1, true, bf16);
  yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
               "reduce_bucket_size: 3000, offload_optimizer: {device: cpu}");
  const Run offloaded = Train(yaml, 1, 15);
  CHECK(!offloaded.states_on_device);
  CheckClose(offloaded.losses, one.losses, 0.01);
}

// The host copies of device states are sparse and handed back after use: after initialization,
// steps and a checkpoint, at most the last partial page of each host buffer stays resident,
// while the checkpoint still carries the trained weights (the resume test above).
TEST_CASE("Device states: the host copies hold no memory between checkpoints", "[worker][device]") {
  const std::string data = MakeData();
  const std::string dir = TmpDir() + "/device_sparse_ckpt";
  std::filesystem::remove_all(dir);
  HostMemory memory;
  std::string yaml =
      Config(data, 8, 1, true, "bf16: {enabled: true}\ncheckpoint: {dir: " + dir + "}\n");
  yaml.replace(yaml.find("n_embd: 32"), 10, "n_embd: 128");  // 0.4M parameters
  auto t = MakeTrainer(yaml, nullptr, &memory);
  REQUIRE(t.ok());
  Trainer& trainer = **t;
  REQUIRE(trainer.params().sparse_host());
  REQUIRE(trainer.Initialize().ok());
  auto resident = [&] {
    size_t bytes = 0;
    for (const auto& [role, b] : trainer.params().ResidentBytes()) bytes += b;
    return bytes;
  };
  const size_t full = static_cast<size_t>(trainer.params().total_elements()) * (4 + 2 + 2);
  CHECK(resident() <= 5 * 4096);
  for (int i = 0; i < 3; ++i) REQUIRE(trainer.TrainStep().ok());
  CHECK(resident() <= 5 * 4096);
  REQUIRE(trainer.SaveCheckpoint().ok());
  CHECK(resident() <= 5 * 4096);
  CHECK(full > 100 * 4096);  // so the bound above means something
  // A CPU trainer's store is whole.
  auto host = MakeTrainer(Config(data, 8, 1, false, "bf16: {enabled: true}\n"), nullptr, nullptr);
  REQUIRE(host.ok());
  CHECK_FALSE((*host)->params().sparse_host());
}

// What the device holds is what the plan said it would: its model-state bytes for this rank,
// plus (stages 2-3) the gradient bucket arena and (stage 3) the gather arena that the plan's
// live ranges place. So `ds-launch plan`
// answers "does it fit on the GPU" for these jobs.
TEST_CASE("Device states: device memory matches the plan's model states", "[worker][device]") {
  const std::string data = MakeData();
  for (const std::string precision : {"", "bf16: {enabled: true}\n"}) {
    for (int stage : {0, 1, 2, 3}) {
      INFO((precision.empty() ? "fp32" : "bf16") << " stage " << stage << ", rank 1 of 2");
      parallel::LoopbackOptions lo;
      lo.device_buffers = true;  // stage 3 on the device needs it
      auto comms = parallel::LoopbackCommunicator::CreateGroup(2, lo);
      auto host_comms = parallel::LoopbackCommunicator::CreateGroup(2);
      HostMemory memory;
      auto t = MakeTrainer(Config(data, 4, stage, true, precision), comms[1].get(), &memory,
                           host_comms[1].get());
      REQUIRE(t.ok());
      const Trainer& trainer = **t;
      REQUIRE(trainer.device_states() != nullptr);
      const proto::Plan& plan = trainer.plan();
      int64_t want = 0;
      for (const proto::RankPlan& r : plan.ranks())
        if (r.rank() == 1) want = r.memory().model_state_bytes();
      const int64_t tsize = precision.empty() ? 4 : 2;
      want += zero::AssignBucketArena(plan, 1).elements * tsize;
      // Stage 3: the gather arena holds the persistent units (model states, counted above)
      // and the gathered ones (transient, placed by AssignGatherArena).
      int64_t persistent = 0;
      for (const proto::PartitionUnit& u : plan.partition().units())
        if (u.persistent()) persistent += (u.count() + 15) / 16 * 16;
      if (stage == 3) want += (zero::AssignGatherArena(plan, 1).elements - persistent) * tsize;
      const int64_t got = trainer.device_states()->bytes();
      CHECK(got >= want);
      CHECK(got <= want + 64 * 1024);  // shard rounding and alignment only
    }
  }
}

// ZeRO-3 on the device needs collectives on device buffers; over a host communicator (Gloo)
// it is refused, naming the way out.
// fp16 on the device: activations and gradients in fp16 as on a GPU, the loss scaled. With a
// static scale (no overflow) it follows the host fp16 curve within 2%, and DP = 2 at stage 2
// the one-rank device curve within 1%. With the dynamic scaler started at 2^30, the first steps
// overflow (their gradients are inf in fp16) and are skipped while the scale comes down, as
// DeepSpeed's scaler does (with its hysteresis), and training goes on from there.
TEST_CASE("Device states: fp16 with loss scaling", "[worker][device]") {
  const std::string data = MakeData();
  const std::string fixed = "fp16: {enabled: true, loss_scale: 1024}\n";
  const Run host = Train(Config(data, 8, 1, false, fixed), 1, 15);
  const Run one = Train(Config(data, 8, 1, true, fixed), 1, 15);
  CHECK(one.states_on_device);
  CHECK(host.losses.back() < host.losses.front());
  CheckClose(one.losses, host.losses, 0.02);
  CheckClose(Train(Config(data, 4, 2, true, fixed), 2, 15, false, true).losses, one.losses, 0.01);

  HostMemory memory;
  auto t = MakeTrainer(Config(data, 8, 1, true, "fp16: {enabled: true, initial_scale_power: 30}\n"),
                       nullptr, &memory);
  REQUIRE(t.ok());
  REQUIRE((*t)->Initialize().ok());
  int skipped = 0;
  double first = 0, last = 0, scale = 0;
  for (int i = 0; i < 40; ++i) {
    auto m = (*t)->TrainStep();
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    if (m->skipped) {
      ++skipped;
    } else if (first == 0) {
      first = m->loss;
    }
    scale = m->loss_scale;
    last = m->loss;
  }
  CHECK(skipped > 0);
  CHECK(skipped < 30);
  CHECK(scale < 1 << 30);  // halved on overflows (after DeepSpeed's hysteresis)
  CHECK(last < first);
}

TEST_CASE("Device states: ZeRO-3 over a host communicator is refused with the way out",
          "[worker][device]") {
  const std::string data = MakeData();
  auto comms = parallel::LoopbackCommunicator::CreateGroup(2);
  HostMemory memory;
  auto t = MakeTrainer(Config(data, 4, 3, true), comms[0].get(), &memory);
  REQUIRE(!t.ok());
  CHECK(t.status().message().find("device.yaml") != std::string::npos);
  CHECK(t.status().message().find("NCCL") != std::string::npos);
  CHECK(t.status().message().find("offload_optimizer") != std::string::npos);
}

}  // namespace
}  // namespace ds::worker
