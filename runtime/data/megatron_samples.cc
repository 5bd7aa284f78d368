#include "runtime/data/megatron_samples.h"

#include <cmath>

#include "runtime/base/status_macros.h"

namespace ds::data {

StatusOr<MegatronSamples> MegatronSamples::Open(const Options& o) {
  DS_ASSIGN_OR_RETURN(Blend blend, ParseBlend(o.data_path));
  if (blend.prefixes.size() > 1 && blend.weights.empty())
    return UnimplementedError(
        "data.path: several prefixes without weights (Megatron weighs them by their sizes); give "
        "a weight before each prefix");
  if (o.split_index < 0 || o.split_index > 2)
    return InvalidArgumentError("split index " + std::to_string(o.split_index) + " (0-2)");
  MegatronSamples s;
  s.blended_ = !blend.weights.empty() && blend.prefixes.size() > 1;
  // A blend builds each dataset for its share plus megatron-core's 0.5% surplus.
  const std::vector<int64_t> per_dataset = s.blended_
                                               ? BlendDatasetSamples(blend.weights, o.num_samples)
                                               : std::vector<int64_t>{o.num_samples};
  for (size_t i = 0; i < blend.prefixes.size(); ++i) {
    DS_ASSIGN_OR_RETURN(IndexedDataset d, IndexedDataset::Open(blend.prefixes[i]));
    DS_ASSIGN_OR_RETURN(std::vector<SplitRange> ranges, SplitRanges(o.split, d.sequences()));
    const SplitRange& r = ranges[o.split_index];
    if (!r.present)
      return InvalidArgumentError(blend.prefixes[i] + ": the split \"" + o.split +
                                  "\" gives split " + std::to_string(o.split_index) + " no share");
    DS_ASSIGN_OR_RETURN(GptIndices ix,
                        BuildGptIndices(d, {r.begin, r.end}, per_dataset[i], o.seq_len, o.seed));
    s.datasets_.push_back(std::move(d));
    s.indices_.push_back(std::move(ix));
  }
  if (s.blended_) {
    int64_t size = 0;  // the sum of the per-dataset targets, ceil(num_samples * w_i)
    for (double w : blend.weights)
      size += static_cast<int64_t>(std::ceil(static_cast<double>(o.num_samples) * w));
    s.blend_ = BuildBlendIndices(blend.weights, size);
  }
  return s;
}

int64_t MegatronSamples::size() const {
  return blended_ ? static_cast<int64_t>(blend_.dataset.size()) : indices_[0].samples();
}

Status MegatronSamples::Sample(int64_t k, std::vector<int64_t>* tokens) const {
  if (!blended_) return GptSample(datasets_[0], indices_[0], k, tokens);
  if (k < 0 || k >= size())
    return OutOfRangeError("blended sample " + std::to_string(k) + " of " + std::to_string(size()));
  const int i = blend_.dataset[k];
  return GptSample(datasets_[i], indices_[i], blend_.sample[k], tokens);
}

}  // namespace ds::data
