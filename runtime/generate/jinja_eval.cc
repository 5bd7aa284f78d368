// Chat template expressions (jinja.h) with Python's semantics: and / or return an operand,
// 4 / 2 is 2.0, `a ~ b` joins their str(), an attribute or key that is not there is undefined
// (and an attribute of an undefined is an error, as in Jinja).
#include <algorithm>
#include <cmath>

#include "runtime/base/status_macros.h"
#include "runtime/generate/jinja_internal.h"

namespace ds::generate::jinja {

using K = Value::Kind;

Scope::Scope(std::string source, const Value& context) : source_(std::move(source)) {
  frames_.emplace_back();
  if (context.dict)
    for (const auto& [k, v] : *context.dict) frames_.back()[k] = v;
}

Status Scope::Error(int line, const std::string& what) const {
  return InvalidArgumentError(Where(line) + ": " + what);
}

Value Scope::Lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  if (IsGlobal(name)) return Value::String("<function " + name + ">");  // defined, callable
  return Value();
}

StatusOr<List> Iterate(const Value& v) {
  switch (v.kind) {
    case K::kList:
      return *v.list;
    case K::kDict: {
      List keys;
      for (const auto& kv : *v.dict) keys.push_back(Value::String(kv.first));
      return keys;
    }
    case K::kString: {
      List chars;
      for (std::string& c : CodePoints(v.s)) chars.push_back(Value::String(std::move(c)));
      return chars;
    }
    case K::kUndefined:
      return List();
    default:
      return InvalidArgumentError(Repr(v) + " is not iterable");
  }
}

Value Subscript(const Value& obj, const Value& key) {
  if ((obj.kind == K::kDict || obj.kind == K::kNamespace) && key.kind == K::kString)
    return obj.Get(key.s);
  if (key.kind != K::kInt || (obj.kind != K::kList && obj.kind != K::kString)) return Value();
  const std::vector<std::string> chars =
      obj.kind == K::kString ? CodePoints(obj.s) : std::vector<std::string>();
  const int64_t n = obj.kind == K::kList ? obj.list->size() : chars.size();
  const int64_t i = key.i < 0 ? key.i + n : key.i;
  if (i < 0 || i >= n) return Value();
  return obj.kind == K::kList ? (*obj.list)[i] : Value::String(chars[i]);
}

StatusOr<bool> Contains(const Value& c, const Value& item) {
  switch (c.kind) {
    case K::kString:
      if (item.kind != K::kString) return InvalidArgumentError("'in <string>' needs a string");
      return c.s.find(item.s) != std::string::npos;
    case K::kList:
      for (const Value& v : *c.list)
        if (Equal(v, item)) return true;
      return false;
    case K::kDict:
    case K::kNamespace:
      return item.kind == K::kString && c.Get(item.s).defined();
    case K::kUndefined:
      return InvalidArgumentError("'in' on an undefined value");
    default:
      return InvalidArgumentError("'in' on " + Repr(c));
  }
}

namespace {

int64_t IntOf(const Value& v) { return v.kind == K::kBool ? v.b : v.i; }

StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number())
    return InvalidArgumentError("unsupported operands for " + op + ": " + Repr(a) + ", " + Repr(b));
  const bool ints = a.kind != K::kFloat && b.kind != K::kFloat;
  const double x = a.number(), y = b.number();
  if ((op == "/" || op == "//" || op == "%") && y == 0)
    return InvalidArgumentError("division by zero");
  if (op == "/") return Value::Float(x / y);
  if (!ints) {
    if (op == "**") return Value::Float(std::pow(x, y));
    if (op == "//") return Value::Float(std::floor(x / y));
    if (op == "%") return Value::Float(x - std::floor(x / y) * y);  // the divisor's sign
    return Value::Float(op == "+" ? x + y : op == "-" ? x - y : x * y);
  }
  const int64_t i = IntOf(a), j = IntOf(b);
  if (op == "**")
    return j >= 0 ? Value::Int(std::llround(std::pow(x, y))) : Value::Float(std::pow(x, y));
  if (op == "//" || op == "%") {
    int64_t q = i / j;
    if ((i % j != 0) && ((i < 0) != (j < 0))) --q;  // floor division, as Python
    return Value::Int(op == "//" ? q : i - q * j);
  }
  return Value::Int(op == "+" ? i + j : op == "-" ? i - j : i * j);
}

}  // namespace

StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::String(ToString(a) + ToString(b));
  if (op == "+" && a.kind == K::kString && b.kind == K::kString) return Value::String(a.s + b.s);
  if (op == "+" && a.kind == K::kList && b.kind == K::kList) {
    List all = *a.list;
    all.insert(all.end(), b.list->begin(), b.list->end());
    return Value::MakeList(std::move(all));
  }
  if (op == "*" && (a.kind == K::kString || a.kind == K::kList) && b.kind == K::kInt) {
    Value out = a.kind == K::kString ? Value::String("") : Value::MakeList();
    for (int64_t k = 0; k < b.i; ++k) {
      if (a.kind == K::kString)
        out.s += a.s;
      else
        out.list->insert(out.list->end(), a.list->begin(), a.list->end());
    }
    return out;
  }
  return Arithmetic(op, a, b);
}

StatusOr<std::vector<Value>> Scope::Args(const Expr& e, size_t first,
                                         std::map<std::string, Value>* kwargs) {
  std::vector<Value> args;
  for (size_t k = first; k < e.args.size(); ++k) {
    DS_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k]));
    args.push_back(std::move(v));
  }
  for (const auto& [key, x] : e.kwargs) {
    DS_ASSIGN_OR_RETURN(Value v, Eval(*x));
    (*kwargs)[key] = std::move(v);
  }
  return args;
}

StatusOr<Value> Scope::Attr(const Expr& e) {
  DS_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  if (!obj.defined()) return Error(e.line, "an undefined value has no attribute '" + e.name + "'");
  if (obj.kind == K::kDict || obj.kind == K::kNamespace) return obj.Get(e.name);
  return Value();
}

StatusOr<Value> Scope::Slice(const Expr& e) {
  DS_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  if (obj.kind != K::kList && obj.kind != K::kString)
    return Error(e.line, "cannot slice " + Repr(obj));
  const std::vector<std::string> cps =
      obj.kind == K::kString ? CodePoints(obj.s) : std::vector<std::string>();
  const int64_t n = obj.kind == K::kList ? obj.list->size() : cps.size();
  int64_t bound[3] = {0, n, 1};
  for (int k = 0; k < 3; ++k) {
    if (!e.args[k + 1]) continue;
    DS_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
    if (v.kind == K::kNone) continue;
    if (v.kind != K::kInt) return Error(e.line, "slice indices must be integers");
    bound[k] = v.i;
  }
  const int64_t step = bound[2];
  if (step == 0) return Error(e.line, "slice step cannot be zero");
  auto clamp = [&](int64_t i, bool given, bool start) {
    if (!given) return step > 0 ? (start ? 0 : n) : (start ? n - 1 : -1);
    if (i < 0) i += n;
    return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t lo = clamp(bound[0], e.args[1] != nullptr, true);
  const int64_t hi = clamp(bound[1], e.args[2] != nullptr, false);
  List items;
  std::string chars;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
    if (obj.kind == K::kList)
      items.push_back((*obj.list)[i]);
    else
      chars += cps[i];
  }
  return obj.kind == K::kList ? Value::MakeList(std::move(items)) : Value::String(chars);
}

StatusOr<Value> Scope::Call(const Expr& e) {
  std::map<std::string, Value> kwargs;
  DS_ASSIGN_OR_RETURN(std::vector<Value> args, Args(e, 1, &kwargs));
  const Expr& callee = *e.args[0];
  StatusOr<Value> r = InvalidArgumentError("this expression cannot be called");
  if (callee.kind == Expr::Kind::kName && IsGlobal(callee.name)) {
    r = CallGlobal(callee.name, args, kwargs, Where(e.line));
  } else if (callee.kind == Expr::Kind::kAttr) {
    DS_ASSIGN_OR_RETURN(Value obj, Eval(*callee.args[0]));
    r = CallMethod(obj, callee.name, args, Where(e.line));
  } else {
    return Error(e.line, "only the globals and string / dict methods can be called");
  }
  return r;
}

