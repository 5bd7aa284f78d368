#include "runtime/ckpt/hf_params.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"

namespace ds::ckpt {
namespace {

using Kind = hf::HfSource::Kind;

// Rows and columns of a shape read as a matrix: [n] is n rows of 1.
int64_t Rows(const Shape& s) { return s.empty() ? 1 : s[0]; }
int64_t Cols(const Shape& s) { return s.size() < 2 ? 1 : NumElements(s) / s[0]; }

// n elements of `t` from element `at`, as fp32 (bulk conversions), read ahead in pieces of
// 8 MiB so a cold file streams from the disk while the previous piece converts.
void ToF32(const Tensor& t, int64_t at, int64_t n, float* dst) {
  const int64_t size = static_cast<int64_t>(DTypeSize(t.dtype()));
  const int64_t piece = (int64_t{8} << 20) / size;
  if (n > piece) {
    for (int64_t i = 0; i < n; i += piece) {
      const int64_t m = std::min(piece, n - i);
      if (i + m < n)
        ReadAhead(static_cast<const char*>(t.data()) + (at + i + m) * size,
                  std::min(piece, n - i - m) * size);
      ToF32(t, at + i, m, dst + i);
    }
    return;
  }
  switch (t.dtype()) {
    case DType::kBF16:
      ConvertBf16ToF32(static_cast<const uint16_t*>(t.data()) + at, dst, n);
      break;
    case DType::kF16:
      ConvertF16ToF32(static_cast<const uint16_t*>(t.data()) + at, dst, n);
      break;
    default:
      std::memcpy(dst, static_cast<const float*>(t.data()) + at, n * sizeof(float));
  }
}

// Row `hf_row`'s columns [c0, c1) of `t`, as fp32.
void CopyRow(const Tensor& t, int64_t hf_row, int64_t c0, int64_t c1, float* dst) {
  ToF32(t, hf_row * Cols(t.shape()) + c0, c1 - c0, dst);
}

// Hands back the mapped pages of elements [begin, end) of `t` once read (file_util.h).
void Drop(const Tensor& t, int64_t begin, int64_t end) {
  const size_t size = DTypeSize(t.dtype());
  DropResidentPages(static_cast<const char*>(t.data()) + begin * size, (end - begin) * size);
}

}  // namespace

const Tensor* HfParamReader::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return &it->second->tensor;
  for (const std::string& prefix : map_.optional_prefixes)
    if (name.rfind(prefix, 0) == 0) {
      it = by_name_.find(name.substr(prefix.size()));
      if (it != by_name_.end()) return &it->second->tensor;
    }
  return nullptr;
}

Status HfParamReader::CheckParam(const hf::HfParam& p) const {
  const std::string& file = weights_->label();
  const hf::HfSource& s = p.source;
  int64_t rows = 0;
  for (const std::string& name : s.names) {
    const Tensor* t = Find(name);
    if (!t)
      return InvalidArgumentError(file + ": missing tensor " + name + " (for " + p.ours + ")");
    if (!IsFloat(t->dtype()))
      return InvalidArgumentError(file + ": tensor " + name + " is " + DTypeName(t->dtype()) +
                                  ", not a float type");
    Shape want = p.shape;
    if (s.kind == Kind::kTranspose && want.size() == 2) want = {want[1], want[0]};
    const bool cols_only = s.kind == Kind::kConcatRows || s.kind == Kind::kRowSlice;
    const bool ok = cols_only
                        ? Cols(t->shape()) == Cols(p.shape) && t->shape().size() == p.shape.size()
                        : t->shape() == want;
    if (!ok || (s.kind == Kind::kRowSlice && Rows(t->shape()) < s.end))
      return InvalidArgumentError(file + ": tensor " + name + " has shape " +
                                  ShapeToString(t->shape()) + ", which does not make " + p.ours +
                                  " " + ShapeToString(p.shape));
    rows += Rows(t->shape());
  }
  for (size_t k = 0; s.kind == Kind::kConcatRows && k < s.rows.size(); ++k)
    if (Rows(Find(s.names[k])->shape()) != s.rows[k])
      return InvalidArgumentError(file + ": tensor " + s.names[k] + " has " +
                                  std::to_string(Rows(Find(s.names[k])->shape())) +
                                  " rows; the model's heads need " + std::to_string(s.rows[k]));
  if (s.kind == Kind::kConcatRows && rows != Rows(p.shape))
    return InvalidArgumentError(file + ": the " + std::to_string(rows) + " rows of " + s.names[0] +
                                " and its parts do not make " + p.ours + " " +
                                ShapeToString(p.shape));
  if (s.kind == Kind::kHeadInterleaved && (s.heads <= 0 || Rows(p.shape) % (3 * s.heads)))
    return InvalidArgumentError(file + ": " + s.names[0] + " does not split into 3 x " +
                                std::to_string(s.heads) + " heads");
  return OkStatus();
}

