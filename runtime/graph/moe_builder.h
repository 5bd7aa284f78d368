// The mixture-of-experts MLPs of the model generators (model_builder.h), after DeepSpeed-MoE and
// Mixtral (ops: kernels/ops/moe.cc). A block's MoE MLP on its normed input h:
//   logits = linear(h, gate [E, C]); routes, weights, aux, capacity = moe_router(logits)
//   d = moe_dispatch(h, routes, capacity); experts on d; out = moe_combine(experts, ...)
// GPT-2 experts are fc -> gelu -> proj with biases (`<p>mlp.experts.fc.weight` [E, F, C], ...);
// with use_residual (PR-MoE) the dense MLP runs beside them and `<p>mlp.coefficient` mixes the
// two per token. Llama experts are Mixtral's SwiGLU `<p>block_sparse_moe.experts.w1/w3`
// [E, F, C] and `w2` [E, C, F]. The loss adds aux_loss_coeff x the layers' aux losses
// (moe_loss).
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/graph_builder.h"
#include "runtime/graph/model_builder.h"

namespace ds::graph_internal {

// Block i (0-based) has an MoE MLP.
bool IsMoeBlock(const MoeSpec& moe, int block);

// The MoE settings' checks (experts, top_k, factors, policies); OK for a dense spec.
Status CheckMoeSpec(const ModelSpec& spec);

// The router's attributes (kernels/moe_capacity.h and moe_router's).
kernels::Attrs GatingAttrs(const MoeSpec& moe);

// Appends block `block`'s MoE MLP on `h` (prefix "h.<i>." or "layers.<i>."), returns its
// output [batch, seq, C] and appends its aux loss to *aux. `dense` builds the dense MLP on h
// (PR-MoE's residual branch, GPT-2).
int Gpt2MoeMlp(Builder& b, const ModelSpec& s, const std::string& prefix, int h, int block,
               int64_t ffn, float proj_std, std::vector<int>* aux,
               const std::function<int()>& dense);
int LlamaMoeMlp(Builder& b, const ModelSpec& s, const std::string& prefix, int h, int block,
                int64_t ffn, std::vector<int>* aux);

// The loss backward starts from: `loss` itself without aux losses, else
// moe_loss(loss, aux...) = loss + aux_loss_coeff x their sum.
int MoeTotalLoss(Builder& b, const MoeSpec& moe, int loss, const std::vector<int>& aux, int block);

}  // namespace ds::graph_internal
