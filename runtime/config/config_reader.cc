#include "runtime/config/config_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

#include "runtime/config/key_suggest.h"

namespace ds::config::internal {
namespace {

// yaml-cpp marks quoted scalars with the non-specific tag "!"; plain ones with "?".
bool IsQuoted(const YAML::Node& n) { return n.Tag() == "!"; }

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return IsQuoted(n) ? "string \"" + n.Scalar() + "\"" : "\"" + n.Scalar() + "\"";
    default:
      return "nothing";
  }
}

}  // namespace

void ParseContext::Fail(const std::string& message) {
  if (error.ok()) error = InvalidArgumentError(source + ": " + message);
}

void ParseContext::Warn(const std::string& message) { warnings.push_back(source + ": " + message); }

MapReader::MapReader(const YAML::Node& node, std::string path, ParseContext* ctx)
    : node_(node), path_(std::move(path)), ctx_(ctx) {}

std::string MapReader::KeyPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

std::string MapReader::Where(const char* key) const {
  std::string where = "key \"" + KeyPath(key) + "\"";
  if (node_.IsMap()) {
    const YAML::Node& n = node_;
    YAML::Node value = n[key];
    if (value.IsDefined() && value.Mark().line >= 0) {
      where += " (line " + std::to_string(value.Mark().line + 1) + ")";
    }
  }
  return where;
}

bool MapReader::Has(const char* key) const {
  if (!node_.IsMap()) return false;
  const YAML::Node& n = node_;
  YAML::Node value = n[key];
  return value.IsDefined() && !value.IsNull();
}

bool MapReader::IsList(const char* key) const { return Has(key) && node_[key].IsSequence(); }

bool MapReader::IsAuto(const char* key) {
  Known(key);
  if (!Has(key)) return false;
  const YAML::Node value = node_[key];
  return value.IsScalar() && value.Scalar() == "auto";
}

bool MapReader::IsFalse(const char* key) {
  Known(key);
  if (!Has(key)) return false;
  const YAML::Node value = node_[key];
  return value.IsScalar() && !IsQuoted(value) && value.Scalar() == "false";
}

YAML::Node MapReader::Find(const char* key) {
  Known(key);
  if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Null);
  const YAML::Node& n = node_;
  YAML::Node value = n[key];
  if (!value.IsDefined()) return YAML::Node(YAML::NodeType::Null);
  return value;
}

void MapReader::Known(const char* key) { known_.emplace_back(key); }

bool MapReader::PlainScalar(const char* key, const YAML::Node& value, const char* expected) {
  if (value.IsScalar() && !IsQuoted(value) && value.Scalar() != "auto") return true;
  std::string what = std::string("expected ") + expected + ", got " + Describe(value);
  if (value.IsScalar() && value.Scalar() == "auto") {
    what += " (\"auto\" is filled in by the HuggingFace Trainer; give a value)";
  }
  Fail(key, what);
  return false;
}

bool MapReader::Get(const char* key, double* out) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  if (!PlainScalar(key, value, "a number")) return false;
  double v = 0;
  if (!YAML::convert<double>::decode(value, v)) {
    Fail(key, "expected a number, got " + Describe(value));
    return false;
  }
  if (!std::isfinite(v)) {
    Fail(key, "expected a finite number, got " + Describe(value));
    return false;
  }
  *out = v;
  return true;
}

bool MapReader::Get(const char* key, int64_t* out) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  if (!PlainScalar(key, value, "an integer")) return false;
  long long i = 0;
  if (YAML::convert<long long>::decode(value, i)) {
    *out = i;
    return true;
  }
  // JSON configs write sizes as 5e8: accept a float that is an exact integer.
  double d = 0;
  if (YAML::convert<double>::decode(value, d) && std::isfinite(d) && d == std::floor(d) &&
      std::fabs(d) < 9.2e18) {
    *out = static_cast<int64_t>(d);
    return true;
  }
  Fail(key, "expected an integer, got " + Describe(value));
  return false;
}

bool MapReader::Get(const char* key, int* out) {
  int64_t v = 0;
  if (!Get(key, &v)) return false;
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    Fail(key, "value " + std::to_string(v) + " is out of range for a 32-bit integer");
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool MapReader::Get(const char* key, uint64_t* out) {
  int64_t v = 0;
  if (!Get(key, &v)) return false;
  if (v < 0) {
    Fail(key, "must be >= 0, got " + std::to_string(v));
    return false;
  }
  *out = static_cast<uint64_t>(v);
  return true;
}

bool MapReader::Get(const char* key, bool* out) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  if (!PlainScalar(key, value, "true or false")) return false;
  bool b = false;
  if (!YAML::convert<bool>::decode(value, b)) {
    Fail(key, "expected true or false, got " + Describe(value));
    return false;
  }
  *out = b;
  return true;
}

