// DeviceStates on HostMemory (the device path run on the CPU): the device optimizer step,
// through OptimizerKernels' segments, updates master, moments and the 16-bit copy exactly as
// the host Optimizer does (AdamW, Adam, SGD with momentum; fp32, bf16, fp16), for a whole store
// and for a ZeRO-1 partition that starts mid-
// parameter; Upload/Download round-trip; the norm share matches the host sum; and what does
// not run on the device yet is refused with the reason.
#include "zero/device_states.h"

#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "runtime/graph/model_builder.h"
#include "zero/grad_norm.h"

namespace ds::zero {
namespace {

Graph TinyGraph() {
  ModelSpec spec = ModelPreset("gpt2-tiny").value();
  spec.vocab_size = 24;
  return BuildModelGraph(spec).value();
}

// Rank 1 of 2 under ZeRO-1: owns flat [cut, total), which starts inside a parameter.
ShardLayout SecondHalf(int64_t total, int64_t cut) {
  ShardLayout l;
  l.segments = {{cut, total - cut, 0}};
  l.shard_elements = total - cut;
  return l;
}

TEST_CASE("DeviceStates: the device step equals the host Optimizer element for element",
          "[optim]") {
  const Graph g = TinyGraph();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto type : {OptimizerOptions::Type::kAdamW, OptimizerOptions::Type::kAdam,
                      OptimizerOptions::Type::kSgd}) {
      for (bool partitioned : {false, true}) {
        INFO(DTypeName(dtype) << (type == OptimizerOptions::Type::kAdam  ? " adam"
                                  : type == OptimizerOptions::Type::kSgd ? " sgd"
                                                                         : " adamw")
                              << (partitioned ? " zero-1 rank 1" : " whole"));
        OptimizerOptions o;
        o.type = type;
        o.lr = 0.01f;
        o.weight_decay = 0.1f;
        o.momentum = 0.9f;                 // SGD
        o.bias_correction = !partitioned;  // DeepSpeed's bias_correction false on the shards
        ParamStore host(g, dtype), dev(g, dtype);
        const int64_t total = host.total_elements(), cut = total / 2 + 7;
        if (partitioned) {
          host.Shard(SecondHalf(total, cut));
          dev.Shard(SecondHalf(total, cut));
        }
        host.Initialize(g, 5);
        dev.Initialize(g, 5);
        Optimizer host_opt(o, &host), dev_opt(o, &dev);
        HostMemory memory;
        auto states = DeviceStates::Create(&memory, &dev, &dev_opt);
        REQUIRE(states.ok());
        DeviceStates& d = **states;
        REQUIRE(d.Upload().ok());
        auto share = d.AddNormShare({{cut, total - cut}});
        REQUIRE(share.ok());
        std::mt19937 gen(9);
        std::normal_distribution<float> normal(0.f, 1.f);
        const size_t tsize = DTypeSize(dtype);
        for (int step = 0; step < 3; ++step) {
          for (const ParamSlot& s : host.slots())
            for (int64_t i = 0; i < s.numel; ++i)
              StoreFloat(host.GradView(s).data(), dtype, i, normal(gen));
          // The device's gradients: the same flat bytes.
          std::memcpy(d.GradAt(0), host.grads(), total * tsize);
          auto sum = d.GradSquaredSum(*share);
          REQUIRE(sum.ok());
          CHECK(sum->finite);
          CHECK(sum->sum_sq == Approx(GradSquaredSum(host, cut, total)).epsilon(1e-12));
          host_opt.Step(o.lr, 0.5f);
          REQUIRE(d.Step(o.lr, 0.5f).ok());
        }
        CHECK(dev_opt.step() == 3);
        REQUIRE(d.Download().ok());
        const int64_t first = partitioned ? cut : 0;
        int64_t mismatches = 0;
        for (int64_t i = first; i < total; ++i) {
          if (*host.MasterAt(i) != *dev.MasterAt(i)) ++mismatches;
          if (std::memcmp(static_cast<const char*>(host.model()) + i * tsize,
                          static_cast<const char*>(dev.model()) + i * tsize, tsize) != 0)
            ++mismatches;
        }
        const auto hs = host_opt.state(), ds = dev_opt.state();
        REQUIRE(hs.size() == ds.size());
        REQUIRE(!hs.empty());
        for (size_t k = 0; k < hs.size(); ++k)
          CHECK(std::memcmp(hs[k].data, ds[k].data, host.shard_elements() * sizeof(float)) == 0);
        CHECK(mismatches == 0);
        // Something moved: the step is not a no-op.
        CHECK(*dev.MasterAt(total - 1 - 16) != 0.0f);
      }
    }
  }
}

