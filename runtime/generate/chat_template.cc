#include "runtime/generate/chat_template.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"

namespace ds::generate {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// tokenizer_config.json's chat template (a string or named variants) and special tokens.
Status ReadConfig(const std::string& path, std::string* text,
                  std::map<std::string, std::string>* special) {
  DS_ASSIGN_OR_RETURN(std::string raw, ReadText(path));
  auto json = ParseJson(raw);
  if (!json.ok()) return json.status().WithPrefix(path);
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const Json* v = json->Find(key);
    if (v && v->is_string()) (*special)[key] = v->as_string();
    if (v && v->is_object() && v->Find("content") && v->Find("content")->is_string())
      (*special)[key] = v->Find("content")->as_string();
  }
  if (!text->empty()) return OkStatus();  // chat_template.jinja wins
  const Json* t = json->Find("chat_template");
  if (t && t->is_string()) *text = t->as_string();
  if (t && t->is_array())
    for (const Json& named : t->items())
      if (named.Find("name") && named.Find("name")->as_string() == "default" &&
          named.Find("template"))
        *text = named.Find("template")->as_string();
  return OkStatus();
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::FromText(const std::string& text, const std::string& source,
                                              std::map<std::string, std::string> special_tokens) {
  ChatTemplate t;
  DS_ASSIGN_OR_RETURN(t.template_, jinja::Template::Parse(text, source));
  t.source_ = source;
  t.special_ = std::move(special_tokens);
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::Load(const std::string& path) {
  if (IsFile(path)) {
    DS_ASSIGN_OR_RETURN(std::string text, ReadText(path));
    return FromText(text, path);
  }
  std::string text, source = path + "/chat_template.jinja";
  std::map<std::string, std::string> special;
  if (IsFile(source)) {
    DS_ASSIGN_OR_RETURN(text, ReadText(source));
  }
  const std::string config = path + "/tokenizer_config.json";
  if (IsFile(config)) DS_RETURN_IF_ERROR(ReadConfig(config, &text, &special));
  if (text.empty())
    return NotFoundError(path + ": no chat template (neither chat_template.jinja nor a " +
                         "\"chat_template\" in tokenizer_config.json)");
  if (!IsFile(source)) source = config + " (chat_template)";
  return FromText(text, source, std::move(special));
}

StatusOr<jinja::Rendered> ChatTemplate::Render(const jinja::Value& messages,
                                               bool add_generation_prompt,
                                               const jinja::Value& tools,
                                               const jinja::Value& vars) const {
  if (messages.kind != jinja::Value::Kind::kList)
    return InvalidArgumentError(source_ + ": the messages are not a list");
  jinja::Value context = jinja::Value::MakeDict();
  for (const auto& [k, v] : special_) context.Set(k, jinja::Value::String(v));
  context.Set("messages", messages);
  context.Set("tools", tools);
  context.Set("documents", jinja::Value::None());
  context.Set("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
  if (vars.dict)
    for (const auto& [k, v] : *vars.dict) context.Set(k, v);
  return template_.Render(context);
}

}  // namespace ds::generate
