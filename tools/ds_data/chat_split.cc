#include "tools/ds_data/chat_split.h"

#include "runtime/base/status_macros.h"

namespace ds::tools {

using generate::jinja::Value;

StatusOr<std::pair<std::string, std::string>> SplitConversation(const generate::ChatTemplate& chat,
                                                                const std::string& messages_json) {
  auto messages = generate::jinja::FromJson(messages_json);
  if (!messages.ok() || messages->kind != Value::Kind::kList || messages->list->empty())
    return InvalidArgumentError("\"messages\" is not a non-empty list of messages");
  for (const Value& m : *messages->list)
    if (m.kind != Value::Kind::kDict || m.Get("role").kind != Value::Kind::kString)
      return InvalidArgumentError("a message is not an object with a \"role\"");
  if (messages->list->back().Get("role").s != "assistant")
    return InvalidArgumentError(
        "the conversation ends with a \"" + messages->list->back().Get("role").s +
        "\" message; supervised fine-tuning trains on the assistant's last turn");
  Value before =
      Value::MakeList(generate::jinja::List(messages->list->begin(), messages->list->end() - 1));
  DS_ASSIGN_OR_RETURN(generate::jinja::Rendered prompt, chat.Render(before, true));
  DS_ASSIGN_OR_RETURN(generate::jinja::Rendered whole, chat.Render(*messages, false));
  if (whole.text.compare(0, prompt.text.size(), prompt.text) != 0)
    return InvalidArgumentError(chat.source() +
                                ": the rendering with the generation prompt is not the start of "
                                "the whole conversation's; the answer cannot be cut from it");
  return std::make_pair(prompt.text, whole.text.substr(prompt.text.size()));
}

}  // namespace ds::tools
