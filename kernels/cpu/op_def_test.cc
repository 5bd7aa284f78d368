// OpDefs of the CPU ops: every op of the contract is registered with a cpu/f32 kernel,
// costs and saved-activation bytes match hand-computed values, and shape inference
// rejects bad shapes with messages that name the problem.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/registry.h"

namespace ds::kernels {
namespace {

const std::vector<std::string> kOps = {"embedding", "position_embedding",
                                       "linear",    "layernorm",
                                       "rmsnorm",   "gelu",
                                       "silu",      "add",
                                       "mul",       "rope",
                                       "attention", "cross_entropy",
                                       "dropout",   "relu",
                                       "gelu_erf",  "scale",
                                       "softcap",   "head_rmsnorm"};

TensorSpec F32(Shape s) { return {std::move(s), DType::kF32}; }
TensorSpec I32(Shape s) { return {std::move(s), DType::kI32}; }

Attrs HeadAttrs(int64_t n_head, int64_t n_kv_head) {
  Attrs a;
  a.SetInt("n_head", n_head);
  a.SetInt("n_kv_head", n_kv_head);
  return a;
}

// Valid sample inputs for each op.
std::vector<TensorSpec> SampleInputs(const std::string& op) {
  if (op == "embedding") return {I32({2, 8}), F32({50, 16})};
  if (op == "position_embedding") return {F32({2, 8, 16}), F32({32, 16})};
  if (op == "linear") return {F32({2, 8, 16}), F32({24, 16}), F32({24})};
  if (op == "layernorm") return {F32({2, 8, 16}), F32({16}), F32({16})};
  if (op == "rmsnorm") return {F32({2, 8, 16}), F32({16})};
  if (op == "add" || op == "mul") return {F32({2, 8, 16}), F32({2, 8, 16})};
  if (op == "rope" || op == "attention") return {F32({2, 8, 64})};
  if (op == "cross_entropy") return {F32({2, 8, 50}), I32({2, 8})};
  if (op == "head_rmsnorm") return {F32({2, 8, 64}), F32({8}), F32({8})};
  return {F32({2, 8, 16})};
}

// Forward and backward FLOPs of each sample, worked out here from the cost model (multiply-add =
// 2; N = 16 tokens of C = 16 features, 256 elements, unless the sample says otherwise).
const std::map<std::string, std::pair<double, double>> kSampleFlops = {
    {"embedding", {0, 16 * 16}},             // a gather; backward adds N rows of C
    {"position_embedding", {256, 2 * 256}},  // x + wpe; dx and dwpe
    {"linear",
     {2.0 * 16 * 16 * 24 + 16 * 24,    // x W^T (N 16, K 16, M 24) + bias
      4.0 * 16 * 16 * 24 + 16 * 24}},  // dx and dW, + db
    {"layernorm", {8 * 256, 14 * 256}},
    {"rmsnorm", {4 * 256, 10 * 256}},
    {"gelu", {12 * 256, 20 * 256}},  // the tanh approximation
    {"silu", {5 * 256, 10 * 256}},
    {"add", {256, 2 * 256}},
    {"mul", {256, 4 * 256}},
    // qkv [2, 8, 64] with 4 query and 2 kv heads of D 8: 3 flops per rotated q and k element.
    {"rope", {3.0 * 2 * 8 * (4 + 2) * 8, 3.0 * 2 * 8 * (4 + 2) * 8}},
    // Causal: QK^T and PV over half the T x T scores, 4 B H T^2 D / 2; backward 2.5x.
    {"attention", {4.0 * 2 * 4 * 8 * 8 * 8 / 2, 2.5 * 4.0 * 2 * 4 * 8 * 8 * 8 / 2}},
    {"cross_entropy", {4.0 * 2 * 8 * 50, 4.0 * 2 * 8 * 50}},  // logits [2, 8, 50]
    {"dropout", {256, 2 * 256}},
    {"relu", {256, 256}},
    {"gelu_erf", {10 * 256, 14 * 256}},
    {"scale", {256, 256}},
    {"softcap", {4 * 256, 3 * 256}},
    {"head_rmsnorm", {4.0 * 2 * 8 * 64, 10.0 * 2 * 8 * 64}},  // per element of qkv
};

Attrs SampleAttrs(const std::string& op) {
  if (op == "rope" || op == "attention" || op == "head_rmsnorm")
    return HeadAttrs(4, 2);  // D = 64 / 8 = 8
  Attrs a;
  if (op == "dropout") a.SetFloat("p", 0.1);
  if (op == "scale") a.SetFloat("factor", 2.0);
  if (op == "softcap") a.SetFloat("cap", 30.0);
  return a;
}

TEST_CASE("op defs: all 18 ops are registered with cpu/f32 kernels", "[kernels][opdef]") {
  for (const std::string& op : kOps) {
    INFO("op " << op);
    const OpDef* def = FindOp(op);
    REQUIRE(def != nullptr);
    CHECK(def->name == op);
    const Kernel* k = FindKernel(op, Device::kCpu, DType::kF32);
    REQUIRE(k != nullptr);
    CHECK(k->forward);
    CHECK(k->backward);
    REQUIRE(def->infer);
    REQUIRE(def->forward_flops);
    REQUIRE(def->backward_flops);
    const std::vector<TensorSpec> in = SampleInputs(op);
    CHECK(static_cast<int>(in.size()) >= def->min_inputs);
    CHECK(static_cast<int>(in.size()) <= def->max_inputs);
    std::vector<TensorSpec> out;
    Status s = def->infer(SampleAttrs(op), in, &out);
    INFO(s.ToString());
    REQUIRE(s.ok());
    REQUIRE(static_cast<int>(out.size()) == def->num_outputs);
    REQUIRE(kSampleFlops.count(op) == 1);
    CHECK(def->forward_flops(SampleAttrs(op), in) == kSampleFlops.at(op).first);
    CHECK(def->backward_flops(SampleAttrs(op), in) == kSampleFlops.at(op).second);
    CHECK(SavedActivationBytes(*def, SampleAttrs(op), in, out) >= 0);
  }
  using Names = std::vector<std::string>;
  CHECK(FindOp("attention")->attr_names ==
        Names{"n_head", "n_kv_head", "scale", "window", "softcap"});
  CHECK(FindOp("rope")->attr_names ==
        Names{"n_head", "n_kv_head", "position_chunk", "theta", "rope_type", "rotary_dim", "factor",
              "max_positions", "original_max", "low_freq_factor", "high_freq_factor", "beta_fast",
              "beta_slow", "attention_factor", "truncate"});
  CHECK(FindOp("layernorm")->attr_names == Names{"eps"});
  CHECK(FindOp("rmsnorm")->attr_names == Names{"eps", "unit_offset"});
  CHECK(FindOp("cross_entropy")->attr_names == Names{"ignore_index"});
  CHECK(FindOp("dropout")->attr_names == Names{"p"});
  CHECK(FindOp("linear")->attr_names.empty());
  CHECK(FindOp("embedding")->non_differentiable_inputs == 1u);
  CHECK(FindOp("cross_entropy")->non_differentiable_inputs == 2u);
  CHECK(FindOp("nonexistent") == nullptr);
}

TEST_CASE("op defs: linear and attention costs match hand-computed values", "[kernels][opdef]") {
  SECTION("linear x [4, 256, 256], W [1024, 256], b [1024]") {
    const OpDef* def = FindOp("linear");
    std::vector<TensorSpec> in = {F32({4, 256, 256}), F32({1024, 256}), F32({1024})};
    std::vector<TensorSpec> out;
    REQUIRE(def->infer({}, in, &out).ok());
    REQUIRE(out[0].shape == Shape{4, 256, 1024});
    // 2 N in out + N out (bias) = 2 * 1024 * 256 * 1024 + 1024 * 1024.
    CHECK(def->forward_flops({}, in) == 536870912.0 + 1048576.0);
    CHECK(def->backward_flops({}, in) == 1073741824.0 + 1048576.0);
    // Backward keeps x and W: 2 * 1 MiB.
    CHECK(SavedActivationBytes(*def, {}, in, out) == 2097152);
  }
  SECTION("attention B=4 T=256 H=4 D=64") {
    const OpDef* def = FindOp("attention");
    const Attrs attrs = HeadAttrs(4, 4);
    std::vector<TensorSpec> in = {F32({4, 256, 3 * 4 * 64})};
    std::vector<TensorSpec> out;
    REQUIRE(def->infer(attrs, in, &out).ok());
    REQUIRE(out[0].shape == Shape{4, 256, 256});
    // 4 B H T^2 D / 2 = 4 * 4 * 4 * 256 * 256 * 64 / 2.
    CHECK(def->forward_flops(attrs, in) == 134217728.0);
    CHECK(def->backward_flops(attrs, in) == 2.5 * 134217728.0);
    // qkv (3 MiB) + out (1 MiB) + lse [4, 4, 256] (16 KiB).
    CHECK(SavedActivationBytes(*def, attrs, in, out) == 3145728 + 1048576 + 16384);
  }
  SECTION("saved buffers of the norms and cross_entropy") {
    std::vector<TensorSpec> x = {F32({2, 8, 16}), F32({16}), F32({16})};
    CHECK(FindOp("layernorm")->saved({}, x).size() == 2);
    CHECK(FindOp("layernorm")->saved({}, x)[0].shape == Shape{16});
    CHECK(FindOp("rmsnorm")->saved({}, {x[0], x[1]})[0].shape == Shape{16});
    CHECK(FindOp("cross_entropy")->saved({}, {F32({2, 8, 50}), I32({2, 8})})[0].shape == Shape{16});
  }
}

// Runs infer and returns the error message ("" when it passes).
std::string InferError(const std::string& op, const Attrs& attrs,
                       const std::vector<TensorSpec>& in) {
  std::vector<TensorSpec> out;
  Status s = FindOp(op)->infer(attrs, in, &out);
  if (!s.ok()) CHECK(s.code() == StatusCode::kInvalidArgument);
  return s.ok() ? "" : s.message();
}

TEST_CASE("op defs: infer rejects bad shapes with clear messages", "[kernels][opdef]") {
  using Catch::Contains;
  CHECK(InferError("linear", {}, {F32({4, 256}), F32({64, 128})}) ==
        "linear: x has 256 features but W expects 128");
  CHECK_THAT(InferError("linear", {}, {F32({4, 128}), F32({64, 128}), F32({32})}),
             Contains("b has shape [32]"));
  CHECK_THAT(InferError("linear", {}, {F32({4, 128})}), Contains("expects 2 to 3 inputs"));
  CHECK_THAT(InferError("embedding", {}, {F32({2, 8}), F32({50, 16})}),
             Contains("ids must be i32"));
  CHECK_THAT(InferError("embedding", {}, {I32({2, 8}), F32({50})}), Contains("rank 2"));
  CHECK_THAT(InferError("position_embedding", {}, {F32({2, 40, 16}), F32({32, 16})}),
             Contains("T=40") && Contains("32 positions"));
  CHECK_THAT(InferError("position_embedding", {}, {F32({2, 8, 16}), F32({32, 8})}),
             Contains("16 channels"));
  CHECK_THAT(InferError("layernorm", {}, {F32({2, 16}), F32({8}), F32({16})}),
             Contains("gamma has shape [8]"));
  CHECK_THAT(InferError("rmsnorm", {}, {F32({2, 16}), F32({16, 1})}), Contains("gamma"));
  CHECK_THAT(InferError("add", {}, {F32({2, 16}), F32({2, 8})}), Contains("b has shape [2, 8]"));
  CHECK_THAT(InferError("mul", {}, {F32({2, 16}), I32({2, 16})}), Contains("float"));
  Attrs p1;
  p1.SetFloat("p", 1.0);
  CHECK_THAT(InferError("dropout", p1, {F32({4})}), Contains("p must be in [0, 1)"));
  CHECK_THAT(InferError("attention", HeadAttrs(4, 3), {F32({2, 8, 80})}),
             Contains("multiple of n_kv_head"));
  CHECK_THAT(InferError("attention", HeadAttrs(4, 2), {F32({2, 8, 60})}),
             Contains("not a multiple of"));
  CHECK_THAT(InferError("attention", Attrs(), {F32({2, 8, 60})}), Contains("n_head"));
  CHECK_THAT(InferError("attention", HeadAttrs(2, 2), {F32({16, 60})}), Contains("rank 3"));
  CHECK_THAT(InferError("rope", HeadAttrs(2, 1), {F32({2, 8, 12})}), Contains("must be even"));
  CHECK_THAT(InferError("cross_entropy", {}, {F32({2, 8, 50}), I32({2, 7})}),
             Contains("targets have shape [2, 7]"));
  CHECK_THAT(InferError("cross_entropy", {}, {F32({2, 8, 50}), F32({2, 8})}),
             Contains("targets must be i32"));
}

TEST_CASE("op defs: the families' attributes are checked by name", "[kernels][opdef]") {
  using Catch::Contains;
  Attrs rope = HeadAttrs(4, 2);
  rope.SetString("rope_type", "longrope");
  CHECK_THAT(InferError("rope", rope, {F32({2, 8, 64})}), Contains("rope_type \"longrope\""));
  rope.SetString("rope_type", "llama3");
  rope.SetFloat("factor", 8.0);
  CHECK_THAT(InferError("rope", rope, {F32({2, 8, 64})}), Contains("llama3 needs original_max"));
  Attrs partial = HeadAttrs(4, 2);
  partial.SetInt("rotary_dim", 3);
  CHECK_THAT(InferError("rope", partial, {F32({2, 8, 64})}), Contains("rotary_dim 3"));
  Attrs window = HeadAttrs(4, 2);
  window.SetInt("window", -1);
  CHECK_THAT(InferError("attention", window, {F32({2, 8, 64})}), Contains("window must be >= 0"));
  CHECK_THAT(InferError("softcap", {}, {F32({4})}), Contains("cap must be > 0"));
  CHECK_THAT(InferError("scale", {}, {F32({4})}), Contains("factor attribute is required"));
  CHECK_THAT(InferError("head_rmsnorm", HeadAttrs(4, 2), {F32({2, 8, 64}), F32({8}), F32({4})}),
             Contains("k_weight has shape [4]"));
  Attrs offset;
  offset.SetInt("offset", 2);
  CHECK_THAT(InferError("position_embedding", offset, {F32({2, 31, 16}), F32({32, 16})}),
             Contains("T=31"));
}

}  // namespace
}  // namespace ds::kernels

namespace ds::kernels {
namespace {

// The planner counts a bf16 host step's activations from the ops' HostBf16 declarations
// (runtime/graph/host_bf16.h) and the executor stores them by the host kernels' flags: every op
// with a host kernel declares exactly its kernel's flags.
TEST_CASE("op defs: HostBf16 is the host kernel's bf16 flags", "[kernels][opdef]") {
  int declared = 0;
  for (const std::string& op : RegisteredOps()) {
    const Kernel* k = FindKernel(op, Device::kCpu, DType::kF32);
    if (!k) continue;
    INFO("op " << op);
    const HostBf16& h = FindOp(op)->host_bf16;
    CHECK(h.act_inputs == k->bf16_act_inputs);
    CHECK(h.act_outputs == k->bf16_act_outputs);
    CHECK(h.grad_inputs == k->bf16_grad_inputs);
    CHECK(h.grad_outputs == k->bf16_grad_outputs);
    CHECK(h.overwrites_fresh_grads == k->overwrites_fresh_grads);
    declared += h.act_inputs || h.act_outputs || h.overwrites_fresh_grads;
  }
  CHECK(declared >= 9);  // linear, attention, cross_entropy, add, mul, gelu, silu, the norms
}

}  // namespace
}  // namespace ds::kernels
