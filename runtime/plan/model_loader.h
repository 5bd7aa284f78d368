// Turns a job's `model` section into a validated Graph: a graph file, or the built-in
// GPT-2 / Llama generator settings.
#pragma once

#include "runtime/config/job_config.h"
#include "runtime/graph/graph.h"

namespace ds::plan {

StatusOr<Graph> LoadModelGraph(const config::JobConfig& config);

}  // namespace ds::plan
