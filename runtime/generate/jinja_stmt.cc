// The chat template's statements (jinja.h): the segments of jinja_lex.h into a tree of text,
// outputs, if / for / set / break / continue / generation nodes.
#include <set>
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/generate/jinja.h"
#include "runtime/generate/jinja_internal.h"
#include "runtime/generate/jinja_lex.h"

namespace ds::generate::jinja {
namespace {

class StmtParser {
 public:
  StmtParser(const std::vector<Segment>& segments, std::string source)
      : s_(segments), source_(std::move(source)) {}

  // Nodes up to a statement whose keyword is in `stops` (its tokens in *tag), or the end.
  StatusOr<NodeP> Body(const std::set<std::string>& stops, std::vector<Token>* tag, int* line) {
    auto body = std::make_shared<Node>();
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_++];
      if (seg.kind == Segment::Kind::kText) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kText;
        n->text = seg.text;
        body->children.push_back(n);
        continue;
      }
      DS_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(seg.text, seg.line, source_));
      if (seg.kind == Segment::Kind::kExpr) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = seg.line;
        DS_ASSIGN_OR_RETURN(n->expr, WholeExpr(tokens, 0, seg.line));
        body->children.push_back(n);
        continue;
      }
      if (tokens.empty()) return Error(seg.line, "an empty {% %} tag");
      const std::string& key = tokens[0].text;
      if (stops.count(key)) {
        *tag = std::move(tokens);
        *line = seg.line;
        return NodeP(body);
      }
      DS_ASSIGN_OR_RETURN(NodeP n, Statement(key, tokens, seg.line));
      body->children.push_back(n);
    }
    if (!stops.empty()) {
      std::string want;
      for (const std::string& s : stops) want += (want.empty() ? "" : " or ") + s;
      return Error(s_.empty() ? 1 : s_.back().line, "the template ends before " + want);
    }
    return NodeP(body);
  }

 private:
  Status Error(int line, const std::string& what) const {
    return InvalidArgumentError(source_ + ": line " + std::to_string(line) + ": " + what);
  }
  StatusOr<ExprP> WholeExpr(const std::vector<Token>& tokens, size_t at, int line) {
    DS_ASSIGN_OR_RETURN(ExprP e, ParseExpr(tokens, &at, line, source_));
    if (at != tokens.size()) return Error(line, "unexpected '" + tokens[at].text + "'");
    return e;
  }

  StatusOr<NodeP> Statement(const std::string& key, const std::vector<Token>& tokens, int line) {
    if (key == "if") return If(tokens, line);
    if (key == "for") return For(tokens, line);
    if (key == "set") return Set(tokens, line);
    auto n = std::make_shared<Node>();
    n->line = line;
    if (key == "break" || key == "continue") {
      n->kind = key == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      return NodeP(n);
    }
    if (key == "generation") {
      n->kind = Node::Kind::kGeneration;
      std::vector<Token> end;
      int end_line = 0;
      DS_ASSIGN_OR_RETURN(NodeP body, Body({"endgeneration"}, &end, &end_line));
      n->children = {body};
      return NodeP(n);
    }
    return Error(line, "the tag '" + key + "' is not supported by this chat template renderer");
  }

  StatusOr<NodeP> If(std::vector<Token> tokens, int line) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kIf;
    n->line = line;
    for (;;) {
      ExprP cond;
      if (tokens[0].text != "else") {
        DS_ASSIGN_OR_RETURN(cond, WholeExpr(tokens, 1, line));
      }
      std::vector<Token> next;
      DS_ASSIGN_OR_RETURN(NodeP body, Body({"elif", "else", "endif"}, &next, &line));
      n->branches.emplace_back(cond, body);
      if (next[0].text == "endif") return NodeP(n);
      if (!cond) return Error(line, "'" + next[0].text + "' after 'else'");
      tokens = std::move(next);
    }
  }

  StatusOr<NodeP> For(const std::vector<Token>& tokens, int line) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kFor;
    n->line = line;
    size_t at = 1;
    while (at < tokens.size() && tokens[at].text != "in") {
      if (tokens[at].kind == Token::Kind::kName)
        n->targets.push_back(tokens[at].text);
      else if (tokens[at].text != ",")
        return Error(line, "unexpected '" + tokens[at].text + "'");
      ++at;
    }
    if (at == tokens.size() || n->targets.empty() || n->targets.size() > 2)
      return Error(line, "expected 'for NAME [, NAME] in ...'");
    ++at;
    DS_ASSIGN_OR_RETURN(n->expr, ParseExpr(tokens, &at, line, source_, /*cond=*/false));
    if (at < tokens.size() && tokens[at].text == "if") {
      DS_ASSIGN_OR_RETURN(n->filter, WholeExpr(tokens, at + 1, line));
    } else if (at < tokens.size()) {
      return Error(line, "unexpected '" + tokens[at].text + "'");
    }
    std::vector<Token> next;
    int end_line = 0;
    DS_ASSIGN_OR_RETURN(NodeP body, Body({"else", "endfor"}, &next, &end_line));
    n->children = {body};
    if (next[0].text == "else") {
      DS_ASSIGN_OR_RETURN(n->else_body, Body({"endfor"}, &next, &end_line));
    }
    return NodeP(n);
  }

  StatusOr<NodeP> Set(const std::vector<Token>& tokens, int line) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kSet;
    n->line = line;
    size_t at = 1;
    if (at >= tokens.size() || tokens[at].kind != Token::Kind::kName)
      return Error(line, "expected 'set NAME = ...'");
    n->targets = {tokens[at++].text};
    if (at + 1 < tokens.size() && tokens[at].text == "." &&
        tokens[at + 1].kind == Token::Kind::kName) {
      n->attr = tokens[at + 1].text;
      at += 2;
    }
    if (at >= tokens.size() || tokens[at].text != "=")
      return Error(line, "expected '=' (block sets {% set x %}...{% endset %} are not supported)");
    DS_ASSIGN_OR_RETURN(n->expr, WholeExpr(tokens, at + 1, line));
    return NodeP(n);
  }

  const std::vector<Segment>& s_;
  size_t i_ = 0;
  std::string source_;
};

}  // namespace

StatusOr<Template> Template::Parse(const std::string& text, const std::string& source) {
  // Jinja drops one newline at the template's end (keep_trailing_newline off).
  std::string body = text;
  if (!body.empty() && body.back() == '\n') body.pop_back();
  if (!body.empty() && body.back() == '\r') body.pop_back();
  DS_ASSIGN_OR_RETURN(std::vector<Segment> segments, Segments(body, source));
  StmtParser p(segments, source);
  std::vector<Token> none;
  int line = 0;
  Template t;
  DS_ASSIGN_OR_RETURN(t.root_, p.Body({}, &none, &line));
  t.source_ = source;
  return t;
}

}  // namespace ds::generate::jinja