StatusOr<HfParamReader> HfParamReader::Create(const HfWeights* weights, hf::HfTensorMap map) {
  HfParamReader r(weights, std::move(map));
  for (const NamedTensor& t : weights->tensors()) r.by_name_[t.name] = &t;
  std::set<const Tensor*> used;
  for (const hf::HfParam& p : r.map_.params) {
    DS_RETURN_IF_ERROR(r.CheckParam(p));
    for (const std::string& n : p.source.names) used.insert(r.Find(n));
  }
  for (const std::string& n : r.map_.ignored)
    if (const Tensor* t = r.Find(n)) used.insert(t);
  for (const NamedTensor& t : weights->tensors())
    if (!used.count(&t.tensor))
      return InvalidArgumentError(weights->label() + ": unknown tensor " + t.name +
                                  " (no parameter of the model reads it)");
  return r;
}

Status HfParamReader::Read(size_t index, int64_t begin, int64_t end, float* dst) const {
  if (index >= map_.params.size()) return InvalidArgumentError("HfParamReader: no parameter");
  const hf::HfParam& p = map_.params[index];
  const hf::HfSource& s = p.source;
  if (s.kind == Kind::kInitialized)
    return FailedPreconditionError(p.ours + " is not in " + weights_->label());
  const int64_t cols = Cols(p.shape), numel = NumElements(p.shape);
  if (begin < 0 || end > numel || begin > end)
    return InvalidArgumentError("HfParamReader: elements [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") of " + p.ours);
  if (s.kind == Kind::kTranspose) {  // [in, out] -> [out, in], element by element
    const Tensor& t = *Find(s.names[0]);
    const int64_t out = p.shape[0];
    for (int64_t e = begin; e < end; ++e)
      dst[e - begin] = LoadFloat(t.data(), t.dtype(), (e % cols) * out + e / cols);
    Drop(t, 0, t.numel());
    return OkStatus();
  }
  const Tensor* first = Find(s.names[0]);
  if (s.kind == Kind::kCopy || s.kind == Kind::kRowSlice) {  // one contiguous span of the file
    const int64_t at = (s.kind == Kind::kRowSlice ? s.begin * cols : 0) + begin;
    ToF32(*first, at, end - begin, dst);
    Drop(*first, at, at + end - begin);
    return OkStatus();
  }
  for (int64_t row = begin / cols; row * cols < end; ++row) {
    const int64_t c0 = std::max(begin - row * cols, int64_t{0});
    const int64_t c1 = std::min(end - row * cols, cols);
    const Tensor* t = first;
    int64_t hf_row = row;
    if (s.kind == Kind::kConcatRows) {
      for (size_t k = 0; hf_row >= Rows(t->shape()); t = Find(s.names[++k]))
        hf_row -= Rows(t->shape());
    } else if (s.kind == Kind::kRowSlice) {
      hf_row = s.begin + row;
    } else if (s.kind == Kind::kHeadInterleaved) {  // ours [3, H, D], file [H, 3, D]
      const int64_t d = Rows(p.shape) / (3 * s.heads), part = row / (s.heads * d);
      const int64_t head = row % (s.heads * d) / d;
      hf_row = (head * 3 + part) * d + row % d;
    }
    CopyRow(*t, hf_row, c0, c1, dst + row * cols + c0 - begin);
    Drop(*t, hf_row * Cols(t->shape()) + c0, hf_row * Cols(t->shape()) + c1);
  }
  return OkStatus();
}

void HfParamReader::Spans(size_t index, int64_t begin, int64_t end,
                          std::vector<std::pair<const void*, size_t>>* out) const {
  if (index >= map_.params.size() || begin >= end) return;
  const hf::HfParam& p = map_.params[index];
  const hf::HfSource& s = p.source;
  if (s.kind == Kind::kInitialized) return;
  auto span = [out](const Tensor& t, int64_t first, int64_t last) {  // elements [first, last)
    const size_t size = DTypeSize(t.dtype());
    out->push_back({static_cast<const char*>(t.data()) + first * size, (last - first) * size});
  };
  const int64_t cols = Cols(p.shape);
  if (s.kind == Kind::kCopy || s.kind == Kind::kRowSlice) {
    const int64_t at = (s.kind == Kind::kRowSlice ? s.begin * cols : 0) + begin;
    span(*Find(s.names[0]), at, at + end - begin);
    return;
  }
  if (s.kind == Kind::kConcatRows) {  // each tensor's rows that [begin, end) covers
    int64_t row0 = 0;
    for (const std::string& name : s.names) {
      const Tensor& t = *Find(name);
      const int64_t rows = Rows(t.shape()), r0 = std::max(begin / cols, row0),
                    r1 = std::min((end + cols - 1) / cols, row0 + rows);
      if (r0 < r1) span(t, (r0 - row0) * Cols(t.shape()), (r1 - row0) * Cols(t.shape()));
      row0 += rows;
    }
    return;
  }
  for (const std::string& name : s.names) {  // transposed, head-interleaved: whole tensors
    const Tensor& t = *Find(name);
    span(t, 0, t.numel());
  }
}

Status CheckHfWeights(const std::string& dir, const ModelSpec& spec, const Graph& graph) {
  DS_ASSIGN_OR_RETURN(hf::HfTensorMap map, hf::MapHfTensors(spec, graph));
  DS_ASSIGN_OR_RETURN(HfWeights weights, HfWeights::Open(dir));
  return HfParamReader::Create(&weights, std::move(map)).status();
}

}  // namespace ds::ckpt
