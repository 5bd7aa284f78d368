#include "kernels/shape_check.h"

#include "runtime/base/status_macros.h"

namespace ds::kernels {

int64_t LeadingRows(const Shape& shape) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

Status CheckArity(const char* op, const std::vector<TensorSpec>& in, size_t min_inputs,
                  size_t max_inputs) {
  if (in.size() < min_inputs || in.size() > max_inputs) {
    std::string want = min_inputs == max_inputs ? std::to_string(min_inputs)
                                                : StrCat(min_inputs, " to ", max_inputs);
    return InvalidArgumentError(StrCat(op, ": expects ", want, " inputs, got ", in.size()));
  }
  return OkStatus();
}

Status CheckRank(const char* op, const char* name, const TensorSpec& t, int rank) {
  if (static_cast<int>(t.shape.size()) != rank)
    return InvalidArgumentError(
        StrCat(op, ": ", name, " must have rank ", rank, ", got ", ShapeToString(t.shape)));
  return OkStatus();
}

Status CheckMinRank(const char* op, const char* name, const TensorSpec& t, int rank) {
  if (static_cast<int>(t.shape.size()) < rank)
    return InvalidArgumentError(
        StrCat(op, ": ", name, " must have rank >= ", rank, ", got ", ShapeToString(t.shape)));
  return OkStatus();
}

Status CheckFloat(const char* op, const char* name, const TensorSpec& t) {
  if (!IsFloat(t.dtype))
    return InvalidArgumentError(
        StrCat(op, ": ", name, " must be a float tensor, got ", DTypeName(t.dtype)));
  return OkStatus();
}

Status CheckInt32(const char* op, const char* name, const TensorSpec& t) {
  if (t.dtype != DType::kI32)
    return InvalidArgumentError(StrCat(op, ": ", name, " must be i32, got ", DTypeName(t.dtype)));
  return OkStatus();
}

Status CheckSameShape(const char* op, const char* name, const TensorSpec& t, const char* ref_name,
                      const TensorSpec& ref) {
  if (t.shape != ref.shape)
    return InvalidArgumentError(StrCat(op, ": ", name, " has shape ", ShapeToString(t.shape),
                                       " but ", ref_name, " has ", ShapeToString(ref.shape)));
  return OkStatus();
}

Status InferElementwise(const char* op, const std::vector<TensorSpec>& in,
                        std::vector<TensorSpec>* out) {
  if (in.empty()) return InvalidArgumentError(StrCat(op, ": expects inputs, got none"));
  static const char* kNames[] = {"a", "b", "c", "d"};
  const bool unary = in.size() == 1;
  for (size_t i = 0; i < in.size(); ++i) {
    const char* name = unary ? "x" : kNames[i % 4];
    DS_RETURN_IF_ERROR(CheckFloat(op, name, in[i]));
    if (i > 0) DS_RETURN_IF_ERROR(CheckSameShape(op, name, in[i], kNames[0], in[0]));
  }
  *out = {in[0]};
  return OkStatus();
}

Status InferHeadLayout(const char* op, const Attrs& attrs, const TensorSpec& qkv,
                       HeadLayout* layout) {
  DS_RETURN_IF_ERROR(CheckRank(op, "qkv", qkv, 3));
  DS_RETURN_IF_ERROR(CheckFloat(op, "qkv", qkv));
  const int64_t h = attrs.Int("n_head", 0);
  const int64_t hkv = attrs.Int("n_kv_head", h);
  if (h <= 0) return InvalidArgumentError(StrCat(op, ": attr n_head must be > 0, got ", h));
  if (hkv <= 0 || h % hkv != 0)
    return InvalidArgumentError(
        StrCat(op, ": n_head (", h, ") must be a positive multiple of n_kv_head (", hkv, ")"));
  const int64_t c = qkv.shape[2];
  const int64_t heads = h + 2 * hkv;
  if (c % heads != 0 || c == 0)
    return InvalidArgumentError(StrCat(op, ": qkv has ", c, " features, not a multiple of (",
                                       "n_head + 2 * n_kv_head) = ", heads));
  layout->batch = qkv.shape[0];
  layout->seq = qkv.shape[1];
  layout->n_head = h;
  layout->n_kv_head = hkv;
  layout->head_dim = c / heads;
  return OkStatus();
}

}  // namespace ds::kernels
