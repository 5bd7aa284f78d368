// Which sequences a Megatron job reads: the `--data-path` / `data.path` forms (one prefix;
// weight prefix pairs; several prefixes unweighted), the `--split` string's train / valid /
// test ranges of each dataset's sequences, and BlendedDataset's greedy assignment of blended
// samples to datasets (megatron-core's helpers.cpp build_blending_indices).
//
//   DS_ASSIGN_OR_RETURN(Blend b, ParseBlend({"0.3", "a", "0.7", "b"}));
//   BlendIndices ix = BuildBlendIndices(b.weights, 1000);   // sample s: dataset, its sample
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::data {

struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalized to sum 1; empty when unweighted
};

// "prefix"; "w1 p1 w2 p2 ..." (every odd entry a number: weighted); "p1 p2 ..." (unweighted).
// A weight that is not positive, or a weighted list of odd length, is InvalidArgument.
StatusOr<Blend> ParseBlend(const std::vector<std::string>& entries);

struct BlendIndices {
  std::vector<int16_t> dataset;  // which dataset blended sample s comes from
  std::vector<int64_t> sample;   // and which of that dataset's samples
};

// For s = 0 .. size - 1 the dataset furthest behind its share (weight * max(s, 1) minus what
// it has given; ties to the lowest index), as megatron-core assigns them.
BlendIndices BuildBlendIndices(const std::vector<double>& weights, int64_t size);

// How many samples each dataset of a weighted blend of `size` samples is built for:
// ceil(ceil(size * w_i) * (1 + surplus)), megatron-core's mid-level surplus (0.005).
std::vector<int64_t> BlendDatasetSamples(const std::vector<double>& weights, int64_t size,
                                         double surplus = 0.005);

// "969,30,1" as Megatron reads it: the numbers in it (a [.0-9]+ regex), padded with zeros to
// three, normalized; each split i of S sequences is [round(b0 * S), round(b1 * S)) of the
// running sums b (Python's round: half to even). A zero share gives {0, 0} and `present`
// false. InvalidArgument for more than three numbers or all zeros.
struct SplitRange {
  int64_t begin = 0, end = 0;
  bool present = false;
};
StatusOr<std::vector<SplitRange>> SplitRanges(const std::string& split, int64_t sequences);

}  // namespace ds::data
