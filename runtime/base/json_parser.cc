// The JSON reader (see json.h): nlohmann's SAX parser, building Json values. The library does
// the lexing (RFC 8259 grammar, escapes, surrogate pairs, UTF-8 validation) without recursion;
// this file keeps what our callers need from it: duplicate keys, exact int64, a depth limit,
// and the byte offset of every error.
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"

namespace ds {
namespace {

constexpr int kMaxDepth = 512;

// Builds one Json from SAX events. Containers under construction sit on `open_`; a value is
// added to the innermost one (after its key, for an object) or becomes the root.
class Builder {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;

  bool null() { return Add(Json()); }
  bool boolean(bool b) { return Add(Json::Bool(b)); }
  bool number_integer(number_integer_t v) { return Add(Json::Int(v)); }
  bool number_unsigned(number_unsigned_t v) {
    // Beyond int64: a double, as for any other number that does not fit.
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Add(Json::Double(static_cast<double>(v)));
    return Add(Json::Int(static_cast<int64_t>(v)));
  }
  bool number_float(number_float_t v, const string_t&) { return Add(Json::Double(v)); }
  bool string(string_t& s) { return Add(Json::String(std::move(s))); }
  bool binary(binary_t&) { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return Open(Json::Object()); }
  bool key(string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(Json::Array()); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error ..."
    std::string what = e.what();
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    offset_ = position > 0 ? position - 1 : 0;
    return Fail(what);
  }

  Status status() const {
    if (error_.empty()) return OkStatus();
    return InvalidArgumentError("JSON: " + error_ + " at offset " + std::to_string(offset_));
  }
  Json& root() { return root_; }

 private:
  bool Fail(const std::string& what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  bool Add(Json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Json& c = open_.back();
    if (c.is_object())
      c.AddMember(std::move(key_), std::move(v));  // duplicates kept, in order
    else
      c.Append(std::move(v));
    return true;
  }
  bool Open(Json container) {
    if (static_cast<int>(open_.size()) >= kMaxDepth) {
      offset_ = 0;
      return Fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    keys_.push_back(std::move(key_));
    open_.push_back(std::move(container));
    return true;
  }
  bool Close() {
    Json done = std::move(open_.back());
    open_.pop_back();
    key_ = std::move(keys_.back());
    keys_.pop_back();
    return Add(std::move(done));
  }

  Json root_;
  std::vector<Json> open_;
  std::vector<std::string> keys_;  // the key each open container goes under in its parent
  std::string key_;
  std::string error_;
  size_t offset_ = 0;
};

// The end of the value that starts at `i` in text already known to be valid JSON.
size_t SkipValue(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      if (!in_string && depth == 0) return i + 1;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return i;  // the end of the enclosing object
      if (--depth == 0) return i + 1;
    } else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
      return i;
    }
  }
  return i;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

StatusOr<Json> ParseJson(std::string_view text) {
  Builder builder;
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder,
                                            nlohmann::json::input_format_t::json, true, false);
  DS_RETURN_IF_ERROR(builder.status());
  if (!ok) return InvalidArgumentError("JSON: invalid document at offset 0");
  return std::move(builder.root());
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ParseJsonObjectRaw(
    std::string_view text) {
  DS_ASSIGN_OR_RETURN(Json doc, ParseJson(text));
  if (!doc.is_object()) return InvalidArgumentError("JSON: expected an object at offset 0");
  // The document is valid: walk its top level once more for each member's source span.
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = text.find('{') + 1;
  for (const Json::Member& m : doc.members()) {
    i = SkipValue(text, text.find('"', i));  // the key
    i = text.find(':', i) + 1;
    while (IsSpace(text[i])) ++i;
    const size_t end = SkipValue(text, i);
    out.emplace_back(m.first, std::string(text.substr(i, end - i)));
    i = end;
  }
  return out;
}

}  // namespace ds
