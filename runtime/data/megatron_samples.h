// The samples a Megatron job trains on, in order: one prefix's GPTDataset, or a blend's
// BlendedDataset over each prefix's GPTDataset (weighted, or weighed by the datasets' one-epoch
// sizes when no weights are given), for a split of the data
// (gpt_dataset.h, blend.h). What `ds-data samples` prints.
//
//   MegatronSamples::Options o;  o.data_path = {"0.3", "a", "0.7", "b"};  o.num_samples = 100;
//   DS_ASSIGN_OR_RETURN(MegatronSamples s, MegatronSamples::Open(o));
//   DS_RETURN_IF_ERROR(s.Sample(0, &tokens));     // seq_len + 1 token ids
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/format/blend.h"
#include "runtime/data/gpt_dataset.h"
#include "runtime/data/indexed_dataset.h"

namespace ds::data {

class MegatronSamples {
 public:
  struct Options {
    std::vector<std::string> data_path;  // Megatron's --data-path entries
    std::string split = "969, 30, 1";
    int split_index = 0;  // 0 train, 1 validation, 2 test
    int64_t num_samples = 0;
    int64_t seq_len = 0;
    uint32_t seed = 1234;
  };
  static StatusOr<MegatronSamples> Open(const Options& options);

  int64_t size() const;
  Status Sample(int64_t k, std::vector<int64_t>* tokens) const;
  // One line per dataset, as Megatron logs its builds: the prefix, its weight in a blend, the
  // split's documents and tokens, the epochs and samples built, e.g.
  //   "a_text_document (weight 0.3000): 388 documents, 12,345 tokens, 2 epochs, 61 samples"
  std::vector<std::string> Describe() const;

 private:
  MegatronSamples() = default;
  Status AddDataset(const std::string& prefix, int64_t samples, const Options& o);
  std::vector<IndexedDataset> datasets_;
  std::vector<GptIndices> indices_;
  BlendIndices blend_;
  bool blended_ = false;
  std::vector<double> weights_;  // a blend's normalized weights (sizes' shares when unweighted)
};

}  // namespace ds::data
