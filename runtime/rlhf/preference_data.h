// DeepSpeed-Chat's data for the three RLHF steps: JSONL files of {"prompt", "chosen",
// "rejected"} rows (DeepSpeed-Chat's get_prompt / get_chosen / get_rejected; "response" stands
// in for a missing "chosen", as in Dahoas/rm-static's rows; other keys are ignored), several
// datasets blended, and `data_split` with its real meaning: the weights normalised ("2,4,4" gives
// each dataset's rows 20% / 40% / 40% to steps 1, 2 and 3), the parts disjoint and the same for the
// same seed on every machine.
//
//   DS_ASSIGN_OR_RETURN(PreferenceDataset d, ReadPreferenceJsonl("pairs.jsonl"));
//   DS_ASSIGN_OR_RETURN(std::vector<double> w, ParseDataSplit("2,4,4"));
//   std::vector<PreferenceExample> sft = BlendPart({&d}, w, /*part=*/0, /*seed=*/1234);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::rlhf {

struct PreferenceExample {
  std::string prompt, chosen, rejected;  // rejected may be empty (SFT and PPO need none)
  bool has_rejected = false;
};

struct PreferenceDataset {
  std::string path;
  std::vector<PreferenceExample> rows;
};

// One row per non-empty line. InvalidArgument naming the file and line for a line that is not a
// JSON object, a missing or non-string "prompt" or "chosen", a non-string "rejected"; NotFound
// for a missing file; InvalidArgument for a file without rows.
StatusOr<PreferenceDataset> ReadPreferenceJsonl(const std::string& path);

// "2,4,4" -> {0.2, 0.4, 0.4}: three non-negative numbers (steps 1, 2 and 3), not all zero.
// InvalidArgument quoting the text otherwise.
StatusOr<std::vector<double>> ParseDataSplit(const std::string& text);

// The rows of part `part` of a dataset of `rows` rows: a permutation seeded by `seed` cut at
// the rounded cumulative weights, so the parts are disjoint, cover every row and each holds
// its share (within one row). Sorted by the permutation's order.
std::vector<int64_t> SplitRows(int64_t rows, const std::vector<double>& weights, int part,
                               uint64_t seed);

// Each dataset's part `part` (its own permutation, seeded by `seed` and its place in the list),
// concatenated, then shuffled with `seed` (DeepSpeed-Chat blends by concatenation, so each
// dataset contributes in proportion to its size).
std::vector<PreferenceExample> BlendPart(const std::vector<const PreferenceDataset*>& datasets,
                                         const std::vector<double>& weights, int part,
                                         uint64_t seed);

}  // namespace ds::rlhf
