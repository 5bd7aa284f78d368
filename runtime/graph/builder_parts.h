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

// pad_mask: the caller's left pads per sequence, int32 [batch] (kState "pad.left"), which
// attention masks and the position ops subtract; -1 without.
int LeftPads(Builder& b, const ModelSpec& s);

// `in` plus the pads when there are any.
std::vector<int> WithPads(std::vector<int> in, int pads);

// The graphs of the families (model_builder.h): Llama's and the ones built on it; OPT's;
// GPT-NeoX's.
void BuildLlama(const ModelSpec& s, Graph* g);
void BuildOpt(const ModelSpec& s, Graph* g);
void BuildGptNeox(const ModelSpec& s, Graph* g);

}  // namespace ds::graph_internal
