#include "kernels/moe_capacity.h"

#include <algorithm>
#include <cmath>

namespace ds::kernels {

MoeGating MoeGatingFrom(const Attrs& a) {
  MoeGating g;
  g.num_experts = a.Int("num_experts", 0);
  g.top_k = a.Int("top_k", 1);
  g.capacity_factor = a.Float("capacity_factor", 1.0);
  g.eval_capacity_factor = a.Float("eval_capacity_factor", 1.0);
  g.min_capacity = a.Int("min_capacity", 4);
  g.drop_tokens = a.Int("drop_tokens", 1) != 0;
  return g;
}

int64_t MoeCapacity(const MoeGating& g, int64_t tokens, bool training) {
  if (!g.drop_tokens) return tokens;
  const double factor = (training ? g.capacity_factor : g.eval_capacity_factor) * g.top_k;
  // In double, as DeepSpeed's ceil over Python's float quotient.
  const double want = static_cast<double>(tokens) / g.num_experts * factor;
  const int64_t c = static_cast<int64_t>(std::ceil(want));
  return std::max<int64_t>(c, g.min_capacity);
}

int64_t MoeBufferCapacity(const MoeGating& g, int64_t tokens) {
  if (!g.drop_tokens) return tokens;
  return std::max(MoeCapacity(g, tokens, true), MoeCapacity(g, tokens, false));
}

}  // namespace ds::kernels
