#include "runtime/generate/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/base/json.h"

namespace ds::generate::jinja {

using K = Value::Kind;

Value Value::None() {
  Value v;
  v.kind = K::kNone;
  return v;
}
Value Value::Bool(bool x) {
  Value v;
  v.kind = K::kBool;
  v.b = x;
  return v;
}
Value Value::Int(int64_t x) {
  Value v;
  v.kind = K::kInt;
  v.i = x;
  return v;
}
Value Value::Float(double x) {
  Value v;
  v.kind = K::kFloat;
  v.f = x;
  return v;
}
Value Value::String(std::string x) {
  Value v;
  v.kind = K::kString;
  v.s = std::move(x);
  return v;
}
Value Value::MakeList(List items) {
  Value v;
  v.kind = K::kList;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::MakeDict(Dict items) {
  Value v;
  v.kind = K::kDict;
  v.dict = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::Namespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind = K::kNamespace;
  return v;
}

bool Value::Truthy() const {
  switch (kind) {
    case K::kBool:
      return b;
    case K::kInt:
      return i != 0;
    case K::kFloat:
      return f != 0;
    case K::kString:
      return !s.empty();
    case K::kList:
      return !list->empty();
    case K::kDict:
      return !dict->empty();
    case K::kNamespace:
      return true;
    default:
      return false;
  }
}

Value Value::Get(const std::string& key) const {
  if (!dict) return Value();
  for (const auto& [k, v] : *dict)
    if (k == key) return v;
  return Value();
}

void Value::Set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict)
    if (k == key) {
      old = std::move(v);
      return;
    }
  dict->emplace_back(key, std::move(v));
}

namespace {

// Python's repr of a float: the shortest text that reads back, with ".0" for integral values.
std::string FloatText(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, f);
    if (std::strtod(text, nullptr) == f) break;
  }
  std::string s = text;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Quoted(const std::string& s) {  // Python's repr of a str: '...' unless it holds '
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + q;
}

}  // namespace

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0)
      n = 4;
    else if (c >= 0xE0)
      n = 3;
    else if (c >= 0xC0)
      n = 2;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case K::kString:
      return Quoted(v.s);
    case K::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + Repr((*v.list)[k]);
      return out + "]";
    }
    case K::kDict: {
      std::string out = "{";
      for (size_t k = 0; k < v.dict->size(); ++k)
        out += (k ? ", " : "") + Quoted((*v.dict)[k].first) + ": " + Repr((*v.dict)[k].second);
      return out + "}";
    }
    default:
      return ToString(v);
  }
}

std::string ToString(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.b ? "True" : "False";
    case K::kInt:
      return std::to_string(v.i);
    case K::kFloat:
      return FloatText(v.f);
    case K::kString:
      return v.s;
    case K::kNamespace:
      return "<Namespace>";
    default:
      return Repr(v);
  }
}

namespace {

void AppendJson(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  const std::string nl = indent < 0 ? "" : "\n" + std::string((depth + 1) * indent, ' ');
  const std::string close = indent < 0 ? "" : "\n" + std::string(depth * indent, ' ');
  const char* comma = indent < 0 ? ", " : ",";
  switch (v.kind) {
    case K::kList: {
      if (v.list->empty()) {
        *out += "[]";
        return;
      }
      *out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        *out += (k ? comma : "") + nl;
        AppendJson((*v.list)[k], indent, sort_keys, depth + 1, out);
      }
      *out += close + "]";
      return;
    }
    case K::kDict:
    case K::kNamespace: {
      Dict items = *v.dict;
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      if (items.empty()) {
        *out += "{}";
        return;
      }
      *out += "{";
      for (size_t k = 0; k < items.size(); ++k) {
        *out += (k ? comma : "") + nl + Json::String(items[k].first).Dump() + ": ";
        AppendJson(items[k].second, indent, sort_keys, depth + 1, out);
      }
      *out += close + "}";
      return;
    }
    case K::kString:
      *out += Json::String(v.s).Dump();
      return;
    case K::kBool:
      *out += v.b ? "true" : "false";
      return;
    case K::kInt:
      *out += std::to_string(v.i);
      return;
    case K::kFloat:
      *out += FloatText(v.f);
      return;
    default:
      *out += "null";
  }
}

Value FromJsonValue(const Json& j) {
  switch (j.type()) {
    case Json::Type::kBool:
      return Value::Bool(j.as_bool());
    case Json::Type::kInt:
      return Value::Int(j.as_int());
    case Json::Type::kDouble:
      return Value::Float(j.as_double());
    case Json::Type::kString:
      return Value::String(j.as_string());
    case Json::Type::kArray: {
      List items;
      for (const Json& x : j.items()) items.push_back(FromJsonValue(x));
      return Value::MakeList(std::move(items));
    }
    case Json::Type::kObject: {
      Dict items;
      for (const auto& [k, x] : j.members()) items.emplace_back(k, FromJsonValue(x));
      return Value::MakeDict(std::move(items));
    }
    default:
      return Value::None();
  }
}

}  // namespace

std::string ToJson(const Value& v, int indent, bool sort_keys) {
  std::string out;
  AppendJson(v, indent, sort_keys, 0, &out);
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kString:
      return a.s == b.s;
    case K::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case K::kDict:
    case K::kNamespace:
      return a.dict == b.dict || ToJson(a, -1, true) == ToJson(b, -1, true);
    default:
      return true;  // none == none, undefined == undefined
  }
}

StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() < b.number();
  if (a.kind == K::kString && b.kind == K::kString) return a.s < b.s;
  if (a.kind == K::kList && b.kind == K::kList) {
    for (size_t k = 0; k < std::min(a.list->size(), b.list->size()); ++k) {
      if (Equal((*a.list)[k], (*b.list)[k])) continue;
      return Less((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size();
  }
  return InvalidArgumentError("'<' not supported between " + Repr(a) + " and " + Repr(b));
}

StatusOr<Value> FromJson(const std::string& text) {
  auto j = ParseJson(text);
  if (!j.ok()) return j.status();
  return FromJsonValue(*j);
}

}  // namespace ds::generate::jinja