StatusOr<Value> Scope::Filter(const Expr& e) {
  DS_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  std::map<std::string, Value> kwargs;
  DS_ASSIGN_OR_RETURN(std::vector<Value> args, Args(e, 1, &kwargs));
  if (e.kind == Expr::Kind::kFilter) return ApplyFilter(e.name, v, args, kwargs, Where(e.line));
  DS_ASSIGN_OR_RETURN(bool yes, ApplyTest(e.name, v, args, Where(e.line)));
  return Value::Bool(yes != e.negate);
}

StatusOr<Value> Scope::Compare(const Expr& e) {
  DS_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t k = 0; k < e.ops.size(); ++k) {
    DS_ASSIGN_OR_RETURN(Value right, Eval(*e.args[k + 1]));
    const std::string& op = e.ops[k];
    StatusOr<bool> r = false;
    if (op == "==" || op == "!=")
      r = Equal(left, right) == (op == "==");
    else if (op == "in" || op == "notin") {
      r = Contains(right, left);
      if (r.ok() && op == "notin") r = !*r;
    } else if (op == "<" || op == ">=") {
      r = Less(left, right);
      if (r.ok() && op == ">=") r = !*r;
    } else {  // > and <=
      r = Less(right, left);
      if (r.ok() && op == "<=") r = !*r;
    }
    if (!r.ok()) return Error(e.line, std::string(r.status().message()));
    if (!*r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

StatusOr<Value> Scope::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kAttr:
      return Attr(e);
    case Expr::Kind::kIndex: {
      DS_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (!obj.defined()) return Error(e.line, "an undefined value cannot be indexed");
      DS_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      return Subscript(obj, key);
    }
    case Expr::Kind::kSlice:
      return Slice(e);
    case Expr::Kind::kCall:
      return Call(e);
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
      return Filter(e);
    case Expr::Kind::kCompare:
      return Compare(e);
    case Expr::Kind::kList:
    case Expr::Kind::kDict:
      return Display(e);
    default:
      return Operator(e);
  }
}

// -x, not x, x op y, and / or (an operand), x if c else y.
StatusOr<Value> Scope::Operator(const Expr& e) {
  DS_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  switch (e.kind) {
    case Expr::Kind::kNeg:
      if (a.kind == K::kInt) return Value::Int(-a.i);
      if (a.kind == K::kFloat) return Value::Float(-a.f);
      return Error(e.line, "cannot negate " + Repr(a));
    case Expr::Kind::kNot:
      return Value::Bool(!a.Truthy());
    case Expr::Kind::kBinary: {
      DS_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
      StatusOr<Value> r = BinaryOp(e.name, a, b);
      if (!r.ok()) return Error(e.line, std::string(r.status().message()));
      return r;
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr:
      if (a.Truthy() == (e.kind == Expr::Kind::kOr)) return a;
      return Eval(*e.args[1]);
    case Expr::Kind::kCond:  // args[0] is the condition
      if (a.Truthy()) return Eval(*e.args[1]);
      return e.args[2] ? Eval(*e.args[2]) : StatusOr<Value>(Value());
    default:
      return Error(e.line, "an expression the renderer does not know");
  }
}

// [a, b] and {k: v}.
StatusOr<Value> Scope::Display(const Expr& e) {
  List items;
  for (const ExprP& x : e.args) {
    DS_ASSIGN_OR_RETURN(Value v, Eval(*x));
    items.push_back(std::move(v));
  }
  if (e.kind == Expr::Kind::kList) return Value::MakeList(std::move(items));
  Value d = Value::MakeDict();
  for (size_t k = 0; k + 1 < items.size(); k += 2) d.Set(ToString(items[k]), items[k + 1]);
  return d;
}

}  // namespace ds::generate::jinja
