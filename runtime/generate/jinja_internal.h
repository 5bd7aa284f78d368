// The parsed form of a chat template (jinja.h), shared by its parser (jinja_parse.cc), its
// renderer (jinja_render.cc) and the built-in filters, tests and methods (jinja_builtins.cc).
// Internal to runtime/generate.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/generate/jinja_value.h"

namespace ds::generate::jinja {

struct Expr;
using ExprP = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,  // literal
    kName,     // name
    kAttr,     // args[0].name
    kIndex,    // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null: omitted)
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs)
    kTest,     // args[0] is [not] name(args[1:])
    kNeg,      // -args[0]
    kNot,      // not args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < > <= >= in notin
    kAnd,
    kOr,
    kCond,  // args[1] if args[0] else args[2] (null: undefined)
    kList,  // args
    kDict,  // args: key, value, key, value, ...
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<std::string> ops;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negate = false;  // kTest: is not
};

struct Node;
using NodeP = std::shared_ptr<const Node>;

struct Node {
  enum class Kind : uint8_t {
    kBody,
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kBreak,
    kContinue,
    kGeneration
  };
  Kind kind = Kind::kBody;
  int line = 0;
  std::string text;                               // kText
  ExprP expr;                                     // kOutput, kSet's value, kFor's iterable
  std::vector<std::pair<ExprP, NodeP>> branches;  // kIf: (condition, or null for else; body)
  std::vector<std::string> targets;               // kFor: the loop names; kSet: the name
  std::string attr;                               // kSet: ns.attr
  ExprP filter;                                   // kFor: for x in xs if filter
  std::vector<NodeP> children;                    // kBody; kFor, kGeneration: their body
  NodeP else_body;                                // kFor: {% else %}
};

// The variables of a rendering, in scopes (the context's, then one per for-loop iteration), and
// expression evaluation over them (jinja_eval.cc).
class Scope {
 public:
  Scope(std::string source, const Value& context);
  Value Lookup(const std::string& name) const;
  std::map<std::string, Value>& Top() { return frames_.back(); }
  void Push() { frames_.emplace_back(); }
  void Pop() { frames_.pop_back(); }
  StatusOr<Value> Eval(const Expr& e);
  Status Error(int line, const std::string& what) const;
  std::string Where(int line) const { return source_ + ": line " + std::to_string(line); }

 private:
  StatusOr<Value> Attr(const Expr& e);
  StatusOr<Value> Slice(const Expr& e);
  StatusOr<Value> Call(const Expr& e);
  StatusOr<Value> Filter(const Expr& e);
  StatusOr<Value> Compare(const Expr& e);
  StatusOr<Value> Operator(const Expr& e);
  StatusOr<Value> Display(const Expr& e);
  StatusOr<std::vector<Value>> Args(const Expr& e, size_t first,
                                    std::map<std::string, Value>* kwargs);

  std::string source_;
  std::vector<std::map<std::string, Value>> frames_;
};

// Python's operators: + - * / // % ** ~ on two values, and container membership (in).
StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b);
StatusOr<bool> Contains(const Value& container, const Value& item);
// obj[key] (lists and strings by position, negative from the end; dicts by key): undefined
// when absent.
Value Subscript(const Value& obj, const Value& key);
// The items a for loop visits: a list's, a dict's keys, a string's characters; undefined: none.
StatusOr<List> Iterate(const Value& v);

struct Token;  // jinja_lex.h

// The expression starting at tokens[*pos] (jinja_parse.cc); *pos moves past it. `cond` false:
// without a trailing "if ... else" (a for loop's iterable, before its filter).
StatusOr<ExprP> ParseExpr(const std::vector<Token>& tokens, size_t* pos, int line,
                          const std::string& where, bool cond = true);

// The built-ins (jinja_builtins.cc). `where` prefixes errors ("<source>: line N").
StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const std::vector<Value>& args,
                            const std::map<std::string, Value>& kwargs, const std::string& where);
StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const std::vector<Value>& args,
                         const std::string& where);
// A method of a string or dict value (v.name(args)).
StatusOr<Value> CallMethod(const Value& v, const std::string& name, const std::vector<Value>& args,
                           const std::string& where);
// A global function: raise_exception, namespace, range, strftime_now.
StatusOr<Value> CallGlobal(const std::string& name, const std::vector<Value>& args,
                           const std::map<std::string, Value>& kwargs, const std::string& where);
bool IsFilter(const std::string& name);
bool IsTest(const std::string& name);
bool IsGlobal(const std::string& name);

}  // namespace ds::generate::jinja
