#include "runtime/config/key_suggest.h"

#include <algorithm>
#include <cctype>

namespace ds::config {

int EditDistance(const std::string& a, const std::string& b) {
  // One row of the dynamic-programming table at a time.
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      const int substitute = diagonal + (same ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

std::string ClosestKey(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = static_cast<int>(key.size());
  for (const std::string& candidate : candidates) {
    const int d = EditDistance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace ds::config
