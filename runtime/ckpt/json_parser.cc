// The JSON reader: a recursive-descent parser over a string_view (see json.h).
#include <charconv>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/json.h"

namespace ds::ckpt {

namespace {

constexpr int kMaxDepth = 512;

// Recursive-descent parser over a string_view; positions are byte offsets.
class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  StatusOr<Json> ParseDocument() {
    DS_ASSIGN_OR_RETURN(Json v, ParseValue(0));
    SkipWs();
    if (pos_ != s_.size()) return Error("unexpected trailing characters");
    return v;
  }

  StatusOr<std::vector<std::pair<std::string, std::string>>> ParseObjectRaw() {
    std::vector<std::pair<std::string, std::string>> out;
    SkipWs();
    if (!Consume('{')) return Error("expected '{'");
    SkipWs();
    if (!Consume('}')) {
      while (true) {
        SkipWs();
        DS_ASSIGN_OR_RETURN(std::string key, ParseString());
        SkipWs();
        if (!Consume(':')) return Error("expected ':'");
        SkipWs();
        size_t begin = pos_;
        DS_ASSIGN_OR_RETURN(Json ignored, ParseValue(1));
        (void)ignored;
        out.emplace_back(std::move(key), std::string(s_.substr(begin, pos_ - begin)));
        SkipWs();
        if (Consume('}')) break;
        if (!Consume(',')) return Error("expected ',' or '}'");
      }
    }
    SkipWs();
    if (pos_ != s_.size()) return Error("unexpected trailing characters");
    return out;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError("JSON: " + what + " at offset " + std::to_string(pos_));
  }
  bool Consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void SkipWs() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool ConsumeWord(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  StatusOr<Json> ParseValue(int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    SkipWs();
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      DS_ASSIGN_OR_RETURN(std::string str, ParseString());
      return Json::String(std::move(str));
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    if (ConsumeWord("true")) return Json::Bool(true);
    if (ConsumeWord("false")) return Json::Bool(false);
    if (ConsumeWord("null")) return Json();
    return Error(std::string("unexpected character '") + c + "'");
  }

  StatusOr<Json> ParseObject(int depth) {
    ++pos_;  // '{'
    Json obj = Json::Object();
    SkipWs();
    if (Consume('}')) return obj;
    while (true) {
      SkipWs();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected string key");
      DS_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipWs();
      if (!Consume(':')) return Error("expected ':'");
      DS_ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
      // No de-duplication: callers decide what a repeated key means.
      obj.AddMember(std::move(key), std::move(value));
      SkipWs();
      if (Consume('}')) return obj;
      if (!Consume(',')) return Error("expected ',' or '}'");
    }
  }

  StatusOr<Json> ParseArray(int depth) {
    ++pos_;  // '['
    Json arr = Json::Array();
    SkipWs();
    if (Consume(']')) return arr;
    while (true) {
      DS_ASSIGN_OR_RETURN(Json v, ParseValue(depth + 1));
      arr.Append(std::move(v));
      SkipWs();
      if (Consume(']')) return arr;
      if (!Consume(',')) return Error("expected ',' or ']'");
    }
  }

  StatusOr<Json> ParseNumber();
  StatusOr<std::string> ParseString();
  StatusOr<uint32_t> ParseHex4();

  std::string_view s_;
  size_t pos_ = 0;
};

StatusOr<Json> Parser::ParseNumber() {
  size_t begin = pos_;
  bool integral = true;
  Consume('-');
  if (Consume('0')) {
    // A leading zero stands alone.
  } else if (pos_ < s_.size() && s_[pos_] >= '1' && s_[pos_] <= '9') {
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
  } else {
    return Error("invalid number");
  }
  auto digits = [&]() -> bool {
    size_t d = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > d;
  };
  if (Consume('.')) {
    integral = false;
    if (!digits()) return Error("invalid number: digits expected after '.'");
  }
  if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
    ++pos_;
    integral = false;
    if (!Consume('+')) Consume('-');
    if (!digits()) return Error("invalid number: digits expected in exponent");
  }
  const char* first = s_.data() + begin;
  const char* last = s_.data() + pos_;
  if (integral) {
    int64_t v = 0;
    auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc() && r.ptr == last) return Json::Int(v);
    // Out of int64 range: fall through to a double.
  }
  double d = 0;
  auto r = std::from_chars(first, last, d);
  if (r.ec != std::errc() || r.ptr != last) return Error("number out of range");
  return Json::Double(d);
}

StatusOr<uint32_t> Parser::ParseHex4() {
  if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    char c = s_[pos_++];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else
      return Error("invalid hex digit in \\u escape");
  }
  return v;
}

namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

StatusOr<std::string> Parser::ParseString() {
  if (!Consume('"')) return Error("expected '\"'");
  std::string out;
  while (true) {
    if (pos_ >= s_.size()) return Error("unterminated string");
    char c = s_[pos_++];
    if (c == '"') return out;
    if (static_cast<unsigned char>(c) < 0x20) {
      --pos_;
      return Error("control character in string");
    }
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (pos_ >= s_.size()) return Error("unterminated escape");
    char e = s_[pos_++];
    switch (e) {
      case '"':
        out.push_back('"');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '/':
        out.push_back('/');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        DS_ASSIGN_OR_RETURN(uint32_t cp, ParseHex4());
        if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("unpaired low surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (!ConsumeWord("\\u")) return Error("unpaired high surrogate");
          DS_ASSIGN_OR_RETURN(uint32_t lo, ParseHex4());
          if (lo < 0xDC00 || lo > 0xDFFF) return Error("invalid low surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        AppendUtf8(cp, &out);
        break;
      }
      default:
        --pos_;
        return Error(std::string("invalid escape '\\") + e + "'");
    }
  }
}

}  // namespace

StatusOr<Json> ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

StatusOr<std::vector<std::pair<std::string, std::string>>> ParseJsonObjectRaw(
    std::string_view text) {
  return Parser(text).ParseObjectRaw();
}

}  // namespace ds::ckpt
