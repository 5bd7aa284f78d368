#include "runtime/data/megatron_samples.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/base/status_macros.h"

namespace ds::data {

StatusOr<MegatronSamples> MegatronSamples::Open(const Options& o) {
  DS_ASSIGN_OR_RETURN(Blend blend, ParseBlend(o.data_path));
  if (o.split_index < 0 || o.split_index > 2)
    return InvalidArgumentError("split index " + std::to_string(o.split_index) + " (0-2)");
  MegatronSamples s;
  s.blended_ = blend.prefixes.size() > 1;
  const bool weighted = !blend.weights.empty();
  // A weighted blend builds each dataset for its share plus megatron-core's 0.5% surplus; an
  // unweighted one builds each for one epoch (-1) and weighs them by their sizes.
  const std::vector<int64_t> per_dataset = !s.blended_ ? std::vector<int64_t>{o.num_samples}
                                           : weighted
                                               ? BlendDatasetSamples(blend.weights, o.num_samples)
                                               : std::vector<int64_t>(blend.prefixes.size(), -1);
  for (size_t i = 0; i < blend.prefixes.size(); ++i)
    DS_RETURN_IF_ERROR(s.AddDataset(blend.prefixes[i], per_dataset[i], o));
  if (!s.blended_) return s;
  int64_t size = 0;
  if (weighted) {  // the sum of the per-dataset targets, ceil(num_samples * w_i)
    for (double w : blend.weights)
      size += static_cast<int64_t>(std::ceil(static_cast<double>(o.num_samples) * w));
  } else {
    int64_t total = 0;
    for (const GptIndices& ix : s.indices_) total += ix.samples();
    for (const GptIndices& ix : s.indices_)
      blend.weights.push_back(static_cast<double>(ix.samples()) / static_cast<double>(total));
    size = std::min(o.num_samples, total);
  }
  s.blend_ = BuildBlendIndices(blend.weights, size);
  s.weights_ = blend.weights;
  return s;
}

// Opens `prefix` and builds its GPTDataset over the option's split for `samples` samples.
Status MegatronSamples::AddDataset(const std::string& prefix, int64_t samples, const Options& o) {
  DS_ASSIGN_OR_RETURN(IndexedDataset d, IndexedDataset::Open(prefix));
  DS_ASSIGN_OR_RETURN(std::vector<SplitRange> ranges, SplitRanges(o.split, d.sequences()));
  const SplitRange& r = ranges[o.split_index];
  if (!r.present)
    return InvalidArgumentError(prefix + ": the split \"" + o.split + "\" gives split " +
                                std::to_string(o.split_index) + " no share");
  DS_ASSIGN_OR_RETURN(GptIndices ix,
                      BuildGptIndices(d, {r.begin, r.end}, samples, o.seq_len, o.seed));
  datasets_.push_back(std::move(d));
  indices_.push_back(std::move(ix));
  return OkStatus();
}

std::vector<std::string> MegatronSamples::Describe() const {
  auto grouped = [](int64_t v) {  // 1234567 -> "1,234,567"
    std::string s = std::to_string(v);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
    return s;
  };
  std::vector<std::string> lines;
  for (size_t i = 0; i < datasets_.size(); ++i) {
    const GptIndices& ix = indices_[i];
    int64_t tokens = 0, documents = 0;
    if (ix.epochs > 0) {  // one epoch's documents: the document index holds each epoch's
      documents = static_cast<int64_t>(ix.document_index.size()) / ix.epochs;
      for (int64_t d = 0; d < documents; ++d)
        tokens += datasets_[i].sequence_length(ix.document_index[d]);
    }
    char weight[32] = "";
    if (blended_) std::snprintf(weight, sizeof(weight), " (weight %.4f)", weights_[i]);
    lines.push_back(datasets_[i].prefix() + weight + ": " + grouped(documents) + " documents, " +
                    grouped(tokens) + " tokens, " + std::to_string(ix.epochs) + " epoch" +
                    (ix.epochs == 1 ? "" : "s") + ", " + grouped(ix.samples()) + " samples");
  }
  return lines;
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
