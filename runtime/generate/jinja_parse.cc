// The chat template parser (jinja.h): expressions by Jinja's precedence (conditional, or, and,
// not, comparisons, + -, ~, * / // %, **, unary minus, then a primary with its attributes,
// subscripts and calls, then filters and tests), and statements into a tree.
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/generate/jinja.h"
#include "runtime/generate/jinja_internal.h"
#include "runtime/generate/jinja_lex.h"

namespace ds::generate::jinja {
namespace {

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, size_t at, int line, std::string where)
      : t_(tokens), i_(at), line_(line), where_(std::move(where)) {}
  size_t pos() const { return i_; }

  bool Done() const { return i_ >= t_.size(); }
  bool Peek(const char* text, size_t ahead = 0) const {
    return i_ + ahead < t_.size() && t_[i_ + ahead].text == text &&
           (t_[i_ + ahead].kind == Token::Kind::kOp || t_[i_ + ahead].kind == Token::Kind::kName);
  }
  bool Accept(const char* text) {
    if (!Peek(text)) return false;
    ++i_;
    return true;
  }
  Status Expect(const char* text) {
    if (Accept(text)) return OkStatus();
    return Error(std::string("expected '") + text + "'" + Near());
  }
  StatusOr<std::string> Name() {
    if (Done() || t_[i_].kind != Token::Kind::kName) return Error("expected a name" + Near());
    return t_[i_++].text;
  }
  Status Error(const std::string& what) const {
    return InvalidArgumentError(where_ + ": line " + std::to_string(line_) + ": " + what);
  }
  std::string Near() const { return Done() ? " at the end" : " near '" + t_[i_].text + "'"; }

  // An expression; `cond` false: no trailing "if ... else" (a for loop's iterable).
  StatusOr<ExprP> Parse(bool cond = true) {
    DS_ASSIGN_OR_RETURN(ExprP e, Or());
    if (!cond || !Peek("if")) return e;
    ++i_;
    DS_ASSIGN_OR_RETURN(ExprP test, Or());
    ExprP other;
    if (Accept("else")) {
      DS_ASSIGN_OR_RETURN(other, Parse());
    }
    return Make(Expr::Kind::kCond, {test, e, other});
  }

 private:
  ExprP Make(Expr::Kind kind, std::vector<ExprP> args, std::string name = "") {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line_;
    e->args = std::move(args);
    e->name = std::move(name);
    return e;
  }

