// A model's chat template (runtime/generate/jinja.h) and the special tokens it reads, from a
// Hugging Face tokenizer folder as transformers finds them: chat_template.jinja, else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template}: "default"),
// with bos_token / eos_token / unk_token / pad_token from tokenizer_config.json (a string or an
// AddedToken's "content"). Renders a conversation as apply_chat_template(tokenize=False) does.
//
//   DS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Load("Qwen2.5-0.5B-Instruct"));
//   DS_ASSIGN_OR_RETURN(jinja::Rendered r, t.Render(messages, /*add_generation_prompt=*/true));
#pragma once

#include <map>
#include <string>

#include "runtime/base/status.h"
#include "runtime/generate/jinja.h"

namespace ds::generate {

class ChatTemplate {
 public:
  // A tokenizer folder, or a .jinja file (no special tokens then).
  static StatusOr<ChatTemplate> Load(const std::string& path);
  static StatusOr<ChatTemplate> FromText(const std::string& text, const std::string& source,
                                         std::map<std::string, std::string> special_tokens = {});

  // `messages`: a list of {role, content, ...} dicts; `tools`: a list, or undefined / none;
  // `vars`: more template variables (date_string, ...), a dict or undefined.
  StatusOr<jinja::Rendered> Render(const jinja::Value& messages, bool add_generation_prompt,
                                   const jinja::Value& tools = jinja::Value::None(),
                                   const jinja::Value& vars = jinja::Value()) const;
  const std::map<std::string, std::string>& special_tokens() const { return special_; }
  const std::string& source() const { return source_; }

 private:
  jinja::Template template_;
  std::string source_;
  std::map<std::string, std::string> special_;
};

}  // namespace ds::generate
