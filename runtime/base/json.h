// The JSON value of checkpoint manifests and safetensors headers, read and written by
// nlohmann/json (Debian's nlohmann-json3-dev): json_parser.cc drives its SAX parser, Dump its
// serializer.
//
// RFC 8259, strictly: objects (member order kept, duplicate keys kept so callers can reject
// them with their own message, which the library's own value type cannot do), arrays,
// strings with all escapes (\uXXXX incl. surrogate pairs, emitted as UTF-8; ill-formed UTF-8
// rejected), numbers, bools, null. Integers that fit int64 are kept exactly; other numbers
// are doubles.
// Values are plain data: not thread-safe for concurrent mutation, safe to share read-only.
//
//   DS_ASSIGN_OR_RETURN(Json doc, ParseJson(text));
//   const Json* step = doc.Find("step");
//   Json out = Json::Object(); out.Set("step", Json::Int(10)); std::string s = out.Dump(2);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds {

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
  using Member = std::pair<std::string, Json>;

  Json() = default;  // null
  static Json Bool(bool b);
  static Json Int(int64_t v);
  static Json Double(double v);
  static Json String(std::string s);
  static Json Array(std::vector<Json> items = {});
  static Json Object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kDouble; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors of the wrong type return false / 0 / empty; check the type first.
  bool as_bool() const { return type_ == Type::kBool && bool_; }
  int64_t as_int() const;  // doubles truncate
  double as_double() const;
  const std::string& as_string() const { return str_; }
  const std::vector<Json>& items() const { return items_; }
  std::vector<Json>& items() { return items_; }
  const std::vector<Member>& members() const { return members_; }

  // Object lookup: first member named `key`, or nullptr (also for non-objects).
  const Json* Find(std::string_view key) const;
  // Object: replaces the first member named `key` or appends it. Array: Append.
  void Set(std::string key, Json value);
  void Append(Json value) { items_.push_back(std::move(value)); }
  // Object: appends even when `key` exists (the parser keeps duplicates this way).
  void AddMember(std::string key, Json value) {
    members_.emplace_back(std::move(key), std::move(value));
  }

  // Serializes; indent < 0 gives the compact form, else pretty-printed with that many spaces.
  // Doubles use the shortest text that parses back to the same value (and keep a ".0" so they
  // stay doubles); NaN/inf become null; ill-formed UTF-8 in a string becomes U+FFFD.
  std::string Dump(int indent = -1) const;

  // Structural equality (object member order matters; 1 and 1.0 differ).
  bool operator==(const Json& o) const;
  bool operator!=(const Json& o) const { return !(*this == o); }

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string str_;
  std::vector<Json> items_;
  std::vector<Member> members_;
};

// Parses one JSON value; only whitespace may follow it. Errors are InvalidArgument
// "JSON: <problem> at offset N". Nesting deeper than 512 levels is rejected.
StatusOr<Json> ParseJson(std::string_view text);

// Parses a JSON object and returns each member's key with the exact source text of its
// value (validated, whitespace trimmed), so embedded JSON documents round-trip byte for byte.
StatusOr<std::vector<std::pair<std::string, std::string>>> ParseJsonObjectRaw(
    std::string_view text);

// Appends `s` to `out` as a quoted JSON string literal.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace ds
