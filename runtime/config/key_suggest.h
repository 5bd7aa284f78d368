// "Did you mean" suggestions for misspelled config keys.
#pragma once

#include <string>
#include <vector>

namespace ds::config {

// Levenshtein distance (insert, delete, substitute: cost 1 each), case-insensitive.
int EditDistance(const std::string& a, const std::string& b);

// The candidate `key` most likely meant: a known synonym from other trainers (learning_rate ->
// lr), else the shortest candidate `key` begins or is part of (train_micro_batch_size ->
// train_micro_batch_size_per_gpu), else one with the same words in another order, each word
// allowed one typo (comm_overlap -> overlap_comm), else the one fewest edits away (ties: the
// earlier), if that is at most a third of the key's length (more is a different word, not a
// typo). "" if none.
std::string ClosestKey(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace ds::config
