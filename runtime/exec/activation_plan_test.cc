// The planner's activation memory (runtime/plan/model_facts.h) is what the executor allocates,
// byte for byte: its activation arena with the micro-batch's tokens, and its activation-gradient
// arena, for GPT-2 and Llama graphs in fp32, in a bf16 host step (bf16 products: the
// activations and gradients the host kernels take stored in bf16), under selective and full
// recompute, and with a split backward (zero-bubble schedules).
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "runtime/exec/executor.h"
#include "runtime/graph/model_builder.h"
#include "runtime/graph/recompute.h"
#include "runtime/plan/model_facts.h"

namespace ds::exec {
namespace {

struct Case {
  const char* name;
  DType dtype;
  RecomputeMode recompute;
  bool split_backward;
};

void Check(const std::string& preset, const Case& c) {
  INFO(preset << ", " << c.name);
  ModelSpec spec = ModelPreset(preset).value();
  spec.vocab_size = 24;
  const Graph graph = BuildModelGraph(spec).value();
  zero::ParamStore params(graph, c.dtype);
  params.Initialize(graph, 3);
  auto segments = RecomputeSegments(graph, c.recompute);
  REQUIRE(segments.ok());
  ExecutorOptions options{3, 11, true, nullptr};
  options.matmul = c.dtype;  // a bf16 model multiplies bf16: the host bf16 step
  options.recompute = *segments;
  options.split_backward = c.split_backward;
  auto ex = Executor::Create(graph, &params, options);
  REQUIRE(ex.ok());
  plan::ActivationOptions o;
  o.storage =
      c.dtype == DType::kBF16 ? plan::ActivationStorage::kHostBf16 : plan::ActivationStorage::kF32;
  o.split_backward = c.split_backward;
  auto facts = plan::AnalyzeModel(graph, 3, 11, *segments, o);
  REQUIRE(facts.ok());
  int64_t planned = facts->input_bytes + facts->forward_arena_bytes + facts->recompute_arena_bytes;
  for (const plan::BlockFacts& b : facts->blocks) planned += b.activation_bytes;
  CHECK((*ex)->activation_bytes() + (*ex)->input_bytes() == planned);
  CHECK((*ex)->activation_grad_bytes() == facts->activation_grad_bytes);
  if (c.dtype == DType::kBF16 && !c.split_backward) CHECK((*ex)->bf16_activations() > 0);
}

TEST_CASE("the plan counts the executor's activation and gradient arenas exactly", "[exec]") {
  const Case cases[] = {
      {"fp32", DType::kF32, RecomputeMode::kNone, false},
      {"bf16 host step", DType::kBF16, RecomputeMode::kNone, false},
      {"fp32, selective recompute", DType::kF32, RecomputeMode::kSelective, false},
      {"bf16, full recompute", DType::kBF16, RecomputeMode::kFull, false},
      {"fp32, split backward", DType::kF32, RecomputeMode::kNone, true},
      {"bf16, split backward", DType::kBF16, RecomputeMode::kNone, true},
  };
  for (const std::string preset : {"gpt2-tiny", "llama-tiny"})
    for (const Case& c : cases) Check(preset, c);
}

}  // namespace
}  // namespace ds::exec
