#include "runtime/rlhf/preference_data.h"

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/random.h"

namespace ds::rlhf {
namespace {

std::string Where(const std::string& path, int64_t line) {
  return path + ":" + std::to_string(line) + ": ";
}

// A string member: required (missing -> error) or optional (missing -> false).
StatusOr<bool> StringMember(const Json& row, const char* key, bool required,
                            const std::string& where, std::string* out) {
  const Json* v = row.Find(key);
  if (!v || v->is_null()) {
    if (required) return InvalidArgumentError(where + "no \"" + key + "\" (a string)");
    return false;
  }
  if (!v->is_string()) return InvalidArgumentError(where + "\"" + key + "\" is not a string");
  *out = v->as_string();
  return true;
}

StatusOr<PreferenceExample> ParseRow(const std::string& text, const std::string& where) {
  auto doc = ParseJson(text);
  if (!doc.ok()) return InvalidArgumentError(where + doc.status().message());
  if (!doc->is_object()) return InvalidArgumentError(where + "not a JSON object");
  PreferenceExample e;
  DS_RETURN_IF_ERROR(StringMember(*doc, "prompt", true, where, &e.prompt).status());
  // Dahoas/rm-static's rows carry the answer as "response" too: it stands in for "chosen".
  DS_ASSIGN_OR_RETURN(bool chosen, StringMember(*doc, "chosen", false, where, &e.chosen));
  if (!chosen) {
    DS_ASSIGN_OR_RETURN(chosen, StringMember(*doc, "response", false, where, &e.chosen));
    if (!chosen) return InvalidArgumentError(where + "no \"chosen\" (or \"response\"), a string");
  }
  DS_ASSIGN_OR_RETURN(e.has_rejected, StringMember(*doc, "rejected", false, where, &e.rejected));
  return e;
}

}  // namespace

StatusOr<PreferenceDataset> ReadPreferenceJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open the dataset");
  PreferenceDataset d;
  d.path = path;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    DS_ASSIGN_OR_RETURN(PreferenceExample e, ParseRow(line, Where(path, n)));
    d.rows.push_back(std::move(e));
  }
  if (d.rows.empty()) return InvalidArgumentError(path + ": no rows");
  return d;
}

StatusOr<std::vector<double>> ParseDataSplit(const std::string& text) {
  std::vector<double> w;
  std::stringstream ss(text);
  std::string item;
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("data_split \"" + text + "\": " + why);
  };
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
      return bad("\"" + item + "\" is not a non-negative number");
    w.push_back(v);
  }
  if (w.size() != 3) return bad("needs three weights, for steps 1, 2 and 3");
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (total <= 0) return bad("the weights add up to 0");
  for (double& v : w) v /= total;
  return w;
}

std::vector<int64_t> SplitRows(int64_t rows, const std::vector<double>& weights, int part,
                               uint64_t seed) {
  std::vector<int64_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(data::MixSeed(seed));
  data::DeterministicShuffle(rng, &order);
  double before = 0;
  for (int p = 0; p < part; ++p) before += weights[p];
  const double through = before + weights[part];
  const auto cut = [rows](double w) {
    return std::min<int64_t>(rows, static_cast<int64_t>(std::llround(w * rows)));
  };
  const int64_t lo = cut(before),
                hi = part + 1 == static_cast<int>(weights.size()) ? rows : cut(through);
  return std::vector<int64_t>(order.begin() + lo, order.begin() + std::max(lo, hi));
}

std::vector<PreferenceExample> BlendPart(const std::vector<const PreferenceDataset*>& datasets,
                                         const std::vector<double>& weights, int part,
                                         uint64_t seed) {
  std::vector<PreferenceExample> out;
  for (size_t d = 0; d < datasets.size(); ++d) {
    const PreferenceDataset& set = *datasets[d];
    const int64_t n = static_cast<int64_t>(set.rows.size());
    for (int64_t r : SplitRows(n, weights, part, seed + d)) out.push_back(set.rows[r]);
  }
  std::mt19937_64 rng(data::MixSeed(seed ^ 0x5eedb1e4dull));
  data::DeterministicShuffle(rng, &out);
  return out;
}

}  // namespace ds::rlhf
