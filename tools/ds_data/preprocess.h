// ds-data preprocess: JSON lines of text to Megatron indexed datasets, as Megatron-LM's
// tools/preprocess_data.py makes them (same flags, same output names, the same bytes for the
// same token ids: runtime/data/indexed_dataset.h).
//
//   ds-data preprocess --input corpus.jsonl.gz --json-keys text --tokenizer tokenizer.json
//       --output-prefix my-corpus --append-eod --workers 2           (one command line)
//   -> my-corpus_text_document.bin / .idx
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::tools {

struct PreprocessOptions {
  std::vector<std::string> inputs;  // JSON lines, plain or gzip'd, read in order
  std::vector<std::string> json_keys{"text"};
  std::string tokenizer;  // tokenizer.json or a SentencePiece *.model
  std::string output_prefix;
  bool append_eod = false;
  // The end-of-document id; -1: the tokenizer's (tokenizer_config.json's eos_token beside it,
  // else tokenizer.json's "<|endoftext|>" special token).
  int64_t eod_id = -1;
  // A key named "messages" holds conversations: each becomes a prompt and an answer
  // (chat_split.h) in <prefix>_messages_prompt_document / _answer_document, rendered with this
  // chat template (a tokenizer folder or a .jinja file; empty: the tokenizer's folder).
  std::string chat_template;
  int workers = 1;              // tokenizing threads
  int64_t log_interval = 1000;  // a progress line every this many documents
};

// One `<output_prefix>_<key>_document.{bin,idx}` pair per key (two for "messages": its prompts and
// answers) (every key's pair is written,
// unlike the snapshot of preprocess_data.py that finalizes only the last). Inputs, the
// tokenizer and the output directory are checked before any line is read; a line that is not
// a JSON object with a string under each key stops the run naming file and line, and leaves
// no dataset under the output names.
Status RunPreprocess(const PreprocessOptions& options);

}  // namespace ds::tools
