// "Did you mean" suggestions for misspelled config keys.
#pragma once

#include <string>
#include <vector>

namespace ds::config {

// Levenshtein distance (insert, delete, substitute: cost 1 each), case-insensitive.
int EditDistance(const std::string& a, const std::string& b);

// The candidate closest to `key`; ties go to the earlier candidate. Returns "" when there are
// no candidates or the best one would need as many edits as `key` has characters (a rewrite,
// not a typo).
std::string ClosestKey(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace ds::config
