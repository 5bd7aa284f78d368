// ds-ckpt export --config JOB, streamed one file tensor at a time (runtime/ckpt/hf_export.h).
// For a job whose model came from a Hugging Face folder (model.hf), the trained weights are
// written back as that folder's family stores them, beside the folder's own config.json,
// generation_config.json and tokenizer files, copied as they are, so transformers'
// from_pretrained and the tokenizer load the output as they loaded the input.
#pragma once

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "tools/ds_ckpt/commands.h"

namespace ds::tools {

// `o.input`: a checkpoint (root or step directory, consolidated or one shard file per rank,
// every file verified first) or our .safetensors (ds-worker --export-init, ds-ckpt
// consolidate); `o.output` the folder; `o.dtype`, `o.max_shard_size` (default 5GB).
Status ExportHfJob(const ConvertOptions& o, const config::JobConfig& job);

// The same for a generated GPT-2 / Llama job without experts (ds-model's families): the
// weights streamed by the family's map, `config_json` (hf_config.h) beside them.
Status ExportGeneratedJob(const ConvertOptions& o, const config::JobConfig& job,
                          const std::string& config_json);

}  // namespace ds::tools
