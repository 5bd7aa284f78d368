// The tiny GPT job the trainer tests share (test-only): global batch 8 of `micro` sequences per
// rank, clipping at 1.0, AdamW, ZeRO `stage` with small buckets (stage 3 partitions every weight
// matrix: persistence threshold 100), GPT-2 with 2 layers of 32, vocabulary 32, 16 tokens,
// 20 steps, one thread, on `device_type` (cpu or cuda). `extra` is appended (more YAML keys).
#pragma once

#include <string>

namespace ds::testing {

inline std::string TinyGptJob(const std::string& data, int micro, int stage,
                              const std::string& device_type, const std::string& extra = "") {
  return "train_batch_size: 8\n"
         "train_micro_batch_size_per_gpu: " +
         std::to_string(micro) +
         "\n"
         "gradient_clipping: 1.0\n"
         "optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}\n"
         "zero_optimization: {stage: " +
         std::to_string(stage) + ", reduce_bucket_size: 3000" +
         (stage == 3
              ? ", stage3_param_persistence_threshold: 100, stage3_prefetch_bucket_size: 2000,"
                " stage3_max_reuse_distance: 1000"
              : "") +
         "}\n"
         "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 32, max_seq_len: "
         "16}\n"
         "data: {train: " +
         data +
         ", seq_len: 16, shuffle: true}\n"
         "training: {train_iters: 20}\n"
         "device: {type: " +
         device_type + ", threads: 1}\n" + extra;
}

}  // namespace ds::testing
