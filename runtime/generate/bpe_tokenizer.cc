#include "runtime/generate/bpe_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/generate/pretokenizer.h"

namespace ds::generate {
namespace {

std::string Utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<BpeTokenizer> BpeTokenizer::Load(const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::string text, ReadText(path));
  return FromJson(text, path);
}

StatusOr<BpeTokenizer> BpeTokenizer::FromJson(const std::string& text, const std::string& where) {
  auto doc = ParseJson(text);
  if (!doc.ok()) return doc.status().WithPrefix(where);
  BpeTokenizer t;
  const Json* normalizer = doc->Find("normalizer");
  if (normalizer && !normalizer->is_null()) {
    const Json* type = normalizer->Find("type");
    return InvalidArgumentError(where + ": normalizer \"" + (type ? type->as_string() : "") +
                                "\" is not supported");
  }
  DS_RETURN_IF_ERROR(t.ReadModel(doc->Find("model"), where));
  DS_RETURN_IF_ERROR(t.ReadPreTokenizer(doc->Find("pre_tokenizer"), where));
  DS_RETURN_IF_ERROR(t.ReadAddedTokens(doc->Find("added_tokens"), where));
  // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256 + n.
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t c = printable ? b : next++;
    t.byte_char_[b] = Utf8(c);
    t.char_byte_[c] = static_cast<uint8_t>(b);
  }
  return t;
}

// model: a BPE's vocabulary and merges ("a b" strings or [a, b] pairs), ignore_merges.
Status BpeTokenizer::ReadModel(const Json* model, const std::string& where) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return InvalidArgumentError(where + ": " + key + " " + what);
  };
  const Json* type = model ? model->Find("type") : nullptr;
  const std::string name = type && type->is_string() ? type->as_string() : "";
  if (name != "BPE") return bad("model.type", "is \"" + name + "\"; only BPE models are read");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = model->Find(key);
    if (v && v->is_string() && !v->as_string().empty())
      return bad(std::string("model.") + key, "is not supported");
  }
  if (const Json* v = model->Find("byte_fallback"); v && v->as_bool())
    return bad("model.byte_fallback", "(SentencePiece-style BPE) is not supported");
  if (const Json* v = model->Find("ignore_merges"); v) ignore_merges_ = v->as_bool();
  const Json* vocab = model->Find("vocab");
  const Json* merges = model->Find("merges");
  if (!vocab || !vocab->is_object() || !merges || !merges->is_array())
    return bad("model", "needs a vocab object and a merges list");
  for (const auto& [token, id] : vocab->members()) {
    if (!id.is_int() || id.as_int() < 0) return bad("model.vocab", "\"" + token + "\" has no id");
    const size_t at = static_cast<size_t>(id.as_int());
    if (at >= id_to_token_.size()) id_to_token_.resize(at + 1);
    id_to_token_[at] = token;
    vocab_[token] = static_cast<int32_t>(at);
  }
  int32_t rank = 0;
  for (const Json& m : merges->items()) {
    std::string pair;
    if (m.is_string()) {
      pair = m.as_string();
    } else if (m.is_array() && m.items().size() == 2) {
      pair = m.items()[0].as_string() + " " + m.items()[1].as_string();
    }
    if (pair.find(' ') == std::string::npos)
      return bad("model.merges", "entry " + std::to_string(rank) + " is not a pair");
    ranks_.emplace(pair, rank++);
  }
  return OkStatus();
}

// added_tokens: matched in the text before anything else, longest first.
Status BpeTokenizer::ReadAddedTokens(const Json* added, const std::string& where) {
  if (!added || !added->is_array()) return OkStatus();
  for (const Json& a : added->items()) {
    const Json* content = a.Find("content");
    const Json* id = a.Find("id");
    if (!content || !id)
      return InvalidArgumentError(where + ": added_tokens entries need content and id");
    const int32_t i = static_cast<int32_t>(id->as_int());
    added_.push_back({content->as_string(), i});
    added_text_[i] = content->as_string();
    if (i >= static_cast<int32_t>(id_to_token_.size())) id_to_token_.resize(i + 1);
    id_to_token_[i] = content->as_string();
  }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return OkStatus();
}

