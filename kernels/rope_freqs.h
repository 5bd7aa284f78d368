// The rotary frequencies of every RoPE variant the Hugging Face families use, shared by the
// rope op's shape inference (kernels/ops/rope.cc), its kernels and the generator.
// Computed as transformers' ROPE_INIT_FUNCTIONS do (models-and-data.md section 2), with
// d = rotary_dim (partial rotary: the first d dims of each head rotate, rotate-half pairing
// j with j + d/2 inside them; the rest pass through) and f_i = theta^(-2i/d), i < d/2:
//   default  f_i
//   linear   f_i / factor
//   dynamic  f_i with theta' = theta (factor S'/M - (factor - 1))^(d/(d-2)), S' = max(S, M),
//            S the largest position + 1 of the call (transformers recomputes per forward as the
//            length grows: identical for training at T <= M and for generation)
//   llama3   wavelength bands around O / high_freq_factor and O / low_freq_factor: short
//            wavelengths keep f_i, long ones f_i / factor, a linear blend between
//   yarn     f_i blended with f_i / factor over the ramp between the correction dims of
//            beta_fast and beta_slow; cos and sin multiplied by attention_factor
// Attributes (all optional; the defaults are plain RoPE over the whole head): theta,
// rope_type, rotary_dim, factor, max_positions (dynamic's M), original_max (O),
// low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor, truncate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/op.h"
#include "runtime/base/status.h"

namespace ds::kernels {

struct RopeParams {
  std::string type = "default";  // default, linear, dynamic, llama3, yarn
  double theta = 10000.0;
  int64_t rotary_dim = 0;  // rotated dims of each head (even); the head size when 0
  double factor = 1.0;
  int64_t max_positions = 0;  // dynamic: M
  int64_t original_max = 0;   // llama3, yarn: O
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 1.0;  // cos and sin are multiplied by it (yarn)
  bool truncate = true;           // yarn: correction dims rounded outward
  // Whether the frequencies depend on the call's length (dynamic only).
  bool length_dependent() const { return type == "dynamic"; }
};

// The attribute names the rope op accepts besides n_head, n_kv_head and position_chunk.
const std::vector<std::string>& RopeParamAttrNames();

// Reads and checks the attributes for heads of `head_dim`: an unknown rope_type, a rotary_dim
// that is odd or exceeds the head, or a missing factor / original_max is an error naming it.
Status ReadRopeParams(const Attrs& attrs, int64_t head_dim, RopeParams* p);

// inv_freq [rotary_dim / 2] for a call whose largest position + 1 is `length`, rounded to
// float as transformers computes it in fp32.
std::vector<float> RopeInvFreq(const RopeParams& p, int64_t length);

}  // namespace ds::kernels