  StatusOr<ExprP> Or() {
    DS_ASSIGN_OR_RETURN(ExprP e, And());
    while (Accept("or")) {
      DS_ASSIGN_OR_RETURN(ExprP r, And());
      e = Make(Expr::Kind::kOr, {e, r});
    }
    return e;
  }
  StatusOr<ExprP> And() {
    DS_ASSIGN_OR_RETURN(ExprP e, Not());
    while (Accept("and")) {
      DS_ASSIGN_OR_RETURN(ExprP r, Not());
      e = Make(Expr::Kind::kAnd, {e, r});
    }
    return e;
  }
  StatusOr<ExprP> Not() {
    if (Accept("not")) {
      DS_ASSIGN_OR_RETURN(ExprP e, Not());
      return Make(Expr::Kind::kNot, {e});
    }
    return Compare();
  }
  StatusOr<ExprP> Compare() {
    DS_ASSIGN_OR_RETURN(ExprP e, Binary(0));
    std::shared_ptr<Expr> chain;
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">", "in"})
        if (op.empty() && Peek(o)) op = o;
      if (op.empty() && Peek("not") && Peek("in", 1)) op = "notin";
      if (op.empty()) break;
      i_ += op == "notin" ? 2 : 1;
      DS_ASSIGN_OR_RETURN(ExprP r, Binary(0));
      if (!chain) {
        chain = std::make_shared<Expr>();
        chain->kind = Expr::Kind::kCompare;
        chain->line = line_;
        chain->args = {e};
      }
      chain->ops.push_back(op);
      chain->args.push_back(r);
    }
    if (chain) return ExprP(chain);
    return e;
  }
  // Levels of binary operators, loosest first: + -, ~, * / // %, **.
  StatusOr<ExprP> Binary(int level) {
    static const std::vector<std::vector<const char*>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == static_cast<int>(kLevels.size())) return Unary(true);
    DS_ASSIGN_OR_RETURN(ExprP e, Binary(level + 1));
    for (;;) {
      const char* op = nullptr;
      for (const char* o : kLevels[level])
        if (Peek(o)) op = o;
      if (!op) return e;
      ++i_;
      DS_ASSIGN_OR_RETURN(ExprP r, Binary(level + 1));
      e = Make(Expr::Kind::kBinary, {e, r}, op);
    }
  }
  StatusOr<ExprP> Unary(bool filters) {
    ExprP e;
    if (Accept("-")) {
      DS_ASSIGN_OR_RETURN(ExprP x, Unary(false));
      e = Make(Expr::Kind::kNeg, {x});
    } else if (Accept("+")) {
      DS_ASSIGN_OR_RETURN(e, Unary(false));
    } else {
      DS_ASSIGN_OR_RETURN(e, Primary());
      DS_ASSIGN_OR_RETURN(e, Postfix(e));
    }
    return filters ? Filters(e) : e;
  }
  StatusOr<ExprP> Postfix(ExprP e) {
    for (;;) {
      if (Accept(".")) {
        DS_ASSIGN_OR_RETURN(std::string name, Name());
        e = Make(Expr::Kind::kAttr, {e}, name);
      } else if (Accept("[")) {
        DS_ASSIGN_OR_RETURN(e, Subscript(e));
      } else if (Peek("(")) {
        auto call = std::make_shared<Expr>(*Make(Expr::Kind::kCall, {e}));
        DS_RETURN_IF_ERROR(Args(call.get()));
        e = call;
      } else {
        return e;
      }
    }
  }
  StatusOr<ExprP> Subscript(ExprP e) {
    std::vector<ExprP> parts = {e};
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      ExprP part;
      if (!Peek(":") && !Peek("]")) {
        DS_ASSIGN_OR_RETURN(part, Parse());
      }
      parts.push_back(part);
      if (!Accept(":")) break;
      slice = true;
    }
    DS_RETURN_IF_ERROR(Expect("]"));
    if (!slice) return Make(Expr::Kind::kIndex, {e, parts[1]});
    parts.resize(4);
    return Make(Expr::Kind::kSlice, parts);
  }
  // "(a, b, key=c)" into e's args (after those it has) and kwargs.
  Status Args(Expr* e) {
    DS_RETURN_IF_ERROR(Expect("("));
    while (!Accept(")")) {
      if (i_ + 1 < t_.size() && t_[i_].kind == Token::Kind::kName && Peek("=", 1)) {
        const std::string key = t_[i_].text;
        i_ += 2;
        DS_ASSIGN_OR_RETURN(ExprP v, Parse());
        e->kwargs.emplace_back(key, v);
      } else {
        DS_ASSIGN_OR_RETURN(ExprP v, Parse());
        e->args.push_back(v);
      }
      if (!Accept(",") && !Peek(")")) return Error("expected ',' or ')'" + Near());
    }
    return OkStatus();
  }
  StatusOr<ExprP> Filters(ExprP e) {
    for (;;) {
      if (Accept("|")) {
        DS_ASSIGN_OR_RETURN(std::string name, Name());
        if (!IsFilter(name)) return Error("unknown filter '" + name + "'");
        auto f = std::make_shared<Expr>(*Make(Expr::Kind::kFilter, {e}, name));
        if (Peek("(")) DS_RETURN_IF_ERROR(Args(f.get()));
        e = f;
      } else if (Accept("is")) {
        const bool negate = Accept("not");
        DS_ASSIGN_OR_RETURN(std::string name, Name());
        if (!IsTest(name)) return Error("unknown test '" + name + "'");
        auto test = std::make_shared<Expr>(*Make(Expr::Kind::kTest, {e}, name));
        test->negate = negate;
        if (Peek("(")) DS_RETURN_IF_ERROR(Args(test.get()));
        e = test;
      } else {
        return e;
      }
    }
  }
  StatusOr<ExprP> Primary() {
    if (Done()) return Error("an expression is missing at the end");
    const Token tok = t_[i_++];
    switch (tok.kind) {
      case Token::Kind::kInt:
        return Literal(Value::Int(std::stoll(tok.text)));
      case Token::Kind::kFloat:
        return Literal(Value::Float(std::stod(tok.text)));
      case Token::Kind::kString: {
        std::string s = tok.text;  // adjacent strings join
        while (!Done() && t_[i_].kind == Token::Kind::kString) s += t_[i_++].text;
        return Literal(Value::String(s));
      }
      case Token::Kind::kName:
        if (tok.text == "true" || tok.text == "True") return Literal(Value::Bool(true));
        if (tok.text == "false" || tok.text == "False") return Literal(Value::Bool(false));
        if (tok.text == "none" || tok.text == "None") return Literal(Value::None());
        return Make(Expr::Kind::kName, {}, tok.text);
      default:
        break;
    }
    if (tok.text == "(") {
      DS_ASSIGN_OR_RETURN(ExprP e, Parse());
      if (!Peek(",")) {
        DS_RETURN_IF_ERROR(Expect(")"));
        return e;
      }
      return Sequence(")", e);  // a tuple, as a list
    }
    if (tok.text == "[") return Sequence("]", nullptr);
    if (tok.text == "{") {
      std::vector<ExprP> kv;
      while (!Accept("}")) {
        DS_ASSIGN_OR_RETURN(ExprP k, Parse());
        DS_RETURN_IF_ERROR(Expect(":"));
        DS_ASSIGN_OR_RETURN(ExprP v, Parse());
        kv.push_back(k);
        kv.push_back(v);
        if (!Accept(",") && !Peek("}")) return Error("expected ',' or '}'" + Near());
      }
      return Make(Expr::Kind::kDict, kv);
    }
    --i_;
    return Error("unexpected '" + tok.text + "'");
  }
  StatusOr<ExprP> Sequence(const char* close, ExprP first) {
    std::vector<ExprP> items;
    if (first) {
      items.push_back(first);
      Accept(",");
    }
    while (!Accept(close)) {
      DS_ASSIGN_OR_RETURN(ExprP e, Parse());
      items.push_back(e);
      if (!Accept(",") && !Peek(close))
        return Error(std::string("expected ',' or '") + close + "'");
    }
    return Make(Expr::Kind::kList, items);
  }
  ExprP Literal(Value v) {
    auto e = std::make_shared<Expr>();
    e->line = line_;
    e->literal = std::move(v);
    return e;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int line_;
  std::string where_;
};

}  // namespace

StatusOr<ExprP> ParseExpr(const std::vector<Token>& tokens, size_t* pos, int line,
                          const std::string& where, bool cond) {
  ExprParser p(tokens, *pos, line, where);
  DS_ASSIGN_OR_RETURN(ExprP e, p.Parse(cond));
  *pos = p.pos();
  return e;
}

}  // namespace ds::generate::jinja
