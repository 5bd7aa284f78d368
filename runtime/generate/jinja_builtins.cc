// The chat template renderer's built-ins (jinja.h): filters, tests, string and dict methods and
// the globals transformers adds (raise_exception, strftime_now) beside Jinja's (namespace, range).
// tojson is transformers' own: json.dumps with ensure_ascii off and its indent and sort_keys.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/generate/jinja_internal.h"

namespace ds::generate::jinja {
namespace {

using K = Value::Kind;

const std::set<std::string> kFilters = {
    "trim",  "length", "count",   "tojson",  "string", "upper", "lower", "title",   "capitalize",
    "first", "last",   "default", "d",       "join",   "list",  "items", "replace", "int",
    "float", "abs",    "round",   "reverse", "safe",   "e",     "escape"};
const std::set<std::string> kTests = {"defined", "undefined", "none",     "string", "number",
                                      "integer", "float",     "boolean",  "true",   "false",
                                      "mapping", "iterable",  "sequence", "odd",    "even"};
const std::set<std::string> kGlobals = {"raise_exception", "namespace", "dict", "range",
                                        "strftime_now"};

std::string Title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    c = alpha ? (start ? std::toupper(c) : std::tolower(c)) : c;
    start = !alpha;
  }
  return out;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

Status Need(const std::vector<Value>& args, size_t n, const std::string& what,
            const std::string& where) {
  if (args.size() >= n) return OkStatus();
  return InvalidArgumentError(where + ": " + what + " needs " + std::to_string(n) + " argument(s)");
}

StatusOr<Value> Length(const Value& v, const std::string& where) {
  if (v.kind == K::kString) return Value::Int(static_cast<int64_t>(CodePoints(v.s).size()));
  if (v.kind == K::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
  if (v.kind == K::kDict) return Value::Int(static_cast<int64_t>(v.dict->size()));
  return InvalidArgumentError(where + ": " + Repr(v) + " has no length");
}

StatusOr<Value> StringFilter(const std::string& name, const Value& v) {
  const std::string s = ToString(v);
  if (name == "trim") return CallMethod(Value::String(s), "strip", {}, "");
  if (name == "upper" || name == "lower") {
    std::string out = s;
    for (char& c : out) c = name == "upper" ? std::toupper(c) : std::tolower(c);
    return Value::String(out);
  }
  if (name == "title") return Value::String(Title(s));
  std::string out = s;  // capitalize
  for (size_t k = 0; k < out.size(); ++k) out[k] = k ? std::tolower(out[k]) : std::toupper(out[k]);
  return Value::String(out);
}

// The filters over a sequence's items; NotFound for another name.
StatusOr<Value> SequenceFilter(const std::string& name, const Value& v,
                               const std::vector<Value>& args) {
  if (name == "reverse" && v.kind == K::kString) {
    std::vector<std::string> cps = CodePoints(v.s);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::String(out);
  }
  DS_ASSIGN_OR_RETURN(List items, Iterate(v));
  if (name == "first" || name == "last") {
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::MakeList(std::move(items));
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  const std::string sep = args.empty() ? "" : ToString(args[0]);  // join
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) out += (k ? sep : "") + ToString(items[k]);
  return Value::String(out);
}

StatusOr<Value> NumberFilter(const std::string& name, const Value& v,
                             const std::vector<Value>& args) {
  if (name == "int") {
    if (v.kind == K::kString) return Value::Int(std::atoll(v.s.c_str()));
    return Value::Int(v.is_number() ? static_cast<int64_t>(v.number()) : 0);
  }
  if (name == "float")
    return Value::Float(v.kind == K::kString ? std::atof(v.s.c_str())
                                             : (v.is_number() ? v.number() : 0.0));
  if (name == "abs")
    return v.kind == K::kInt ? Value::Int(std::llabs(v.i)) : Value::Float(std::fabs(v.number()));
  const int digits = args.empty() ? 0 : static_cast<int>(args[0].number());  // round
  const double scale = std::pow(10.0, digits);
  return Value::Float(std::nearbyint(v.number() * scale) / scale);
}

}  // namespace

bool IsFilter(const std::string& name) { return kFilters.count(name) > 0; }
bool IsTest(const std::string& name) { return kTests.count(name) > 0; }
bool IsGlobal(const std::string& name) { return kGlobals.count(name) > 0; }

StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const std::vector<Value>& args,
                            const std::map<std::string, Value>& kwargs, const std::string& where) {
  if (name == "default" || name == "d") {
    const bool boolean = (args.size() > 1 && args[1].Truthy()) ||
                         (kwargs.count("boolean") && kwargs.at("boolean").Truthy());
    const bool use = boolean ? !v.Truthy() : !v.defined();
    return use ? (args.empty() ? Value::String("") : args[0]) : v;
  }
  if (name == "trim" || name == "upper" || name == "lower" || name == "title" ||
      name == "capitalize")
    return StringFilter(name, v);
  if (name == "length" || name == "count") return Length(v, where);
  if (name == "string") return Value::String(ToString(v));
  if (name == "safe" || name == "e" || name == "escape") return v;  // no autoescape in templates
  if (name == "tojson") {
    const int indent =
        kwargs.count("indent") && kwargs.at("indent").kind == K::kInt
            ? static_cast<int>(kwargs.at("indent").i)
            : (!args.empty() && args[0].kind == K::kInt ? static_cast<int>(args[0].i) : -1);
    const bool sort = kwargs.count("sort_keys") && kwargs.at("sort_keys").Truthy();
    return Value::String(ToJson(v, indent, sort));
  }
  if (name == "first" || name == "last" || name == "list" || name == "reverse" || name == "join")
    return SequenceFilter(name, v, args);
  if (name == "items") return CallMethod(v, "items", {}, where);
  if (name == "replace") {
    DS_RETURN_IF_ERROR(Need(args, 2, "replace", where));
    return Value::String(Replace(ToString(v), ToString(args[0]), ToString(args[1])));
  }
  if (name == "int" || name == "float" || name == "abs" || name == "round")
    return NumberFilter(name, v, args);
  return InvalidArgumentError(where + ": unknown filter '" + name + "'");
}

StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const std::vector<Value>&,
                         const std::string& where) {
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.kind == K::kString;
  if (name == "number") return v.kind == K::kInt || v.kind == K::kFloat;
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "iterable") return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString;
  if (name == "sequence") return v.kind == K::kList || v.kind == K::kString || v.kind == K::kDict;
  if (name == "odd" || name == "even")
    return v.kind == K::kInt && (v.i % 2 != 0) == (name == "odd");
  return InvalidArgumentError(where + ": unknown test '" + name + "'");
}

}  // namespace ds::generate::jinja