bool MapReader::Get(const char* key, std::string* out) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  if (!value.IsScalar()) {
    Fail(key, "expected a string, got " + Describe(value));
    return false;
  }
  *out = value.Scalar();
  return true;
}

bool MapReader::Get(const char* key, std::vector<std::string>* out) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  bool ok = value.IsSequence();
  for (size_t i = 0; ok && i < value.size(); ++i) ok = value[i].IsScalar();
  if (!ok) {
    Fail(key, "expected a list of strings, got " + Describe(value));
    return false;
  }
  out->clear();
  for (size_t i = 0; i < value.size(); ++i) out->push_back(value[i].Scalar());
  return true;
}

bool MapReader::GetList(const char* key, std::vector<std::string>* out) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  if (!value.IsScalar()) return Get(key, out);
  *out = {value.Scalar()};
  return true;
}

bool MapReader::GetPair(const char* key, double* first, double* second) {
  YAML::Node value = Find(key);
  if (value.IsNull()) return false;
  double v[2] = {0, 0};
  bool ok = value.IsSequence() && value.size() == 2;
  for (size_t i = 0; ok && i < 2; ++i) {
    ok = value[i].IsScalar() && !IsQuoted(value[i]) &&
         YAML::convert<double>::decode(value[i], v[i]) && std::isfinite(v[i]);
  }
  if (!ok) {
    Fail(key, "expected a list of two numbers, got " + Describe(value));
    return false;
  }
  *first = v[0];
  *second = v[1];
  return true;
}

bool MapReader::GetAlias(const std::vector<const char*>& keys, int64_t* out) {
  bool found = false;
  for (const char* key : keys) {
    if (found) {
      Known(key);
      if (Has(key)) Fail(key, "is an alias of \"" + KeyPath(keys[0]) + "\"; give only one");
      continue;
    }
    found = Get(key, out);
  }
  return found;
}

MapReader MapReader::Block(const char* key) {
  YAML::Node value = Find(key);
  if (!value.IsNull() && !value.IsMap()) {
    Fail(key, "expected a map, got " + Describe(value));
    return MapReader(YAML::Node(YAML::NodeType::Null), KeyPath(key), ctx_);
  }
  return MapReader(value, KeyPath(key), ctx_);
}

void MapReader::Unsupported(const char* key) {
  Known(key);
  if (!node_.IsMap()) return;
  const YAML::Node& n = node_;
  if (!n[key].IsDefined()) return;
  ctx_->Warn("\"" + KeyPath(key) + "\" is a DeepSpeed setting ds-runtime does not support yet;" +
             " ignored");
}

void MapReader::Inert(const char* key, bool runs, const std::string& why) {
  bool v = runs;
  if (Get(key, &v) && v != runs)
    Warn("\"" + KeyPath(key) + "\": " + (v ? "true" : "false") + " changes nothing here: " + why);
}

void MapReader::Inert(const char* key, double runs, const std::string& why) {
  double v = runs;
  if (Get(key, &v) && v != runs) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", v);
    Warn("\"" + KeyPath(key) + "\": " + text + " changes nothing here: " + why);
  }
}

void MapReader::Warn(const std::string& message) { ctx_->Warn(message); }

void MapReader::Require(bool ok, const char* key, const std::string& requirement) {
  if (ok) return;
  const YAML::Node& n = node_;
  std::string got;
  if (node_.IsMap() && n[key].IsDefined()) {
    YAML::Node value = n[key];
    got = value.IsScalar() ? value.Scalar() : Describe(value);
  }
  Fail(key, got.empty() ? requirement : requirement + ", got " + got);
}

void MapReader::Fail(const char* key, const std::string& what) {
  ctx_->Fail(Where(key) + ": " + what);
}

void MapReader::Finish() {
  if (!node_.IsMap()) return;
  std::set<std::string> seen;
  for (const auto& entry : node_) {
    if (!entry.first.IsScalar()) {
      ctx_->Fail("a key in " +
                 (path_.empty() ? std::string("the top level") : "\"" + path_ + "\"") + " (line " +
                 std::to_string(entry.first.Mark().line + 1) + ") is not a plain name but " +
                 Describe(entry.first) + (entry.first.IsNull() ? " (a stray comma?)" : ""));
      return;
    }
    const std::string& key = entry.first.Scalar();
    if (!seen.insert(key).second) {
      ctx_->Fail("duplicate key \"" + KeyPath(key) + "\" (line " +
                 std::to_string(entry.first.Mark().line + 1) + ")");
      return;
    }
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string message = "unknown key \"" + KeyPath(key) + "\"";
    const std::string suggestion = ClosestKey(key, known_);
    if (!suggestion.empty()) message += " (did you mean \"" + suggestion + "\"?)";
    ctx_->Fail(message);
    return;
  }
}

}  // namespace ds::config::internal