// ByteLevel (GPT-2's regex), or Llama-3's Sequence: its Split pattern, then ByteLevel without one.
Status BpeTokenizer::ReadPreTokenizer(const Json* pre, const std::string& where) {
  auto type_of = [](const Json* o) {
    const Json* t = o ? o->Find("type") : nullptr;
    return t && t->is_string() ? t->as_string() : std::string();
  };
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError(where + ": pre_tokenizer " + what);
  };
  auto flag = [](const Json* o, const char* key, bool dflt) {
    const Json* v = o->Find(key);
    return v && v->is_bool() ? v->as_bool() : dflt;
  };
  const Json* byte_level = pre;
  if (type_of(pre) == "Sequence") {
    const Json* list = pre->Find("pretokenizers");
    if (!list || !list->is_array() || list->items().size() != 2 ||
        type_of(&list->items()[0]) != "Split" || type_of(&list->items()[1]) != "ByteLevel")
      return bad("Sequence: only Llama-3's [Split, ByteLevel] is supported");
    const Json& split = list->items()[0];
    const Json* pattern = split.Find("pattern");
    const Json* regex = pattern ? pattern->Find("Regex") : nullptr;
    if (!regex || regex->as_string() != kLlama3Pattern)
      return bad("Split: only Llama-3's pattern is supported");
    if (const Json* b = split.Find("behavior"); !b || b->as_string() != "Isolated")
      return bad("Split: behavior must be Isolated");
    if (flag(&split, "invert", false)) return bad("Split: invert is not supported");
    byte_level = &list->items()[1];
    if (flag(byte_level, "use_regex", true))
      return bad("ByteLevel after a Split must have use_regex false");
    llama3_ = true;
  } else if (type_of(pre) != "ByteLevel") {
    return bad("\"" + type_of(pre) + "\" is not supported (ByteLevel, or Llama-3's Sequence)");
  } else if (!flag(pre, "use_regex", true)) {
    return bad("ByteLevel with use_regex false needs a Split before it");
  }
  add_prefix_space_ = flag(byte_level, "add_prefix_space", false);
  return OkStatus();
}

int32_t BpeTokenizer::TokenId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it != vocab_.end()) return it->second;
  for (const auto& [text, id] : added_)
    if (text == token) return id;
  return -1;
}

Status BpeTokenizer::EncodePiece(std::string_view bytes, std::vector<int32_t>* ids) const {
  std::vector<std::string> sym;
  std::string whole;
  for (unsigned char b : bytes) {
    sym.push_back(byte_char_[b]);
    whole += byte_char_[b];
  }
  if (ignore_merges_) {
    auto it = vocab_.find(whole);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return OkStatus();
    }
  }
  while (sym.size() > 1) {  // the lowest-ranked pair, merged everywhere, left to right
    int32_t best = std::numeric_limits<int32_t>::max();
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = ranks_.find(sym[i] + " " + sym[i + 1]);
      if (it != ranks_.end()) best = std::min(best, it->second);
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size()) {
        auto it = ranks_.find(sym[i] + " " + sym[i + 1]);
        if (it != ranks_.end() && it->second == best) {
          merged.push_back(sym[i] + sym[i + 1]);
          ++i;
          continue;
        }
      }
      merged.push_back(sym[i]);
    }
    sym = std::move(merged);
  }
  for (const std::string& s : sym) {
    auto it = vocab_.find(s);
    if (it == vocab_.end())
      return InvalidArgumentError("tokenizer: symbol \"" + s + "\" is not in the vocabulary");
    ids->push_back(it->second);
  }
  return OkStatus();
}

StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  auto plain = [&](std::string_view segment, bool first) -> Status {
    std::string s(segment);
    if (first && add_prefix_space_ && !s.empty() && s[0] != ' ') s = " " + s;
    const std::vector<CodePoint> cp = DecodeUtf8(s);
    for (const auto& [b, e] : llama3_ ? SplitLlama3(cp, s.size()) : SplitGpt2(cp, s.size()))
      DS_RETURN_IF_ERROR(EncodePiece(std::string_view(s).substr(b, e - b), &ids));
    return OkStatus();
  };
  size_t from = 0;
  for (size_t i = 0; i < text.size();) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& a : added_)
      if (!a.first.empty() && text.compare(i, a.first.size(), a.first) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    DS_RETURN_IF_ERROR(plain(text.substr(from, i - from), from == 0));
    ids.push_back(hit->second);
    i += hit->first.size();
    from = i;
  }
  DS_RETURN_IF_ERROR(plain(text.substr(from), from == 0));
  return ids;
}

StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      return InvalidArgumentError("tokenizer: id " + std::to_string(id) + " is outside the " +
                                  std::to_string(vocab_size()) + " tokens");
    auto added = added_text_.find(id);
    if (added != added_text_.end()) {
      out += added->second;
      continue;
    }
    const std::string& token = id_to_token_[id];
    for (const CodePoint& c : DecodeUtf8(token)) {
      auto it = char_byte_.find(c.c);
      if (it == char_byte_.end()) {  // not a byte-level character: kept as it is
        out += token.substr(c.begin, c.size);
        continue;
      }
      out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace ds::generate
