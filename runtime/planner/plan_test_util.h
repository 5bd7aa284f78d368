// Shared helpers of the planner tests: preset graphs and plans that must build.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "runtime/graph/model_builder.h"
#include "runtime/planner/plan_builder.h"

namespace ds::planner::testing {

inline Graph PresetGraph(const std::string& name) {
  auto spec = ModelPreset(name);
  REQUIRE(spec.ok());
  auto graph = BuildModelGraph(*spec);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// A GPT-2 or Llama graph of the given sizes (4 heads; Llama with 2 key / value heads).
inline Graph SizedGraph(const std::string& family, int n_layer, int64_t n_embd, int64_t vocab_size,
                        int64_t max_seq_len) {
  ModelSpec spec;
  spec.family = family;
  spec.n_layer = n_layer;
  spec.n_embd = n_embd;
  spec.n_head = 4;
  spec.n_kv_head = family == "llama" ? 2 : 0;
  spec.vocab_size = vocab_size;
  spec.max_seq_len = max_seq_len;
  auto graph = BuildModelGraph(spec);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// Mixed-precision Adam with clipping, as the ZeRO paper counts it.
inline plan::PlanConfig BaseConfig(int stage, DType dtype = DType::kBF16) {
  plan::PlanConfig c;
  c.stage = stage;
  c.micro_batch_size = 2;
  c.gradient_accumulation_steps = 1;
  c.seq_len = 32;
  c.model_dtype = dtype;
  c.comm_dtype = dtype;
  c.gradient_clipping = true;
  return c;
}

// The plan of `world` ranks under the config's own tensor, pipeline, expert and Ulysses sizes.
inline proto::Plan MustPlan(const Graph& graph, int world, const plan::PlanConfig& config) {
  auto topo = plan::TopologyFor(world, config);
  INFO((topo.ok() ? "" : topo.status().ToString()));
  REQUIRE(topo.ok());
  auto plan = MakePlan(graph, *topo, config);
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

inline int Count(const proto::RankPlan& rp, proto::Instruction::Kind kind) {
  int n = 0;
  for (const proto::Instruction& ins : rp.instructions()) n += ins.kind() == kind;
  return n;
}

}  // namespace ds::planner::testing
