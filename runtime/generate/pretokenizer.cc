#include "runtime/generate/pretokenizer.h"

#include <unicode/uchar.h>

namespace ds::generate {
namespace {

bool IsLetter(uint32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER || t == U_TITLECASE_LETTER ||
         t == U_MODIFIER_LETTER || t == U_OTHER_LETTER;
}
bool IsNumber(uint32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}
bool IsSpace(uint32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }
bool IsOther(uint32_t c) { return !IsSpace(c) && !IsLetter(c) && !IsNumber(c); }

uint32_t Lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
bool IsNewline(uint32_t c) { return c == '\r' || c == '\n'; }

}  // namespace

std::vector<CodePoint> DecodeUtf8(std::string_view s) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = s[i];
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    uint32_t c = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (size_t k = 1; k < n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 2) {
        n = 0;
        break;
      }
      c = (c << 6) | (s[i + k] & 0x3F);
    }
    if (n == 0) {
      out.push_back({0xFFFD, i, 1});
      ++i;
      continue;
    }
    out.push_back({c, i, n});
    i += n;
  }
  return out;
}

// GPT-2's pattern over `cp`: the byte ranges [begin, end) of the pieces, in order.
std::vector<std::pair<size_t, size_t>> SplitGpt2(const std::vector<CodePoint>& cp, size_t bytes) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = cp.size();
  auto at = [&](size_t i) { return i < n ? cp[i].begin : bytes; };
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    if (cp[i].c == '\'' && i + 1 < n) {  // 's 't 'm 'd, then 're 've 'll
      const uint32_t a = cp[i + 1].c, b = i + 2 < n ? cp[i + 2].c : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
    }
    for (bool (*cls)(uint32_t) : {IsLetter, IsNumber, IsOther}) {  // " ?\p{L}+" and so on
      if (end > i) break;
      const size_t from = cp[i].c == ' ' && i + 1 < n && cls(cp[i + 1].c) ? i + 1 : i;
      if (!cls(cp[from].c)) continue;
      end = from;
      while (end < n && cls(cp[end].c)) ++end;
    }
    if (end == i) {  // whitespace: \s+(?!\S), else \s+
      while (end < n && IsSpace(cp[end].c)) ++end;
      if (end < n && end - i >= 2) --end;  // leave the last one to the next word
    }
    out.push_back({at(i), at(end)});
    i = end;
  }
  return out;
}

// Llama-3's pattern over `cp`:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
std::vector<std::pair<size_t, size_t>> SplitLlama3(const std::vector<CodePoint>& cp, size_t bytes) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = cp.size();
  auto at = [&](size_t i) { return i < n ? cp[i].begin : bytes; };
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    if (cp[i].c == '\'' && i + 1 < n) {  // case-insensitive contractions
      const uint32_t a = Lower(cp[i + 1].c), b = i + 2 < n ? Lower(cp[i + 2].c) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
    }
    if (end == i) {  // one non-letter, non-digit, non-newline char, then letters
      const uint32_t c = cp[i].c;
      const size_t from =
          !IsNewline(c) && !IsLetter(c) && !IsNumber(c) && i + 1 < n && IsLetter(cp[i + 1].c)
              ? i + 1
              : i;
      if (IsLetter(cp[from].c)) {
        end = from;
        while (end < n && IsLetter(cp[end].c)) ++end;
      }
    }
    if (end == i && IsNumber(cp[i].c))  // digits in threes
      while (end < n && end < i + 3 && IsNumber(cp[end].c)) ++end;
    if (end == i) {  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
      const size_t from = cp[i].c == ' ' && i + 1 < n && IsOther(cp[i + 1].c) ? i + 1 : i;
      if (IsOther(cp[from].c)) {
        end = from;
        while (end < n && IsOther(cp[end].c)) ++end;
        while (end < n && IsNewline(cp[end].c)) ++end;
      }
    }
    if (end == i) {  // whitespace: up to its last newline, else \s+(?!\S), else \s+
      size_t run = i;
      while (run < n && IsSpace(cp[run].c)) ++run;
      for (size_t k = run; k > i; --k)
        if (IsNewline(cp[k - 1].c)) {
          end = k;
          break;
        }
      if (end == i) {
        end = run;
        if (end < n && end - i >= 2) --end;
      }
    }
    out.push_back({at(i), at(end)});
    i = end;
  }
  return out;
}

}  // namespace ds::generate
