// Megatron's GPTDataset sample order (megatron-core's gpt_dataset.py and helpers.cpp), ported
// so a job reads the samples megatron-core's GPTDataset would give for the same indexed
// dataset, split, seed, sequence length and sample count:
//   - the document index: the split's sequence ids repeated for every epoch needed, shuffled
//     (a separate final epoch shuffled on its own when it would be less than 80% full);
//   - the sample index: where each sample of seq_len + 1 tokens starts (position in the
//     document index, token offset), consecutive samples sharing one token;
//   - the shuffle index: a permutation of the samples (the separate final epoch's apart);
// all drawn from numpy's legacy RandomState(seed) (LegacyRandomState), in that order.
//
//   DS_ASSIGN_OR_RETURN(GptIndices ix, BuildGptIndices(dataset, {0, split_end}, 1500, 16, 1234));
//   DS_RETURN_IF_ERROR(GptSample(dataset, ix, k, &tokens));   // seq_len + 1 ids
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/indexed_dataset.h"

namespace ds::data {

// numpy.random.RandomState(seed) as its legacy API draws: MT19937 seeded by init_genrand,
// Shuffle as RandomState.shuffle (Fisher-Yates from the end, each index by masked rejection).
class LegacyRandomState {
 public:
  explicit LegacyRandomState(uint32_t seed);
  uint32_t Next();
  // A value in [0, max] as numpy's random_interval draws it.
  uint64_t Interval(uint64_t max);
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[Interval(i - 1)]);
  }

 private:
  uint32_t mt_[624];
  int index_ = 624;
};

struct GptIndices {
  int64_t seq_len = 0, epochs = 0;
  bool separate_final_epoch = false;
  std::vector<int32_t> document_index;
  std::vector<int64_t> sample_index;  // (document position, offset) pairs, samples + 1 of them
  std::vector<int64_t> shuffle_index;
  int64_t samples() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// The indices of the split holding sequences [split.first, split.second) for `num_samples`
// samples of seq_len (+1 extra token) tokens; num_samples < 0: one epoch's worth (what
// megatron-core builds when no sample count is given, as for an unweighted blend's datasets). An
// empty split asked for samples is an error (megatron-core loops forever there).
StatusOr<GptIndices> BuildGptIndices(const IndexedDataset& dataset,
                                     std::pair<int64_t, int64_t> split, int64_t num_samples,
                                     int64_t seq_len, uint32_t seed);

// Sample k (after the shuffle): seq_len + 1 token ids gathered across documents.
Status GptSample(const IndexedDataset& dataset, const GptIndices& ix, int64_t k,
                 std::vector<int64_t>* tokens);

}  // namespace ds::data
