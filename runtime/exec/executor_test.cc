// The executor end to end: whole-model gradients against finite differences (residuals,
// tied embeddings, GQA), activation-gradient memory reuse, 16-bit parameter storage and bf16
// activations.
#include "runtime/exec/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/graph/model_builder.h"

namespace ds::exec {
namespace {

struct Fixture {
  Graph graph;
  std::unique_ptr<zero::ParamStore> params;
  std::unique_ptr<Executor> ex;
  Fixture(const std::string& preset, DType dtype, int64_t B, int64_t T,
          DeviceMemory* memory = nullptr, DType matmul = DType::kF32) {
    ModelSpec spec = ModelPreset(preset).value();
    spec.vocab_size = 24;
    graph = BuildModelGraph(spec).value();
    params = std::make_unique<zero::ParamStore>(graph, dtype);
    params->Initialize(graph, 3);
    ExecutorOptions options{B, T, true, memory};
    options.matmul = matmul;
    auto e = Executor::Create(graph, params.get(), options);
    REQUIRE(e.ok());
    ex = std::move(e).value();
    std::mt19937 gen(11);
    for (int64_t i = 0; i < B * T; ++i) {
      ex->ids()[i] = gen() % 24;
      ex->targets()[i] = gen() % 24;
    }
  }
  double Loss() {
    REQUIRE(ex->Forward(0).ok());
    return ex->loss();
  }
};

TEST_CASE("Executor: whole-model gradients match finite differences", "[exec]") {
  for (const std::string preset : {"gpt2-tiny", "llama-tiny"}) {
    INFO(preset);
    Fixture f(preset, DType::kF32, 2, 7);
    f.params->ZeroGrads();
    REQUIRE(f.ex->Forward(0).ok());
    REQUIRE(f.ex->Backward(1.0f, 0).ok());
    std::mt19937 gen(1);
    int checked = 0;
    for (const zero::ParamSlot& s : f.params->slots()) {
      // A few elements of every parameter, including the tied embedding.
      for (int k = 0; k < 3; ++k) {
        int64_t i = gen() % s.numel;
        float* p = f.params->MasterView(s).f32() + i;
        const float g = f.params->GradView(s).f32()[i];
        const float saved = *p, h = 1e-2f;
        *p = saved + h;
        double up = f.Loss();
        *p = saved - h;
        double down = f.Loss();
        *p = saved;
        double numeric = (up - down) / (2 * h);
        INFO(s.name << "[" << i << "] analytic " << g << " numeric " << numeric);
        CHECK(std::abs(g - numeric) <= 2e-3 + 0.05 * std::abs(numeric));
        ++checked;
      }
    }
    CHECK(checked == 3 * static_cast<int>(f.params->slots().size()));
  }
}

TEST_CASE("Executor: block-range forward and backward equal the whole pass", "[exec]") {
  Fixture whole("llama-tiny", DType::kF32, 2, 9);
  Fixture parts("llama-tiny", DType::kF32, 2, 9);
  whole.params->ZeroGrads();
  parts.params->ZeroGrads();
  REQUIRE(whole.ex->Forward(5).ok());
  REQUIRE(whole.ex->Backward(1.0f, 5).ok());
  const int L = parts.graph.num_blocks;
  for (int b = -1; b <= L; ++b) REQUIRE(parts.ex->ForwardBlocks(5, b, b).ok());
  CHECK(parts.ex->loss() == whole.ex->loss());
  REQUIRE(parts.ex->BackwardBlocks(1.0f, 5, L, L).ok());
  REQUIRE(parts.ex->BackwardBlocks(1.0f, 5, 0, L - 1).ok());
  REQUIRE(parts.ex->BackwardBlocks(1.0f, 5, -1, -1).ok());
  const float* a = whole.params->grads_f32();
  const float* b = parts.params->grads_f32();
  for (int64_t i = 0; i < whole.params->total_elements(); ++i) REQUIRE(a[i] == b[i]);
}

// The device path (copies of parameters, gradients and inputs in a DeviceMemory, uploads when
// the ParamStore changed, gradients added back per BackwardBlocks) run on HostMemory with the
// CPU kernels follows the host path over steps that change the parameters, with the backward
// cut in three calls (tied embeddings read by the first and the last block). Not bit for bit:
// the device path sums a call's contributions before adding them to the ParamStore, where
// the host kernels add them one by one (the embedding's scatter-add, GEMMs blocked over K).
// Host memory whose CopyToHostAsync behaves as a copy stream may: the source is read when the
// copy is issued, the bytes land only at WaitCopies, and the protocol is checked. Violations:
// zeroing or overwriting bytes a pending copy reads before OrderAfterCopies (on a GPU the copy
// could still be reading them), and a second copy into a destination whose copy was not waited.
class AsyncCopyMemory final : public DeviceMemory {
 public:
  int violations = 0;
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu (host memory, async copies)"; }
  StatusOr<void*> Allocate(size_t bytes) override { return host_.Allocate(bytes); }
  void Free(void* p) override { host_.Free(p); }
  Status Zero(void* p, size_t n) override {
    Check(p, n);
    return host_.Zero(p, n);
  }
  Status CopyToDevice(void* d, const void* s, size_t n) override {
    Check(d, n);
    return host_.CopyToDevice(d, s, n);
  }
  Status CopyToHost(void* d, const void* s, size_t n) override { return host_.CopyToHost(d, s, n); }
  Status Copy(void* d, const void* s, size_t n) override {
    Check(d, n);
    return host_.Copy(d, s, n);
  }
  Status CopyToHostAsync(void* d, const void* s, size_t n) override {
    for (const Pending& p : pending_)
      if (Overlap(p.dst, p.bytes.size(), d, n)) ++violations;
    const char* src = static_cast<const char*>(s);
    pending_.push_back({d, std::vector<char>(src, src + n), src, false});
    return OkStatus();
  }
  Status WaitCopies() override {
    for (const Pending& p : pending_) std::memcpy(p.dst, p.bytes.data(), p.bytes.size());
    pending_.clear();
    return OkStatus();
  }
  Status OrderAfterCopies() override {
    for (Pending& p : pending_) p.ordered = true;
    return OkStatus();
  }
  void Bind() override {}

