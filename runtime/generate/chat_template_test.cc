// Chat templates (jinja.h, chat_template.h) against transformers' own renderer: every case of
// testdata/chat_templates/golden.json (tools/chat_template_golden.py: ChatML, Llama 2, Zephyr,
// Llama 3, Llama 3.2 with tools, Qwen 2.5 with tools, Gemma, and templates that exercise the
// language) renders to the same text byte for byte, the same {% generation %} ranges, and the
// same refusals (raise_exception); syntax the renderer does not know is refused with its line.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/generate/chat_template.h"

namespace ds::generate {
namespace {

const std::string kDir = "runtime/generate/testdata/chat_templates";

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("chat templates render as transformers renders them") {
  auto golden = jinja::FromJson(Read(kDir + "/golden.json"));
  REQUIRE(golden.ok());
  const jinja::Value cases = golden->Get("cases");
  REQUIRE(cases.kind == jinja::Value::Kind::kList);
  CHECK(cases.list->size() >= 40);
  int errors = 0, generation = 0;
  for (const jinja::Value& c : *cases.list) {
    const std::string name = c.Get("template").s + " / " + c.Get("case").s +
                             (c.Get("add_generation_prompt").b ? " / +prompt" : "");
    INFO(name);
    auto t = ChatTemplate::FromText(Read(kDir + "/" + c.Get("template").s), c.Get("template").s);
    if (!t.ok()) FAIL(t.status().ToString());
    auto r = t->Render(c.Get("messages"), c.Get("add_generation_prompt").b, c.Get("tools"),
                       c.Get("vars"));
    if (c.Get("error").defined()) {
      ++errors;
      REQUIRE(!r.ok());
      CHECK(std::string(r.status().message()).find(c.Get("error").s) != std::string::npos);
      continue;
    }
    if (!r.ok()) FAIL(r.status().ToString());
    CHECK(r->text == c.Get("text").s);
    const jinja::Value want = c.Get("generation");
    REQUIRE(r->generation.size() == want.list->size());
    for (size_t k = 0; k < r->generation.size(); ++k) {
      CHECK(static_cast<int64_t>(r->generation[k].first) == (*(*want.list)[k].list)[0].i);
      CHECK(static_cast<int64_t>(r->generation[k].second) == (*(*want.list)[k].list)[1].i);
      ++generation;
    }
  }
  CHECK(errors == 4);      // Llama 2's and Gemma's refusals, with and without the prompt
  CHECK(generation >= 4);  // the assistant turns of chatml_generation
}

TEST_CASE("a tokenizer folder's template and special tokens load as transformers finds them") {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp");
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>",
            "chat_template": [{"name": "tool_use", "template": "tools"},
                              {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}]})";
  auto t = ChatTemplate::Load(dir);
  REQUIRE(t.ok());
  auto msgs = jinja::FromJson(R"([{"role": "user", "content": "hi"}])");
  auto r = t->Render(*msgs, false);
  REQUIRE(r.ok());
  CHECK(r->text == "<s>hi</s>");
  std::ofstream(dir + "/chat_template.jinja") << "[{{ messages | length }}]";  // the file wins
  t = ChatTemplate::Load(dir);
  REQUIRE(t.ok());
  CHECK(t->Render(*msgs, false)->text == "[1]");
}

TEST_CASE("syntax the renderer does not know is refused with its line") {
  auto error = [](const std::string& text) {
    auto t = jinja::Template::Parse(text, "t.jinja");
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  CHECK(error("a\n{{ x | frobnicate }}") == "t.jinja: line 2: unknown filter 'frobnicate'");
  CHECK(error("{% macro m() %}{% endmacro %}").find("'macro' is not supported") !=
        std::string::npos);
  CHECK(error("{{ x ").find("line 1: the tag opened here is not closed") != std::string::npos);
  CHECK(error("{% if x %}").find("the template ends before elif or else or endif") !=
        std::string::npos);
  CHECK(error("{{ x is frob }}").find("unknown test 'frob'") != std::string::npos);
  auto t = jinja::Template::Parse("{% set ns = 1 %}{% set ns.a = 2 %}", "t.jinja");
  REQUIRE(t.ok());
  auto r = t->Render(jinja::Value::MakeDict());
  REQUIRE(!r.ok());
  CHECK(std::string(r.status().message()) ==
        "t.jinja: line 1: 'ns' is not a namespace: cannot set .a");
}

}  // namespace
}  // namespace ds::generate
