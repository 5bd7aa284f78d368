// A chat template cut into text, {{ expression }} and {% statement %} segments with Jinja's
// whitespace rules as transformers sets them: trim_blocks (the newline after a block tag goes),
// lstrip_blocks (spaces and tabs from the line's start to a block tag go, unless the tag opens
// with +), and - on either side of any tag stripping all whitespace there. Comments vanish by the
// same rules. Then the tokens of one tag's inside.
#include "runtime/generate/jinja_lex.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace ds::generate::jinja {
namespace {

bool Space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The end of the tag opened at `open` (the index of its closing delimiter), skipping strings and
// brackets: "{{ {'a': {'b': 1}} }}" closes at its last "}}", as Jinja's lexer balances them.
size_t TagEnd(const std::string& t, size_t open, const char* close) {
  char quote = 0;
  int depth = 0;
  for (size_t i = open + 2; i + 1 < t.size(); ++i) {
    const char c = t[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (depth == 0 && c == close[0] && t[i + 1] == close[1]) {
      return i;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

int LineOf(const std::string& t, size_t at) {
  int line = 1;
  for (size_t i = 0; i < at && i < t.size(); ++i) line += t[i] == '\n';
  return line;
}

}  // namespace

StatusOr<std::vector<Segment>> Segments(const std::string& t, const std::string& source) {
  std::vector<Segment> out;
  size_t pos = 0;
  bool strip_next = false;  // the previous tag ended with -
  while (pos <= t.size()) {
    size_t open = t.find('{', pos);
    while (open != std::string::npos && open + 1 < t.size() && t[open + 1] != '{' &&
           t[open + 1] != '%' && t[open + 1] != '#')
      open = t.find('{', open + 1);
    if (open + 1 >= t.size()) open = std::string::npos;
    std::string text = t.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && Space(text[k])) ++k;
      text.erase(0, k);
    }
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::kText, text, LineOf(t, pos)});
      break;
    }
    const char kind = t[open + 1];
    const char sign = open + 2 < t.size() ? t[open + 2] : 0;
    const bool block = kind == '%' || kind == '#';
    if (sign == '-') {
      while (!text.empty() && Space(text.back())) text.pop_back();
    } else if (block && sign != '+') {  // lstrip_blocks: only blanks from the line's start
      size_t k = open;
      while (k > pos && (t[k - 1] == ' ' || t[k - 1] == '\t')) --k;
      if (k == 0 || t[k - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - k));
    }
    if (!text.empty()) out.push_back({Segment::Kind::kText, text, LineOf(t, pos)});
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = TagEnd(t, open, close);
    const int line = LineOf(t, open);
    if (end == std::string::npos)
      return InvalidArgumentError(source + ": line " + std::to_string(line) + ": the tag opened " +
                                  "here is not closed with " + close);
    size_t inner_begin = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
    size_t inner_end = end;
    strip_next = end > inner_begin && t[end - 1] == '-';
    if (strip_next) --inner_end;
    pos = end + 2;
    if (block && !strip_next && pos < t.size() && t[pos] == '\n') ++pos;  // trim_blocks
    if (block && !strip_next && pos + 1 < t.size() && t[pos] == '\r' && t[pos + 1] == '\n')
      pos += 2;
    if (kind == '#') continue;
    out.push_back({kind == '{' ? Segment::Kind::kExpr : Segment::Kind::kStmt,
                   t.substr(inner_begin, inner_end - inner_begin), line});
    if (pos == t.size()) break;
  }
  return out;
}

StatusOr<std::vector<Token>> Tokenize(const std::string& s, int line, const std::string& where) {
  std::vector<Token> out;
  size_t i = 0;
  auto error = [&](const std::string& what) {
    return InvalidArgumentError(where + ": line " + std::to_string(line) + ": " + what);
  };
  while (i < s.size()) {
    const char c = s[i];
    if (Space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::kName, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool dot = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) ||
                              (s[j] == '.' && !dot && j + 1 < s.size() &&
                               std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        dot = dot || s[j] == '.';
        ++j;
      }
      out.push_back({dot ? Token::Kind::kFloat : Token::Kind::kInt, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      if (j >= s.size()) return error("a string is not closed");
      out.push_back({Token::Kind::kString, v});
      i = j + 1;
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[",
                                   "]",  "{",  "}",  ".",  ",",  ":",  "|", "~", "+",
                                   "-",  "*",  "/",  "%",  "<",  ">",  "="};
      bool found = false;
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({Token::Kind::kOp, op});
          i += n;
          found = true;
          break;
        }
      }
      if (!found) return error(std::string("unexpected character '") + c + "'");
    }
  }
  return out;
}

}  // namespace ds::generate::jinja
