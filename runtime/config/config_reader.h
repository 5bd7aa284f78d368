// Package-private: typed, key-checked reading of one YAML map (the yaml-cpp adapter).
//
// Every getter registers its key as known, so Finish() can report the keys nobody asked for.
// Errors are sticky in the shared ParseContext (the first one wins), which keeps the section
// parsers straight-line code:
//
//   MapReader r(node, "optimizer.params", &ctx);
//   r.Get("lr", &opt.lr);
//   r.Require(opt.lr >= 0, "lr", "must be >= 0");
//   r.Finish();                       // unknown / duplicate keys
//
// yaml-cpp throws; nothing here does: conversions use YAML::convert<T>::decode, and the caller
// (ParseJobConfig) catches what the parser itself throws. Not thread-safe; one per block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "runtime/base/status.h"

namespace ds::config::internal {

// State shared by all readers of one file.
struct ParseContext {
  std::string source;  // file name, prefixed to every message
  Status error;        // the first error
  std::vector<std::string> warnings;

  // Records "source: message" unless an error is already recorded.
  void Fail(const std::string& message);
  // Records "source: message" as a warning (collected, not logged here).
  void Warn(const std::string& message);
};

class MapReader {
 public:
  // `node` is the block (a map; null or undefined = absent, every getter returns false).
  // `path` is its key path ("" for the root, "zero_optimization", "optimizer.params").
  MapReader(const YAML::Node& node, std::string path, ParseContext* ctx);

  // True when `key` is present with a non-null value. Does not register the key.
  bool Has(const char* key) const;
  // True when `key` is the string "auto" (the HuggingFace Trainer's placeholder); registers the
  // key. Readers that can derive the value check this before Get (which refuses "auto").
  bool IsAuto(const char* key);
  // True when `key` is the plain scalar `false` (a number's "none" in some DeepSpeed configs).
  bool IsFalse(const char* key);
  bool present() const { return node_.IsMap(); }
  bool IsList(const char* key) const;  // present and a sequence

  // Read `key` into *out when present, non-null and of the right type; return whether it was.
  // A wrong type records an error naming the key. Integers accept 5e8-style JSON numbers when
  // the value is integral; numbers must be finite and unquoted.
  bool Get(const char* key, double* out);
  bool Get(const char* key, int64_t* out);
  bool Get(const char* key, int* out);
  bool Get(const char* key, uint64_t* out);
  bool Get(const char* key, bool* out);
  bool Get(const char* key, std::string* out);
  bool Get(const char* key, std::vector<std::string>* out);  // a list of strings
  // A list of scalars, or one scalar read as a list of one (Megatron's --data-path forms).
  bool GetList(const char* key, std::vector<std::string>* out);
  // A two-number list, e.g. betas: [0.9, 0.999].
  bool GetPair(const char* key, double* first, double* second);
  // The first of `keys` present wins (DeepSpeed aliases); all are registered.
  bool GetAlias(const std::vector<const char*>& keys, int64_t* out);

  // The sub-block `key` (absent -> a reader over nothing). Records an error when present but
  // not a map. The child must be Finish()ed by the caller.
  MapReader Block(const char* key);

  // `key` is a known DeepSpeed setting we do not support yet: one warning when present.
  void Unsupported(const char* key);
  // A DeepSpeed setting whose other values ask for what ds-runtime does not do: read (its type
  // checked) and, when it differs from `runs` (what runs here), one warning saying that it
  // changes nothing and `why`.
  void Inert(const char* key, bool runs, const std::string& why);
  void Inert(const char* key, double runs, const std::string& why);
  // Records a warning (the file name is prefixed).
  void Warn(const std::string& message);
  // Registers `key` as known without reading it.
  void Known(const char* key);

  // Records "key "path.key" (line N): <requirement>, got <value>" when !ok.
  void Require(bool ok, const char* key, const std::string& requirement);
  // Records "key "path.key" (line N): <what>".
  void Fail(const char* key, const std::string& what);

  // Reports the first unknown or duplicate key, with the closest known key as a suggestion.
  void Finish();

  // "zero_optimization.stage" for key "stage".
  std::string KeyPath(const std::string& key) const;

 private:
  // The value node of `key` (registers it); null node when absent.
  YAML::Node Find(const char* key);
  // A plain (unquoted) scalar, or an error naming `expected`.
  bool PlainScalar(const char* key, const YAML::Node& value, const char* expected);
  std::string Where(const char* key) const;

  YAML::Node node_;
  std::string path_;
  ParseContext* ctx_;  // not owned; outlives the reader
  std::vector<std::string> known_;
};

}  // namespace ds::config::internal
