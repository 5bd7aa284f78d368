// Which linear layers of a model take LoRA adapters (runtime/graph/lora.h), chosen by Hugging
// Face module names as PEFT's target_modules and DeepSpeed-Chat's lora_module_name choose them
// (models-and-data.md section 10). The modules are the checkpoint's weight tensors without
// ".weight" (hf_tensor_map.h's HfOutputs): "model.layers.0.self_attn.q_proj" is rows [0, q) of
// our fused attn.qkv, "transformer.h.0.attn.c_attn" (GPT-2's Conv1D) all of it.
//
//   DS_ASSIGN_OR_RETURN(auto targets, FindLoraTargets(spec, graph, {.modules = {"q_proj"}}));
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/lora.h"
#include "runtime/graph/model_builder.h"

namespace ds::hf {

// One of the three ways to name targets.
struct LoraSelection {
  // PEFT's target_modules as a list: a module whose path equals an entry or ends with "." +
  // entry; {"all-linear"}: every linear layer but the output head. Empty: PEFT's default for
  // the family (DefaultLoraModules).
  std::vector<std::string> modules;
  std::string regex;      // PEFT's target_modules as a string: a full match of the path
  std::string substring;  // DeepSpeed-Chat's lora_module_name: the path contains it
};

// PEFT's default target_modules for a model_type: q_proj, v_proj (Llama-like, OPT), c_attn
// (gpt2), query_key_value (gpt_neox); empty where PEFT has none (phi3).
std::vector<std::string> DefaultLoraModules(const std::string& family);

// The targets in graph order, each on the rows its module occupies. InvalidArgument when
// nothing matches (listing what could), for the output head, a module split over several
// parameters (Phi 3's gate_up_proj) or stored per-head interleaved (GPT-NeoX's
// query_key_value), and for a family without a default when none is given.
StatusOr<std::vector<LoraTarget>> FindLoraTargets(const ModelSpec& spec, const Graph& graph,
                                                  const LoraSelection& selection);

}  // namespace ds::hf