// ZeRO-2: gradients in a bucket arena (two buckets sharing bytes, as the plan places buckets
// live at different times), reduced values accumulated into the gradient shard, the norm over
// the shard, and the step reading the shard, against the host Optimizer over the host shard.
TEST_CASE("DeviceStates: stage 2 accumulates into the gradient shard and steps from it",
          "[optim]") {
  const Graph g = TinyGraph();
  ParamStore host(g, DType::kBF16), dev(g, DType::kBF16);
  const int64_t total = host.total_elements(), cut = total / 2 + 7, half = 96 * 16;
  REQUIRE(half < cut);
  ShardLayout l = SecondHalf(total, cut);
  l.partition_grads = true;
  l.grad_blocks = {{0, half, 0}, {half, total - half, 0}};
  l.grad_arena_elements = total - half;
  host.Shard(l);
  dev.Shard(l);
  host.Initialize(g, 5);
  dev.Initialize(g, 5);
  OptimizerOptions o;
  o.lr = 0.01f;
  Optimizer host_opt(o, &host), dev_opt(o, &dev);
  HostMemory memory;
  auto states = DeviceStates::Create(&memory, &dev, &dev_opt);
  REQUIRE(states.ok());
  DeviceStates& d = **states;
  REQUIRE(d.Upload().ok());
  // The device's gradient of flat i sits where the host's arena puts it.
  for (int64_t i : {int64_t{0}, half - 1, half, cut, total - 1})
    CHECK(static_cast<char*>(d.GradAt(i)) - static_cast<char*>(d.GradAt(0)) ==
          static_cast<char*>(dev.FlatGradPtr(i)) - static_cast<char*>(dev.FlatGradPtr(0)));
  CHECK(d.GradAt(half) == d.GradAt(0));  // the two buckets share the arena
  auto share = d.AddNormShare({{0, dev.shard_elements()}}, /*in_shard=*/true);
  REQUIRE(share.ok());
  std::vector<uint16_t> reduced(total - cut);
  for (size_t i = 0; i < reduced.size(); ++i)
    reduced[i] = FloatToBf16(0.01f * static_cast<float>(i % 17) - 0.05f);
  for (int micro = 0; micro < 2; ++micro) {  // two micro-batches accumulate
    REQUIRE(d.AccumulateIntoShard(cut, reduced.data(), total - cut).ok());
    for (int64_t i = 0; i < total - cut; ++i) {
      uint16_t* h = static_cast<uint16_t*>(host.grad_shard()) + i;
      *h = FloatToBf16(Bf16ToFloat(*h) + Bf16ToFloat(reduced[i]));
    }
  }
  auto sum = d.GradSquaredSum(*share);
  REQUIRE(sum.ok());
  CHECK(sum->sum_sq ==
        Approx(SquaredSum(host.grad_shard(), DType::kBF16, 0, total - cut)).epsilon(1e-12));
  CHECK(sum->sum_sq > 0);
  host_opt.Step(o.lr, 1.0f);
  REQUIRE(d.Step(o.lr, 1.0f).ok());
  REQUIRE(d.Download().ok());
  for (int64_t i = cut; i < total; ++i) {
    INFO("element " << i);
    REQUIRE(*host.MasterAt(i) == *dev.MasterAt(i));
  }
  // ShardFromHost brings the host shard's range over; ZeroGrads clears the device shard.
  REQUIRE(d.ZeroGrads().ok());
  std::memcpy(dev.grad_shard(), host.grad_shard(), (total - cut) * 2);
  REQUIRE(d.ShardFromHost(cut + 10, 5).ok());
  auto partial = d.GradSquaredSum(*share);
  REQUIRE(partial.ok());
  CHECK(partial->sum_sq ==
        Approx(SquaredSum(host.grad_shard(), DType::kBF16, 10, 15)).epsilon(1e-12));
}

TEST_CASE("DeviceStates: Upload then Download restores the host states bit for bit", "[optim]") {
  const Graph g = TinyGraph();
  ParamStore ps(g, DType::kBF16);
  ps.Initialize(g, 2);
  OptimizerOptions o;
  Optimizer opt(o, &ps);
  for (const Optimizer::StateBuffer& b : opt.state())
    for (int64_t i = 0; i < ps.shard_elements(); ++i)
      b.data[i] = 0.25f * static_cast<float>(i % 13);
  const std::vector<float> master(ps.master(), ps.master() + ps.total_elements());
  const std::vector<float> m0(opt.state()[0].data, opt.state()[0].data + ps.shard_elements());
  HostMemory memory;
  auto d = DeviceStates::Create(&memory, &ps, &opt);
  REQUIRE(d.ok());
  REQUIRE((*d)->Upload().ok());
  std::fill(ps.master(), ps.master() + ps.total_elements(), 0.f);
  std::fill(opt.state()[0].data, opt.state()[0].data + ps.shard_elements(), 0.f);
  const uint64_t version = ps.version();
  REQUIRE((*d)->Download().ok());
  CHECK(std::vector<float>(ps.master(), ps.master() + ps.total_elements()) == master);
  CHECK(std::vector<float>(opt.state()[0].data, opt.state()[0].data + ps.shard_elements()) == m0);
  CHECK(ps.version() != version);
  CHECK((*d)->bytes() >= ps.total_elements() * (2 + 2 + 4 + 8));
}

TEST_CASE("DeviceStates: what does not run on a device yet is refused with the reason", "[optim]") {
  const Graph g = TinyGraph();
  HostMemory memory;
  {
    ParamStore ps(g, DType::kBF16);
    ShardLayout l = SecondHalf(ps.total_elements(), 100);
    l.partition_grads = l.partition_params = true;  // stage 3, but no gather arena given
    ps.Shard(l);
    Optimizer opt(OptimizerOptions(), &ps);
    auto d = DeviceStates::Create(&memory, &ps, &opt);
    REQUIRE(!d.ok());
    CHECK(d.status().message().find("ZeRO stage 3 needs the gather arena") != std::string::npos);
  }
}

}  // namespace
}  // namespace ds::zero
