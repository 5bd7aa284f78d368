#include "runtime/ckpt/hf_export.h"

#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_shards.h"

namespace ds::ckpt {
namespace {

using Kind = hf::HfSource::Kind;

int64_t Cols(const Shape& s) { return s.size() < 2 ? 1 : NumElements(s) / s[0]; }

// The parameters one output reads, keeping the last one (q, k and v read the same one).
class ParamCache {
 public:
  ParamCache(const hf::HfTensorMap& map, const ParamRead& read) : map_(map), read_(read) {}
  StatusOr<const std::vector<float>*> Get(int param) {
    if (param != cached_) {
      const hf::HfParam& p = map_.params[param];
      values_.resize(NumElements(p.shape));
      cached_ = -1;
      DS_RETURN_IF_ERROR(read_(p.ours, p.shape, values_.data()));
      cached_ = param;
    }
    return &values_;
  }

 private:
  const hf::HfTensorMap& map_;
  const ParamRead& read_;
  int cached_ = -1;
  std::vector<float> values_;
};

// Output `o` in the file's layout as fp32 into out (its numel).
Status Assemble(const hf::HfOutput& o, const hf::HfTensorMap& map, ParamCache& cache, float* out) {
  if (o.kind == Kind::kTranspose || o.kind == Kind::kHeadInterleaved) {
    DS_ASSIGN_OR_RETURN(const std::vector<float>* v, cache.Get(o.pieces[0].param));
    const Shape& ours = map.params[o.pieces[0].param].shape;
    const int64_t rows = ours.empty() ? 1 : ours[0], cols = Cols(ours);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t to = r;  // the file's row of our row r (interleaved), or column (transposed)
      if (o.kind == Kind::kHeadInterleaved) {
        const int64_t d = rows / (3 * o.heads), part = r / (o.heads * d),
                      head = r % (o.heads * d) / d;
        to = (head * 3 + part) * d + r % d;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const float x = (*v)[r * cols + c];
        if (o.kind == Kind::kTranspose)
          out[c * rows + r] = x;
        else
          out[to * cols + c] = x;
      }
    }
    return OkStatus();
  }
  int64_t at = 0;
  for (const hf::HfOutput::Piece& piece : o.pieces) {
    DS_ASSIGN_OR_RETURN(const std::vector<float>* v, cache.Get(piece.param));
    const int64_t cols = Cols(map.params[piece.param].shape);
    for (int64_t i = piece.begin * cols; i < piece.end * cols; ++i) out[at++] = (*v)[i];
  }
  return OkStatus();
}

}  // namespace

StatusOr<int> ExportHfFolder(const std::string& dir, const hf::HfTensorMap& map, DType dtype,
                             int64_t max_shard_bytes, const ParamRead& read) {
  if (!IsFloat(dtype)) return InvalidArgumentError("export: the dtype must be f32, bf16 or f16");
  DS_ASSIGN_OR_RETURN(std::vector<hf::HfOutput> outputs, hf::HfOutputs(map));
  std::vector<std::pair<std::string, TensorSpec>> specs;
  for (const hf::HfOutput& o : outputs) specs.push_back({o.name, {o.shape, dtype}});
  ParamCache cache(map, read);
  std::vector<float> values;
  return WriteHfFolderStreaming(
      dir, specs, max_shard_bytes, {{"format", "pt"}}, [&](size_t i, void* dst) -> Status {
        values.resize(NumElements(outputs[i].shape));
        DS_RETURN_IF_ERROR(Assemble(outputs[i], map, cache, values.data()));
        for (size_t k = 0; k < values.size(); ++k) StoreFloat(dst, dtype, k, values[k]);
        return OkStatus();
      });
}

}  // namespace ds::ckpt
