// Graph generators for the GPT-2 family (learned positions, LayerNorm, GELU, biases, tied
// embeddings) and the Llama family (RMSNorm, RoPE, SwiGLU, no biases, untied head,
// grouped-query attention), each optionally with mixture-of-experts MLPs (moe_builder.h: GPT-2
// with DeepSpeed-MoE's experts and its residual PR-MoE, Llama with Mixtral's top-2 SwiGLU
// experts). Parameter names are the contract shared with checkpoints
// and the Hugging Face name mapping (runtime/ckpt/hf_names.h).
//
//   ModelSpec spec = ModelPreset("gpt2-124m").value();
//   DS_ASSIGN_OR_RETURN(Graph g, BuildModelGraph(spec));
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/graph.h"

namespace ds {

// Mixture of experts (DeepSpeed-MoE's layer arguments, parallelism.md D): blocks expert_interval,
// 2 x expert_interval, ... (1-based) replace their MLP with num_experts experts.
struct MoeSpec {
  int num_experts = 0;  // 0: a dense model
  int expert_interval = 1;
  int top_k = 1;  // 1 or 2
  float capacity_factor = 1.0f;
  float eval_capacity_factor = 1.0f;
  int min_capacity = 4;
  bool drop_tokens = true;
  bool use_residual = false;  // PR-MoE: a dense MLP beside the experts, mixed per token
  std::string noisy_gate_policy = "none";  // "none" or "rsample" (top-1)
  std::string second_expert = "sample";    // top-2: "sample" (Gumbel, as DeepSpeed) or "argmax"
  bool use_rts = true;                     // top-1: random token selection when dropping
  float aux_loss_coeff = 0.01f;            // Megatron-DeepSpeed's moe_loss_coeff
  int expert_ffn_hidden = 0;               // 0: the dense MLP's width
};

// RoPE's variants (kernels/rope_freqs.h: the rope op's attributes), from config.json's
// rope_parameters / rope_scaling.
struct RopeSpec {
  std::string type = "default";  // default, linear, dynamic, llama3, yarn
  double factor = 1.0;
  int64_t max_positions = 0;  // dynamic: max_position_embeddings (0: the spec's max_seq_len)
  int64_t original_max = 0;   // llama3, yarn: the pre-training context
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 1.0;                         // yarn: cos and sin scaled
  bool truncate = true;                                  // yarn
  double partial = 1.0;  // the rotated fraction of each head (GPT-NeoX, Phi-3)
};

// The architecture options of the Hugging Face families (runtime/hf reads them from
// config.json; models-and-data.md section 3). The defaults are GPT-2's and Llama's own.
struct ArchSpec {
  int head_dim = 0;                 // 0: n_embd / n_head (Qwen 3 and Gemma set their own)
  bool qkv_bias = false;            // Qwen 2; Llama's attention_bias (with o_bias)
  bool o_bias = false;              // Llama's attention_bias
  bool mlp_bias = false;            // Llama's mlp_bias
  bool qk_norm = false;             // Qwen 3: RMSNorm over each q and k head before RoPE
  std::string act;                  // "" family default; gated MLPs: silu, gelu_tanh; opt: relu;
                                    // gpt_neox: gelu_erf, gelu_tanh
  bool norm_unit_offset = false;    // Gemma: norms scale by (1 + w)
  float embed_scale = 0.0f;         // Gemma: embeddings times sqrt(hidden); 0: none
  float attn_scale = 0.0f;          // Gemma 2: query_pre_attn_scalar^-1/2; 0: head_dim^-1/2
  float attn_softcap = 0.0f;        // Gemma 2's attn_logit_softcapping
  float final_softcap = 0.0f;       // Gemma 2's final_logit_softcapping
  int sliding_window = 0;           // Mistral, Gemma 2, Qwen 2: keys within the window
  std::vector<int> sliding_layers;  // the layers with the window; empty: every layer
  bool sandwich_norms = false;      // Gemma 2: norms after attention and around the MLP
  RopeSpec rope;
  // OPT: learned positions read rows p + position_offset; post-LN blocks when !pre_norm (no
  // final norm then); project_in / project_out when embed_proj_dim differs from n_embd.
  int position_offset = 0;
  bool pre_norm = true;
  int embed_proj_dim = 0;
  bool parallel_residual = false;  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
  bool attn_bias = true;           // GPT-NeoX's attention_bias
};

struct ModelSpec {
  // gpt2, llama, and the Hugging Face families runtime/hf reads: mistral, qwen2, qwen3, phi3,
  // gemma, gemma2 (Llama's graph with ArchSpec's options), opt, gpt_neox (their own graphs).
  std::string family = "gpt2";
  int n_layer = 4;
  int n_embd = 256;
  int n_head = 4;
  int n_kv_head = 0;  // 0: n_head (multi-head attention)
  int vocab_size = 8192;
  int max_seq_len = 256;
  int ffn_hidden = 0;    // 0: 4*C for gpt2, SwiGLU's 8C/3 rounded up to 64 for llama
  float dropout = 0.0f;  // gpt2 only: after embeddings, attention and MLP projections
  float rope_theta = 10000.0f;
  float norm_eps = 0.0f;  // 0: 1e-5
  float init_std = 0.02f;
  int tie_embeddings = -1;  // -1: family default (gpt2 tied, llama untied)
  // "lm": next-token logits and cross-entropy. "reward": DeepSpeed-Chat's reward model, a value
  // head (v_head [1, C], no bias) at every position and reward_pair_loss at the positions the
  // targets mark (rows [0, B/2) chosen, [B/2, B) rejected); no LM head. "ppo_actor": the logits
  // and PPO's clipped surrogate (ppo_actor_loss) over the targets' tokens, "ppo_critic": the
  // value head and PPO's clipped value loss (ppo_value_loss); their per-token inputs are kState
  // [batch, seq] fp32 tensors the caller fills: ppo.old_logprobs, ppo.advantages, ppo.mask,
  // ppo.ptx (actor; its targets are the tokens; ptx: the pretraining term's weights, 0 in a PPO
  // step), ppo.old_values, ppo.returns (critic; its targets are the answer mask, 1 / 0).
  std::string head = "lm";
  float cliprange = 0.2f;        // ppo_actor (DeepSpeed-Chat's default)
  float cliprange_value = 0.2f;  // ppo_critic
  // Left-padded batches (RLHF's prompts of several lengths): the graph takes each sequence's
  // left pads, int32 [batch], as the kState input kLeftPads; attention reads no pad from a real
  // token and the positions start at each sequence's first real token (kernels/cpu/attention.cc).
  // Zero pads compute what the graph without them does.
  bool pad_mask = false;
  // Packed documents (Megatron's reset_attention_mask, reset_position_ids): the graph takes
  // each token's document start (kDocStarts, attention reads keys from it on) and its position
  // in its document (kDocPositions, for rope / position_embedding). Not with pad_mask.
  bool reset_attention_mask = false;
  bool reset_position_ids = false;
  MoeSpec moe;
  ArchSpec arch;
};

// Whether `family` builds on Llama's graph (RMSNorm, RoPE, gated MLP): llama, mistral, qwen2,
// qwen3, phi3, gemma, gemma2.
bool IsLlamaLike(const std::string& family);

// The named presets ds-model offers: gpt2-tiny, gpt2-small-test, gpt2-124m, gpt2-350m,
// llama-tiny, llama-small, llama-1b, and the MoE ones gpt2-moe-tiny, llama-moe-tiny.
StatusOr<ModelSpec> ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();

// Checks the spec (positive sizes, heads divide C, kv heads divide heads, ...).
Status CheckModelSpec(const ModelSpec& spec);
StatusOr<Graph> BuildModelGraph(const ModelSpec& spec);

}  // namespace ds
