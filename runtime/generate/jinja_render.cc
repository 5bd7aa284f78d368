// The chat template's statements run (jinja.h), with Jinja's scoping: each for-loop iteration is
// a scope of its own (its sets are gone after it; namespaces are shared, so `ns.x = ...` stays).
#include "runtime/base/status_macros.h"
#include "runtime/generate/jinja.h"
#include "runtime/generate/jinja_internal.h"

namespace ds::generate::jinja {
namespace {

using K = Value::Kind;
enum class Flow { kNormal, kBreak, kContinue };

class Runner {
 public:
  Runner(Scope* scope, Rendered* out) : s_(*scope), out_(*out) {}

  StatusOr<Flow> Run(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kBody:
        for (const NodeP& c : n.children) {
          DS_ASSIGN_OR_RETURN(Flow f, Run(*c));
          if (f != Flow::kNormal) return f;
        }
        return Flow::kNormal;
      case Node::Kind::kText:
        out_.text += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        DS_ASSIGN_OR_RETURN(Value v, s_.Eval(*n.expr));
        out_.text += ToString(v);
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          bool take = cond == nullptr;
          if (!take) {
            DS_ASSIGN_OR_RETURN(Value v, s_.Eval(*cond));
            take = v.Truthy();
          }
          if (take) return Run(*body);
        }
        return Flow::kNormal;
      case Node::Kind::kFor:
        DS_RETURN_IF_ERROR(For(n));
        return Flow::kNormal;
      case Node::Kind::kSet:
        DS_RETURN_IF_ERROR(Set(n));
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kGeneration: {
        const size_t begin = out_.text.size();
        DS_ASSIGN_OR_RETURN(Flow f, Run(*n.children[0]));
        out_.generation.emplace_back(begin, out_.text.size());
        return f;
      }
    }
    return Flow::kNormal;
  }

 private:
  Status Bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      s_.Top()[n.targets[0]] = item;
      return OkStatus();
    }
    if (item.kind != K::kList || item.list->size() != n.targets.size())
      return s_.Error(n.line, "cannot unpack " + Repr(item) + " into " +
                                  std::to_string(n.targets.size()) + " names");
    for (size_t k = 0; k < n.targets.size(); ++k) s_.Top()[n.targets[k]] = (*item.list)[k];
    return OkStatus();
  }

  // for x in xs if cond: the loop (and loop.length) sees the kept items only.
  StatusOr<List> Kept(const Node& n, const List& all) {
    if (!n.filter) return all;
    List kept;
    for (const Value& item : all) {
      s_.Push();
      Status bound = Bind(n, item);
      StatusOr<Value> keep = bound.ok() ? s_.Eval(*n.filter) : StatusOr<Value>(bound);
      s_.Pop();
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) kept.push_back(item);
    }
    return kept;
  }

  Status For(const Node& n) {
    DS_ASSIGN_OR_RETURN(Value seq, s_.Eval(*n.expr));
    StatusOr<List> all = Iterate(seq);
    if (!all.ok()) return s_.Error(n.line, std::string(all.status().message()));
    DS_ASSIGN_OR_RETURN(List items, Kept(n, *all));
    const int64_t count = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < count; ++k) {
      s_.Push();
      Status bound = Bind(n, items[k]);
      s_.Top()["loop"] = Value::MakeDict({{"index", Value::Int(k + 1)},
                                          {"index0", Value::Int(k)},
                                          {"revindex", Value::Int(count - k)},
                                          {"revindex0", Value::Int(count - k - 1)},
                                          {"first", Value::Bool(k == 0)},
                                          {"last", Value::Bool(k == count - 1)},
                                          {"length", Value::Int(count)},
                                          {"previtem", k > 0 ? items[k - 1] : Value()},
                                          {"nextitem", k + 1 < count ? items[k + 1] : Value()}});
      StatusOr<Flow> f = bound.ok() ? Run(*n.children[0]) : StatusOr<Flow>(bound);
      s_.Pop();
      if (!f.ok()) return f.status();
      if (*f == Flow::kBreak) break;
    }
    if (count == 0 && n.else_body) return Run(*n.else_body).status();
    return OkStatus();
  }

  Status Set(const Node& n) {
    DS_ASSIGN_OR_RETURN(Value v, s_.Eval(*n.expr));
    if (n.attr.empty()) {
      s_.Top()[n.targets[0]] = std::move(v);
      return OkStatus();
    }
    Value target = s_.Lookup(n.targets[0]);
    if (target.kind != K::kNamespace)
      return s_.Error(n.line, "'" + n.targets[0] + "' is not a namespace: cannot set ." + n.attr);
    target.Set(n.attr, std::move(v));
    return OkStatus();
  }

  Scope& s_;
  Rendered& out_;
};

}  // namespace

StatusOr<Rendered> Template::Render(const Value& context) const {
  Scope scope(source_, context);
  Rendered out;
  Runner runner(&scope, &out);
  DS_RETURN_IF_ERROR(runner.Run(*root_).status());
  return out;
}

}  // namespace ds::generate::jinja
