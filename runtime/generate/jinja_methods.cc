// String and dict methods a chat template calls (Python's: "x".strip(), d.items(), ...) and its
// global functions (jinja.h).
#include <cctype>
#include <ctime>

#include "runtime/base/status_macros.h"
#include "runtime/generate/jinja_internal.h"

namespace ds::generate::jinja {
namespace {

using K = Value::Kind;

std::string Arg(const std::vector<Value>& args, size_t k) {
  return k < args.size() && args[k].kind != K::kNone ? ToString(args[k]) : "";
}

std::string StripChars(const std::string& s, const std::string& chars, bool left, bool right) {
  auto strip = [&](char c) {
    return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0
                         : chars.find(c) != std::string::npos;
  };
  size_t b = 0, e = s.size();
  while (left && b < e && strip(s[b])) ++b;
  while (right && e > b && strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Value Split(const std::string& s, const std::string& sep) {
  List parts;
  if (sep.empty()) {  // runs of whitespace, none at the ends
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j > i) parts.push_back(Value::String(s.substr(i, j - i)));
      i = j;
    }
    return Value::MakeList(std::move(parts));
  }
  size_t at = 0;
  for (size_t next = s.find(sep); next != std::string::npos; next = s.find(sep, at)) {
    parts.push_back(Value::String(s.substr(at, next - at)));
    at = next + sep.size();
  }
  parts.push_back(Value::String(s.substr(at)));
  return Value::MakeList(std::move(parts));
}

// startswith / endswith: a string or a list (tuple) of them.
bool Affix(const std::string& s, const Value& what, bool start) {
  if (what.kind == K::kList) {
    for (const Value& w : *what.list)
      if (Affix(s, w, start)) return true;
    return false;
  }
  const std::string& a = what.s;
  if (a.size() > s.size()) return false;
  return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                             const std::vector<Value>& args, const std::string& where) {
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::String(StripChars(s, Arg(args, 0), name != "rstrip", name != "lstrip"));
  if (name == "split") return Split(s, Arg(args, 0));
  if ((name == "startswith" || name == "endswith") && !args.empty())
    return Value::Bool(Affix(s, args[0], name == "startswith"));
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
    return ApplyFilter(name, Value::String(s), {}, {}, where);
  if (name == "replace" && args.size() >= 2)
    return ApplyFilter("replace", Value::String(s), args, {}, where);
  if (name == "join" && !args.empty())
    return ApplyFilter("join", args[0], {Value::String(s)}, {}, where);
  return InvalidArgumentError(where + ": strings have no method '" + name + "' here");
}

}  // namespace

StatusOr<Value> CallMethod(const Value& v, const std::string& name, const std::vector<Value>& args,
                           const std::string& where) {
  if (v.kind == K::kString) return StringMethod(v.s, name, args, where);
  if (v.kind == K::kDict || v.kind == K::kNamespace) {
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [k, x] : *v.dict)
        out.push_back(name == "items"  ? Value::MakeList({Value::String(k), x})
                      : name == "keys" ? Value::String(k)
                                       : x);
      return Value::MakeList(std::move(out));
    }
    if (name == "get" && !args.empty()) {
      Value found = v.Get(ToString(args[0]));
      return found.defined() ? found : (args.size() > 1 ? args[1] : Value::None());
    }
  }
  if (!v.defined()) return InvalidArgumentError(where + ": '" + name + "' of an undefined value");
  return InvalidArgumentError(where + ": " + Repr(v) + " has no method '" + name + "' here");
}

StatusOr<Value> CallGlobal(const std::string& name, const std::vector<Value>& args,
                           const std::map<std::string, Value>& kwargs, const std::string& where) {
  if (name == "raise_exception")
    return InvalidArgumentError(where +
                                ": the chat template refused the conversation: " + Arg(args, 0));
  if (name == "namespace" || name == "dict") {
    Value ns = name == "dict" ? Value::MakeDict() : Value::Namespace();
    if (!args.empty() && args[0].kind == K::kDict)
      for (const auto& [k, x] : *args[0].dict) ns.Set(k, x);
    for (const auto& [k, x] : kwargs) ns.Set(k, x);
    return ns;
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1) stop = args[0].i;
    if (args.size() >= 2) start = args[0].i, stop = args[1].i;
    if (args.size() >= 3) step = args[2].i;
    if (step == 0) return InvalidArgumentError(where + ": range() step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
    return Value::MakeList(std::move(out));
  }
  if (name == "strftime_now") {  // transformers': the local time now
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char text[128];
    const size_t n = std::strftime(text, sizeof(text), Arg(args, 0).c_str(), &tm);
    return Value::String(std::string(text, n));
  }
  return InvalidArgumentError(where + ": unknown function '" + name + "'");
}

}  // namespace ds::generate::jinja
