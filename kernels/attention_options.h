// The attention variants of the Hugging Face families, read from attention's and kv_attention's
// attributes (shared by their shape inference and every backend's kernels):
//   scale    the score scale; 0 or absent: 1 / sqrt(head_dim) (Gemma 2:
//            query_pre_attn_scalar^-1/2)
//   window   sliding-window attention: query position i reads keys j with i - window < j <= i
//            (window keys, itself included; Mistral, Gemma 2's sliding layers, as transformers'
//            masking_utils); 0 or absent: every earlier key
//   softcap  scores s become softcap tanh(s / softcap) after scaling, before the mask (Gemma 2's
//            attn_logit_softcapping); 0 or absent: none
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/op.h"
#include "runtime/base/status.h"

namespace ds::kernels {

struct AttentionOptions {
  float scale = 1.f;
  int64_t window = 0;
  float softcap = 0.f;
  // The first key position query position i reads, at least `first`.
  int64_t FirstKey(int64_t i, int64_t first) const {
    return window > 0 && i - window + 1 > first ? i - window + 1 : first;
  }
};

const std::vector<std::string>& AttentionOptionAttrNames();

// Reads and checks the options for heads of `head_dim` ("<op>: window must be >= 0", ...).
Status ReadAttentionOptions(const char* op, const Attrs& attrs, int64_t head_dim,
                            AttentionOptions* o);

// Whether any option differs from plain causal attention at 1/sqrt(head_dim).
bool HasAttentionOptions(const Attrs& attrs);

}  // namespace ds::kernels
