// GPU test (tag gpu; exits 77 without a device): DeviceStates on a GPU (the CUDA plugin's
// OptimizerKernels: kernels/cuda/optimizer.cu) against the host Optimizer, for fp32, bf16 and fp16,
// whole and as a ZeRO-1 partition starting mid-parameter. Same operation order as the host,
// so fp32 master and moments agree to a few fp32 roundings (sqrtf and the division may
// differ by an ulp), bf16 model copies to one bf16 ulp, and the norm share to 1e-12.
#include <cmath>
#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "runtime/graph/model_builder.h"
#include "tests/testing/gpu_memory.h"
#include "zero/device_states.h"
#include "zero/grad_norm.h"

namespace ds::zero {
namespace {

TEST_CASE("GPU: DeviceStates' AdamW and norm follow the host Optimizer", "[gpu][optim]") {
  auto gpu = testing::OpenTestGpu();
  INFO(gpu.status().ToString());
  REQUIRE(gpu.ok());
  ModelSpec spec = ModelPreset("gpt2-tiny").value();
  spec.vocab_size = 24;
  const Graph g = BuildModelGraph(spec).value();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool partitioned : {false, true}) {
      INFO(DTypeName(dtype) << (partitioned ? " zero-1 rank 1" : " whole"));
      OptimizerOptions o;
      o.lr = 0.01f;
      o.weight_decay = 0.1f;
      ParamStore host(g, dtype), dev(g, dtype);
      const int64_t total = host.total_elements(), cut = partitioned ? total / 2 + 7 : 0;
      if (partitioned) {
        ShardLayout l;
        l.segments = {{cut, total - cut, 0}};
        l.shard_elements = total - cut;
        host.Shard(l);
        dev.Shard(l);
      }
      host.Initialize(g, 5);
      dev.Initialize(g, 5);
      Optimizer host_opt(o, &host), dev_opt(o, &dev);
      auto states = DeviceStates::Create(gpu->get(), &dev, &dev_opt);
      INFO(states.status().ToString());
      REQUIRE(states.ok());
      DeviceStates& d = **states;
      REQUIRE(d.Upload().ok());
      auto share = d.AddNormShare({{cut, total - cut}});
      REQUIRE(share.ok());
      std::mt19937 gen(9);
      std::normal_distribution<float> normal(0.f, 1.f);
      for (int step = 0; step < 3; ++step) {
        for (const ParamSlot& s : host.slots())
          for (int64_t i = 0; i < s.numel; ++i)
            StoreFloat(host.GradView(s).data(), dtype, i, normal(gen));
        // The same gradients on the device: through the host flat buffer of `dev`.
        std::memcpy(dev.grads(), host.grads(), total * DTypeSize(dtype));
        REQUIRE(d.GradsFromHost(0, total).ok());
        auto sum = d.GradSquaredSum(*share);
        REQUIRE(sum.ok());
        CHECK(sum->sum_sq == Approx(GradSquaredSum(host, cut, total)).epsilon(1e-12));
        host_opt.Step(o.lr, 0.5f);
        REQUIRE(d.Step(o.lr, 0.5f).ok());
      }
      REQUIRE(d.Download().ok());
      int64_t bad = 0;
      for (int64_t i = cut; i < total; ++i) {
        const float a = *host.MasterAt(i), b = *dev.MasterAt(i);
        if (std::abs(a - b) > 1e-6f * std::abs(a) + 1e-7f) ++bad;
        const float ma = LoadFloat(host.model(), dtype, i), mb = LoadFloat(dev.model(), dtype, i);
        const float ulp = dtype == DType::kF32    ? 1e-6f
                          : dtype == DType::kBF16 ? 1.0f / 128
                                                  : 1.0f / 1024;
        if (std::abs(ma - mb) > ulp * std::abs(ma) + 1e-7f) ++bad;
      }
      const auto hs = host_opt.state(), ds = dev_opt.state();
      for (size_t k = 0; k < hs.size(); ++k)
        for (int64_t i = 0; i < host.shard_elements(); ++i)
          if (std::abs(hs[k].data[i] - ds[k].data[i]) > 1e-6f * std::abs(hs[k].data[i]) + 1e-12f)
            ++bad;
      CHECK(bad == 0);
    }
  }
}

}  // namespace
}  // namespace ds::zero
