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

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Names users bring from other trainers (PyTorch, the HuggingFace Trainer) for DeepSpeed's keys.
const char* Synonym(const std::string& key) {
  static const std::pair<const char*, const char*> kSynonyms[] = {
      {"learning_rate", "lr"},
      {"epsilon", "eps"},
      {"adam_epsilon", "eps"},
      {"beta1", "betas"},
      {"beta2", "betas"},
      {"adam_beta1", "betas"},
      {"adam_beta2", "betas"},
      {"batch_size", "train_batch_size"},
      {"micro_batch_size", "train_micro_batch_size_per_gpu"},
      {"per_device_train_batch_size", "train_micro_batch_size_per_gpu"},
      {"grad_accumulation_steps", "gradient_accumulation_steps"},
      {"max_norm", "gradient_clipping"},
      {"clip_grad_norm", "gradient_clipping"},
      {"zero", "zero_optimization"},
      {"lr_scheduler", "scheduler"},
      {"num_warmup_steps", "warmup_num_steps"},
      {"warmup_steps", "warmup_num_steps"}};
  for (const auto& [from, to] : kSynonyms)
    if (key == from) return to;
  return nullptr;
}

// The words of a key (split at '_', '-' and '.'), lower case.
std::vector<std::string> Words(const std::string& key) {
  std::vector<std::string> words(1);
  for (char c : Lower(key)) {
    if (c == '_' || c == '-' || c == '.') {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back() += c;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

// How far the words of `key` are from those of `candidate` as sets: each word of the key paired
// with a distinct word of the candidate, in any order, a word of 4 or more letters allowed one
// typo. -1 when the counts differ or a word finds no partner (comm_overlap -> overlap_comm: 0).
int WordSetDistance(const std::vector<std::string>& key, std::vector<std::string> candidate) {
  if (key.size() < 2 || key.size() != candidate.size()) return -1;
  int total = 0;
  for (const std::string& w : key) {
    int best = -1;
    size_t at = 0;
    for (size_t i = 0; i < candidate.size(); ++i) {
      const int d = EditDistance(w, candidate[i]);
      if (d <= (w.size() >= 4 ? 1 : 0) && (best < 0 || d < best)) best = d, at = i;
    }
    if (best < 0) return -1;
    total += best;
    candidate.erase(candidate.begin() + static_cast<std::ptrdiff_t>(at));
  }
  return total;
}

// The candidate with the key's words in another order (or one typo per word), fewest typos first.
std::string SameWords(const std::string& key, const std::vector<std::string>& candidates) {
  const std::vector<std::string> words = Words(key);
  std::string best;
  int best_distance = -1;
  for (const std::string& c : candidates) {
    const int d = WordSetDistance(words, Words(c));
    if (d >= 0 && (best_distance < 0 || d < best_distance)) best_distance = d, best = c;
  }
  return best;
}

}  // namespace

std::string ClosestKey(const std::string& key, const std::vector<std::string>& candidates) {
  const std::string k = Lower(key);
  if (const char* to = Synonym(k))
    for (const std::string& c : candidates)
      if (c == to) return c;
  // A key cut short or embedded in a longer one (train_micro_batch_size ->
  // train_micro_batch_size_per_gpu): the shortest candidate that starts with it, else holds it.
  std::string prefix, inside;
  for (const std::string& c : candidates) {
    const std::string lc = Lower(c);
    if (k.size() < 3 || lc.size() <= k.size()) continue;
    if (lc.compare(0, k.size(), k) == 0 && (prefix.empty() || c.size() < prefix.size())) prefix = c;
    if (lc.find(k) != std::string::npos && (inside.empty() || c.size() < inside.size())) inside = c;
  }
  if (!prefix.empty()) return prefix;
  if (!inside.empty()) return inside;
  // The same words in another order (comm_overlap -> overlap_comm), each allowed a typo.
  if (std::string same = SameWords(key, candidates); !same.empty()) return same;
  // Else a typo: the fewest edits, at most a third of the key (more is a different word).
  std::string best;
  int best_distance = std::max(2, static_cast<int>(key.size()) / 3) + 1;
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