 private:
  struct Pending {
    void* dst;
    std::vector<char> bytes;
    const char* src;
    bool ordered;  // the compute stream waits for it
  };
  static bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
    const char* x = static_cast<const char*>(a);
    const char* y = static_cast<const char*>(b);
    return x < y + bn && y < x + an;
  }
  void Check(const void* p, size_t n) {
    for (const Pending& c : pending_)
      if (!c.ordered && Overlap(c.src, c.bytes.size(), p, n)) ++violations;
  }
  HostMemory host_;
  std::vector<Pending> pending_;
};

TEST_CASE("Executor: the async-copy checker catches what it should", "[exec]") {
  AsyncCopyMemory m;
  auto src = m.Allocate(64);
  REQUIRE(src.ok());
  float dst[16] = {};
  REQUIRE(m.CopyToHostAsync(dst, *src, 64).ok());
  REQUIRE(m.Zero(*src, 64).ok());  // before OrderAfterCopies: a race on a GPU
  CHECK(m.violations == 1);
  REQUIRE(m.CopyToHostAsync(dst, *src, 64).ok());  // into a destination not waited for
  CHECK(m.violations == 2);
  REQUIRE(m.WaitCopies().ok());
  m.Free(*src);
}

// The device path (parameters uploaded when the ParamStore changed, gradients sent back per
// BackwardBlocks on the copy stream) on host memory, and on the async-copy checker above,
// follows the host path; the checker sees no protocol violation.
TEST_CASE("Executor: the device path on host memory equals the host path", "[exec]") {
  HostMemory plain;
  AsyncCopyMemory async;
  for (DeviceMemory* memory :
       {static_cast<DeviceMemory*>(&plain), static_cast<DeviceMemory*>(&async)})
    for (const std::string preset : {"gpt2-tiny", "llama-tiny"}) {
      INFO(preset << " on " << memory->name());
      Fixture host(preset, DType::kF32, 2, 9);
      Fixture dev(preset, DType::kF32, 2, 9, memory);
      const int L = dev.graph.num_blocks;
      for (int step = 0; step < 3; ++step) {
        for (Fixture* f : {&host, &dev}) f->params->ZeroGrads();
        REQUIRE(host.ex->Forward(step).ok());
        REQUIRE(host.ex->Backward(0.5f, step).ok());
        for (int b = -1; b <= L; ++b) REQUIRE(dev.ex->ForwardBlocks(step, b, b).ok());
        CHECK(dev.ex->loss() == Approx(host.ex->loss()).epsilon(1e-6));
        REQUIRE(dev.ex->BackwardBlocks(0.5f, step, L, L).ok());
        REQUIRE(dev.ex->BackwardBlocks(0.5f, step, 0, L - 1).ok());
        REQUIRE(dev.ex->BackwardBlocks(0.5f, step, -1, -1).ok());
        REQUIRE(dev.ex->FinishGradients().ok());  // the last call's gradients are still staged
        const float* a = host.params->grads_f32();
        const float* b = dev.params->grads_f32();
        for (int64_t i = 0; i < host.params->total_elements(); ++i) {
          INFO("step " << step << " element " << i);
          REQUIRE(std::abs(a[i] - b[i]) <= 1e-5f * std::abs(a[i]) + 1e-7f);
        }
        // An "optimizer step": the executor on the device must see the new parameters.
        for (Fixture* f : {&host, &dev}) {
          float* p = f->params->master();
          for (int64_t i = 0; i < f->params->total_elements(); ++i)
            p[i] -= 0.05f * f->params->grads_f32()[i];
          f->params->MarkModelChanged();
        }
        // New tokens for the next step: uploaded when the first block runs.
        for (int64_t i = 0; i < 18; ++i) {
          host.ex->ids()[i] = dev.ex->ids()[i] = (i * 5 + step) % 24;
          host.ex->targets()[i] = dev.ex->targets()[i] = (i * 7 + step) % 24;
        }
      }
    }
  CHECK(async.violations == 0);
}

// How a 16-bit model's parameter gradient b agrees with a: the cosine of the angle between them
// and the ratio of their norms.
struct Agreement {
  double cosine, norm_ratio;
};
Agreement Agree(const Tensor& a, const Tensor& b, DType dt, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = LoadFloat(a.data(), dt, i), y = LoadFloat(b.data(), dt, i);
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  REQUIRE(aa > 0);
  return {ab / std::sqrt(aa * bb), std::sqrt(bb / aa)};
}

// bf16 on a device: activations and their gradients in bf16 (shape inference in bf16 for
// every node), parameters and gradients in bf16, the loss in fp32. On HostMemory the CPU's
// bf16 kernels are the fp32 ones between conversions (kernels/widen.h), rounding where a GPU
// kernel with bf16 storage rounds. Against the host path (bf16 parameters widened, fp32
// activations): the loss within 1%, every parameter gradient pointing the same way (cosine
// > 0.99) with the same norm within 5%. fp16 (10 mantissa bits) the same way.
TEST_CASE("Executor: the 16-bit device path on host memory follows the host 16-bit path",
          "[exec]") {
  HostMemory memory;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (const std::string preset : {"gpt2-tiny", "llama-tiny"}) {
      INFO(preset << " " << DTypeName(dt));
      Fixture host(preset, dt, 2, 9);
      Fixture dev(preset, dt, 2, 9, &memory);
      CHECK(dev.ex->Activation("logits").dtype() == dt);
      REQUIRE(host.ex->Forward(1).ok());
      REQUIRE(dev.ex->Forward(1).ok());
      CHECK(dev.ex->loss() == Approx(host.ex->loss()).epsilon(1e-2));
      REQUIRE(host.ex->Backward(1.0f, 1).ok());
      REQUIRE(dev.ex->Backward(1.0f, 1).ok());
      REQUIRE(dev.ex->FinishGradients().ok());
      for (const zero::ParamSlot& s : host.params->slots()) {
        INFO(s.name);
        const Agreement g = Agree(host.params->GradView(s),
                                  dev.params->GradView(*dev.params->Find(s.name)), dt, s.numel);
        CHECK(g.cosine > 0.99);
        CHECK(g.norm_ratio == Approx(1.0).epsilon(0.05));
      }
    }
}

// Gradients: bf16 where one reader writes them whole (the logits'), fp32 where several add into
// them (the residual stream's), and all fp32 without bf16 products.
void CheckGradDtypes(const Fixture& low, const Fixture& wide,
                     std::map<int, std::vector<std::string>>& readers) {
  int bf16_grads = 0;
  for (size_t t = 0; t < low.graph.tensors.size(); ++t) {
    const Tensor grad = low.ex->TensorData(static_cast<int>(t), true);
    if (!grad.defined()) continue;
    INFO("gradient of " << low.graph.tensors[t].name);
    if (readers[static_cast<int>(t)].size() > 1) CHECK(grad.dtype() == DType::kF32);
    bf16_grads += grad.dtype() == DType::kBF16;
    if (low.graph.tensors[t].name == "logits") CHECK(grad.dtype() == DType::kBF16);
    CHECK(wide.ex->TensorData(static_cast<int>(t), true).dtype() == DType::kF32);
  }
  CHECK(bf16_grads >= 4);
}

// A bf16 host step (bf16 products) keeps the products' outputs and what reads them in bf16
// (Note [bf16 activations]): a linear layer's output into an activation, a product or the
// cross-entropy, the norms' outputs; the residual stream (what the norms read) stays fp32.
// Their gradients are bf16 where one reader writes them whole. Against the same step with fp32
// activations: the loss within 1e-2, every gradient pointing the same way, in less activation
// memory.
TEST_CASE("Executor: a bf16 host step stores the products' activations in bf16", "[exec]") {
  for (const std::string preset : {"gpt2-tiny", "llama-tiny"}) {
    INFO(preset);
    Fixture wide(preset, DType::kBF16, 2, 9);
    Fixture low(preset, DType::kBF16, 2, 9, nullptr, DType::kBF16);
    CHECK(wide.ex->bf16_activations() == 0);
    REQUIRE(low.ex->bf16_activations() > 0);
    CHECK(low.ex->activation_bytes() < wide.ex->activation_bytes());
    std::map<int, std::vector<std::string>> readers;
    for (const NodeInfo& n : low.graph.nodes)
      for (int t : n.inputs) readers[t].push_back(n.op);
    int linear_outs = 0;
    for (const NodeInfo& n : low.graph.nodes) {
      const std::string& out = low.graph.tensors[n.outputs[0]].name;
      const DType dt = low.ex->Activation(out).dtype();
      INFO(n.op << " -> " << out);
      const auto& r = readers[n.outputs[0]];
      const bool into_norm =
          std::count(r.begin(), r.end(), "layernorm") + std::count(r.begin(), r.end(), "rmsnorm") >
          0;
      const bool bf16_readers = !r.empty() && std::all_of(r.begin(), r.end(), [](auto& op) {
        return op == "gelu" || op == "silu" || op == "mul" || op == "add" || op == "linear" ||
               op == "cross_entropy";
      });
      if (n.op == "linear" && bf16_readers) {
        CHECK(dt == DType::kBF16);
        ++linear_outs;
      }
      if (into_norm) CHECK(dt == DType::kF32);
    }
    CHECK(linear_outs >= 3);
    CHECK(low.ex->Activation("logits").dtype() == DType::kBF16);
    CheckGradDtypes(low, wide, readers);
    REQUIRE(wide.ex->Forward(1).ok());
    REQUIRE(low.ex->Forward(1).ok());
    CHECK(low.ex->loss() == Approx(wide.ex->loss()).epsilon(1e-2));
    for (Fixture* f : {&wide, &low}) {
      f->params->ZeroGrads();
      REQUIRE(f->ex->Backward(1.0f, 1).ok());
    }
    for (const zero::ParamSlot& s : wide.params->slots()) {
      INFO(s.name);
      const Agreement g =
          Agree(wide.params->GradView(s), low.params->GradView(*low.params->Find(s.name)),
                DType::kBF16, s.numel);
      CHECK(g.cosine > 0.99);
      CHECK(g.norm_ratio == Approx(1.0).epsilon(0.05));
    }
  }
}

TEST_CASE("Executor: activation gradients share memory by liveness", "[exec]") {
  Fixture f("gpt2-small-test", DType::kF32, 2, 64);
  int64_t all = 0;
  for (const TensorInfo& t : f.graph.tensors) {
    Tensor a = f.ex->Activation(t.name);
    if (a.defined()) all += a.nbytes();
  }
  // Without reuse the gradients would need as much as the activations themselves.
  CHECK(f.ex->activation_grad_bytes() < all / 3);
  f.params->ZeroGrads();
  REQUIRE(f.ex->Forward(0).ok());
  REQUIRE(f.ex->Backward(1.0f, 0).ok());
  CHECK(std::isfinite(f.ex->loss()));
}

TEST_CASE("Executor: bf16 and fp16 parameter storage track fp32", "[exec]") {
  Fixture f32("gpt2-tiny", DType::kF32, 2, 16);
  Fixture b16("gpt2-tiny", DType::kBF16, 2, 16);
  Fixture h16("gpt2-tiny", DType::kF16, 2, 16);
  double l = f32.Loss();
  CHECK(b16.Loss() == Approx(l).epsilon(1e-2));
  CHECK(h16.Loss() == Approx(l).epsilon(1e-3));
  for (Fixture* f : {&f32, &b16, &h16}) {
    f->params->ZeroGrads();
    REQUIRE(f->ex->Forward(0).ok());
    REQUIRE(f->ex->Backward(1.0f, 0).ok());
  }
  // Gradients agree after narrowing to 16 bits.
  const zero::ParamSlot& s = *f32.params->Find("h.0.mlp.fc.weight");
  double num = 0, den = 0;
  for (int64_t i = 0; i < s.numel; ++i) {
    double a = f32.params->GradView(s).f32()[i];
    double b = Bf16ToFloat(b16.params->GradView(*b16.params->Find(s.name)).u16()[i]);
    num += (a - b) * (a - b);
    den += a * a;
  }
  CHECK(std::sqrt(num / den) < 0.05);
}

}  // namespace
}  // namespace ds::exec
