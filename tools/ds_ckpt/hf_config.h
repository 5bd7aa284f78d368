// config.json for an exported Hugging Face folder, from the job's model section: what
// transformers' from_pretrained and ds-generate --hf read for the gpt2 and llama families
// (the sizes, the MLP width and tying as the job's graph has them; GPT-2's tanh GELU and 1e-5
// layer norm, Llama's SiLU, 1e-5 RMSNorm and rope_theta).
//
//   DS_ASSIGN_OR_RETURN(std::string json, HfConfigJson(job, DType::kBF16));
#pragma once

#include <string>

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/core/dtype.h"

namespace ds::tools {

// InvalidArgument naming the job file when its model has no Hugging Face config here: a graph
// file instead of model.family, a mixture of experts, a reward or PPO head.
StatusOr<std::string> HfConfigJson(const config::JobConfig& job, DType dtype);

}  // namespace ds::tools
