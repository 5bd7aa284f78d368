// A Jinja2 renderer for chat templates: the subset Hugging Face tokenizers' templates use,
// rendered as transformers renders them (jinja2 with trim_blocks and lstrip_blocks, loop
// controls, and the {% generation %} tag that marks the assistant's tokens).
//
//   text and {{ expressions }}, {# comments #}, whitespace control with - and +
//   {% if %} {% elif %} {% else %} {% endif %}; {% for x in xs [if c] %} ... {% endfor %} (with
//     loop.index / index0 / first / last / length / revindex / previtem / nextitem, and two
//     names unpacking pairs); {% set x = e %} and {% set ns.x = e %} (a for loop's sets stay in
//     the loop, as Jinja scopes them); {% break %} {% continue %}; {% generation %}
//   literals (strings, numbers, true / false / none, lists, dicts), names, .attr, [i], [a:b:c],
//     calls; + - * / // % ~, comparisons, in / not in, and / or / not, x if c else y
//   filters: trim, length / count, tojson, string, upper, lower, title, capitalize, first, last,
//     default / d, join, list, items, replace, int, float, abs, round, reverse, safe, e / escape
//   tests: defined, undefined, none, string, number, integer, float, boolean, true, false,
//     mapping, iterable, sequence, odd, even
//   str / dict methods: strip, lstrip, rstrip, split, startswith, endswith, upper, lower, title,
//     replace, items, keys, values, get
//   globals: raise_exception(msg), namespace(...), dict(...), range(...), strftime_now(format)
// Anything else is refused when the template is parsed, naming the line.
//
//   DS_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(text, "chat_template.jinja"));
//   DS_ASSIGN_OR_RETURN(jinja::Rendered r, t.Render(context));
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/generate/jinja_value.h"

namespace ds::generate::jinja {

struct Node;  // the parsed template (jinja_internal.h)

struct Rendered {
  std::string text;
  // Byte ranges [begin, end) of `text` rendered inside {% generation %} blocks.
  std::vector<std::pair<size_t, size_t>> generation;
};

class Template {
 public:
  // InvalidArgument "<source>: line N: ..." for syntax the renderer does not know.
  static StatusOr<Template> Parse(const std::string& text, const std::string& source);
  // `context` is a dict of the template's variables (messages, add_generation_prompt,
  // bos_token, ...). raise_exception and type errors fail with the source and line.
  StatusOr<Rendered> Render(const Value& context) const;

 private:
  std::string source_;
  std::shared_ptr<const Node> root_;
};

}  // namespace ds::generate::jinja
