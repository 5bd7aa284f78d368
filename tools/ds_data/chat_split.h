// A conversation ({"messages": [...]}) as supervised fine-tuning pairs it: the prompt is the
// chat template's rendering of every message before the last with the generation prompt, the
// answer is the rest of the whole conversation's rendering (the assistant's last turn, and
// whatever the template closes it with). The loss then falls on the answer only (data.sft).
#pragma once

#include <string>
#include <utility>

#include "runtime/base/status.h"
#include "runtime/generate/chat_template.h"

namespace ds::tools {

// InvalidArgument (the caller adds file and line) for messages that are not a list of
// {role, content} objects, a conversation that does not end with the assistant, or a template
// whose generation prompt does not begin the rendering of the assistant's turn.
StatusOr<std::pair<std::string, std::string>> SplitConversation(const generate::ChatTemplate& chat,
                                                                const std::string& messages_json);

}  // namespace ds::tools
