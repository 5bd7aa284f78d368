// The values a chat template computes with (runtime/generate/jinja.h): Jinja's (Python's)
// None, booleans, integers, floats, strings, lists, dicts (insertion-ordered, as Python's) and
// namespace objects, plus "undefined" for a name or key that is not there. Lists, dicts and
// namespaces are shared by reference, as in Python, so `ns.x = ...` inside a loop is seen after it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::generate::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order

struct Value {
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace

  static Value None();
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value String(std::string v);
  static Value MakeList(List items = {});
  static Value MakeDict(Dict items = {});
  static Value Namespace(Dict items = {});

  bool defined() const { return kind != Kind::kUndefined; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double number() const { return kind == Kind::kFloat ? f : kind == Kind::kBool ? b : double(i); }
  bool Truthy() const;
  // The dict's (or namespace's) value of `key`; undefined when absent.
  Value Get(const std::string& key) const;
  void Set(const std::string& key, Value v);  // dicts and namespaces
};

// A string's characters as Python counts them (UTF-8 code points, each as its bytes).
std::vector<std::string> CodePoints(const std::string& s);

// Python's str(): None, True / False, 1.5, 'a' inside containers (repr), ...
std::string ToString(const Value& v);
std::string Repr(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent (< 0: none), sort_keys=sort_keys), with
// Python's default separators (", " and ": "; "," and ": " when indented).
std::string ToJson(const Value& v, int indent = -1, bool sort_keys = false);
// Python's ==, and < for numbers, strings and lists.
bool Equal(const Value& a, const Value& b);
StatusOr<bool> Less(const Value& a, const Value& b);
// A JSON document as a value (the messages of an SFT line).
StatusOr<Value> FromJson(const std::string& text);

}  // namespace ds::generate::jinja
