#!/usr/bin/env python3
"""Chat template goldens: each template of runtime/generate/testdata/chat_templates rendered by
transformers' own renderer (transformers.utils.chat_template_utils.render_jinja_template: jinja2
with trim_blocks, lstrip_blocks, loop controls, {% generation %}, its tojson, raise_exception,
strftime_now, namespace and dict) for a set of conversations, with and without the generation
prompt, and writes golden.json there:

  [{"template": file, "case": name, "messages": [...], "tools": [...] or null,
    "add_generation_prompt": bool, "vars": {bos_token, eos_token, date_string, ...},
    "text": the rendered string, or "error": the exception's message,
    "generation": [[begin, end], ...] UTF-8 byte offsets of {% generation %} blocks}]

and "sft": conversations cut into a prompt (every message but the last, rendered with the
generation prompt) and an answer (the rest of the whole conversation's rendering), each encoded
by the `tokenizers` package with runtime/generate/testdata/tokenizer.json (no special tokens
added): what `ds-data preprocess --json-keys messages` writes.

The templates are written in the forms the Hub's model folders use (ChatML with a default system
message, Llama 2, Zephyr, Llama 3, Llama 3.2 with tools and its date, Qwen 2.5 with tools, Gemma)
plus ones that exercise the language (scoping, features, generation blocks).

  ~/.cache/ds-runtime/peer-venv/bin/python tools/chat_template_golden.py \\
      runtime/generate/testdata/chat_templates

(the peers' venv of DS_PEERS=1 tools/setup.sh; the test, runtime/generate:chat_template_test,
reads only the files).
"""
import json
import os
import sys

import tokenizers
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

TOKENIZER = "runtime/generate/testdata/tokenizer.json"

CHAT = [{"role": "user", "content": "Hello, how are you?"},
        {"role": "assistant", "content": "I'm doing great. How can I help you today?"},
        {"role": "user", "content": "I'd like to show off how chat templating works!"}]
SYSTEM = [{"role": "system", "content": "  You are a friendly chatbot, naïve and kind.  "}] + CHAT
ANSWERED = SYSTEM + [{"role": "assistant", "content": "Sure: templates render {{ text }}."}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather at a place",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
TOOL_CHAT = [{"role": "system", "content": "Use tools."},
             {"role": "user", "content": "Weather in Hanoi?"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Hanoi"}}}]},
             {"role": "tool", "content": "31 C, humid"},
             {"role": "tool", "content": "rain at 5"},
             {"role": "assistant", "content": "It is 31 C."}]
NOT_ALTERNATING = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
VARS = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"}

CASES = {  # template -> [(case, messages, tools)]
    "chatml_default_system.jinja": [("chat", CHAT, None), ("system", SYSTEM, None),
                                    ("answered", ANSWERED, None)],
    "llama2.jinja": [("chat", CHAT, None), ("system", SYSTEM, None),
                     ("not_alternating", NOT_ALTERNATING, None)],
    "zephyr.jinja": [("system", SYSTEM, None), ("answered", ANSWERED, None)],
    "llama3.jinja": [("system", SYSTEM, None), ("answered", ANSWERED, None)],
    "gemma.jinja": [("chat", CHAT, None), ("system", SYSTEM, None)],
    "chatml_generation.jinja": [("answered", ANSWERED, None), ("chat", CHAT, None)],
    "scoping.jinja": [("system", SYSTEM, None), ("chat", CHAT, None)],
    "features.jinja": [("system", SYSTEM, TOOLS)],
    "llama32_tools.jinja": [("system", SYSTEM, None), ("tools", TOOL_CHAT[1:2], TOOLS),
                            ("tool_calls", TOOL_CHAT, TOOLS)],
    "qwen_tools.jinja": [("chat", CHAT, None), ("tools", TOOL_CHAT, TOOLS),
                         ("system", SYSTEM, None)],
}


def byte_offsets(text, ranges):
    return [[len(text[:b].encode()), len(text[:e].encode())] for b, e in ranges]


def sft_cases(root):
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    out = []
    for template in ("llama3.jinja", "qwen_tools.jinja", "chatml_generation.jinja"):
        source = open(os.path.join(root, template)).read()
        for messages in (ANSWERED, CHAT[:2]):
            render = lambda msgs, gen: render_jinja_template(
                conversations=[msgs], chat_template=source, add_generation_prompt=gen, **VARS)[0][0]
            prompt, whole = render(messages[:-1], True), render(messages, False)
            assert whole.startswith(prompt), template
            out.append({"template": template, "messages": messages,
                        "prompt": tok.encode(prompt, add_special_tokens=False).ids,
                        "answer": tok.encode(whole[len(prompt):], add_special_tokens=False).ids})
    return out


def main():
    root = sys.argv[1]
    out = []
    for template, cases in CASES.items():
        source = open(os.path.join(root, template)).read()
        for case, messages, tools in cases:
            for gen in (False, True):
                entry = {"template": template, "case": case, "messages": messages, "tools": tools,
                         "add_generation_prompt": gen, "vars": VARS}
                try:
                    texts, indices = render_jinja_template(
                        conversations=[messages], tools=tools, chat_template=source,
                        add_generation_prompt=gen, return_assistant_tokens_mask=True, **VARS)
                    entry["text"] = texts[0]
                    entry["generation"] = byte_offsets(texts[0], indices[0])
                except Exception as e:  # the template's raise_exception
                    entry["error"] = str(e)
                out.append(entry)
    with open(os.path.join(root, "golden.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                   "cases": out, "sft": sft_cases(root)}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(out)} renderings of {len(CASES)} templates")


if __name__ == "__main__":
    main()
