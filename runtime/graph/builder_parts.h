// Pieces every model generator shares (model_builder.cc, llama_builder.cc,
// gpt_family_builder.cc): the output head, left pads, dropout, norm attributes. Internal to
// runtime/graph.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/graph_builder.h"
#include "runtime/graph/model_builder.h"

namespace ds::graph_internal {

kernels::Attrs Eps(float eps);

// `x` through dropout(p) when p > 0, else `x`.
int MaybeDropout(Builder& b, int x, const std::string& name, int64_t width, int block, float p);

// What the final hidden state `x` (width `width`) feeds: the next-token logits over
// `embedding` when tied, else over a head of its own ("lm_head.weight"), Gemma 2's soft cap
// when the spec has one, and the cross-entropy (head "lm") or PPO's actor loss; or
// DeepSpeed-Chat's value head (reward, ppo_critic). Returns the loss the graph ends in.
int OutputHead(Builder& b, const ModelSpec& s, int x, int64_t width, int embedding, bool tied,
               int targets, const std::vector<int>& aux);

// The per-token inputs the caller fills (kState): what attention takes as its second input and
// what rope / position_embedding take as theirs, -1 where none. pad_mask: the left pads per
// sequence, int32 [batch] ("pad.left"), for both. Packed documents: each token's document
// start int32 [batch, seq] ("doc.starts", reset_attention_mask) for attention, its position in
// its document int32 [batch, seq] ("doc.positions", reset_position_ids) for the position ops.
struct TokenInputs {
  int attention = -1;
  int positions = -1;
};
TokenInputs PerTokenInputs(Builder& b, const ModelSpec& s);

// `in` plus `pads` (a TokenInputs field) when there is one.
std::vector<int> WithPads(std::vector<int> in, int pads);

// The graphs of the families (model_builder.h): Llama's and the ones built on it; OPT's;
// GPT-NeoX's.
void BuildLlama(const ModelSpec& s, Graph* g);
void BuildOpt(const ModelSpec& s, Graph* g);
void BuildGptNeox(const ModelSpec& s, Graph* g);

}  // namespace ds::graph_internal
