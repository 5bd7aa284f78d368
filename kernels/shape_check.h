// Shape checks and inference helpers shared by every backend's kernels (CPU and CUDA), so that
// their messages read alike: "<op>: <what>", e.g. "linear: x has 256 features but W expects 128".
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/op.h"
#include "runtime/base/status.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Product of all but the last dimension (rank >= 1), i.e. the number of rows.
int64_t LeadingRows(const Shape& shape);

Status CheckArity(const char* op, const std::vector<TensorSpec>& in, size_t min_inputs,
                  size_t max_inputs);
Status CheckRank(const char* op, const char* name, const TensorSpec& t, int rank);
Status CheckMinRank(const char* op, const char* name, const TensorSpec& t, int rank);
Status CheckFloat(const char* op, const char* name, const TensorSpec& t);
Status CheckInt32(const char* op, const char* name, const TensorSpec& t);
// Same shape as `ref` (elementwise binaries, gradients).
Status CheckSameShape(const char* op, const char* name, const TensorSpec& t, const char* ref_name,
                      const TensorSpec& ref);

// Elementwise ops: every input float with in[0]'s shape; one output like in[0].
Status InferElementwise(const char* op, const std::vector<TensorSpec>& in,
                        std::vector<TensorSpec>* out);

// Head layout of a packed qkv tensor [B, T, (H + 2 * Hkv) * D] (rope, attention).
struct HeadLayout {
  int64_t batch = 0, seq = 0;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t row() const { return (n_head + 2 * n_kv_head) * head_dim; }  // floats per token
  int64_t q_offset(int64_t h) const { return h * head_dim; }
  int64_t k_offset(int64_t g) const { return (n_head + g) * head_dim; }
  int64_t v_offset(int64_t g) const { return (n_head + n_kv_head + g) * head_dim; }
};
// Validates attrs n_head (required), n_kv_head (default n_head) against qkv's shape.
Status InferHeadLayout(const char* op, const Attrs& attrs, const TensorSpec& qkv,
                       HeadLayout* layout);

}  // namespace ds::kernels
