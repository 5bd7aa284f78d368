// ds-data: prepares token files for ds-runtime (README.md in this directory).
//
//   ds-data tokenize --input text.txt --output train.tok --val_fraction 0.1 --val_output val.tok
//   ds-data addition --digits 3 --train_examples 50000 --val_examples 2000 --output_dir DIR
//   ds-data info --input train.tok
//   ds-data preprocess --input docs.jsonl --tokenizer tokenizer.json --output-prefix P --append-eod

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/base/logging.h"
#include "tools/ds_data/commands.h"
#include "tools/ds_data/preprocess.h"
#include "tools/ds_data/samples.h"

namespace {

constexpr const char* kAdditionHelp =
    "Synthetic D-digit addition for a tiny GPT.\n"
    "Vocabulary (14 tokens): 0-9 = digits, 10 = '+', 11 = '=', 12 = end of example ('$'),\n"
    "13 = padding ('_'). Each example has 3D+4 tokens: both operands zero-padded to D\n"
    "digits, then '=', then the D+1 digit sum REVERSED (least significant digit first),\n"
    "then the end marker. D=3: 123+456 -> \"123+456=9750$\"; '=' is always token 2D+1.\n"
    "Writes DIR/train.tok and DIR/val.tok (examples back to back, DSTOKENS uint16, vocab\n"
    "14), DIR/val_problems.txt (\"a b sum\" per line) and DIR/task.json. Train and\n"
    "validation problems are distinct (no (a, b) pair in both); the seed fixes them.";

int Fail(const ds::Status& s) {
  DS_LOG_ERROR("tools", "{}", s.ToString());
  return 1;
}

// The tokenize subcommand's options into *o.
CLI::App* AddTokenize(CLI::App* app, ds::tools::TokenizeOptions* o) {
  CLI::App* tok = app->add_subcommand(
      "tokenize", "Byte-level tokenizer: token = byte value (vocab 256), DSTOKENS uint16.");
  tok->add_option("--input", o->input, "text (or any) file")->required();
  tok->add_option("--output", o->output, "train token file")->required();
  tok->add_option("--val_fraction", o->val_fraction,
                  "fraction of the tokens, taken from the end, for validation")
      ->default_val(0.0);
  tok->add_option("--val_output", o->val_output, "validation token file");
  return tok;
}

// The addition subcommand's options into *o.
CLI::App* AddAddition(CLI::App* app, ds::tools::AdditionOptions* o) {
  CLI::App* add = app->add_subcommand(
      "addition", "Synthetic multi-digit addition task for a tiny GPT (addition --help).");
  add->footer(kAdditionHelp);
  add->add_option("--digits", o->digits, "digits per operand, 1-9")->default_val(3);
  add->add_option("--train_examples", o->train_examples, "training problems")->default_val(50000);
  add->add_option("--val_examples", o->val_examples, "validation problems")->default_val(2000);
  add->add_option("--seed", o->seed, "fixes the problems")->default_val(1);
  add->add_option("--output_dir", o->output_dir, "created if missing")->required();
  return add;
}

// The preprocess subcommand's options into *o.
CLI::App* AddPreprocess(CLI::App* app, ds::tools::PreprocessOptions* o) {
  CLI::App* prep = app->add_subcommand(
      "preprocess",
      "JSON lines to Megatron indexed datasets (<prefix>_<key>_document.bin/.idx), as "
      "Megatron-LM's tools/preprocess_data.py makes them.");
  prep->add_option("--input", o->inputs, "JSON lines files, plain or .gz, read in order")
      ->required();
  prep->add_option("--json-keys", o->json_keys, "keys whose strings become documents")
      ->default_val(std::vector<std::string>{"text"});
  prep->add_option("--tokenizer,--tokenizer-model", o->tokenizer,
                   "tokenizer.json or a SentencePiece .model")
      ->required();
  prep->add_option("--output-prefix", o->output_prefix, "output path prefix")->required();
  prep->add_flag("--append-eod", o->append_eod, "end each non-empty document with the EOD id");
  prep->add_option("--eod-id", o->eod_id,
                   "EOD id (default: tokenizer_config.json's eos_token, else <|endoftext|>)");
  prep->add_option("--chat-template", o->chat_template,
                   "with --json-keys messages: a tokenizer folder or .jinja file (default: the "
                   "tokenizer's folder)");
  prep->add_option("--workers", o->workers, "tokenizing threads")->default_val(1);
  prep->add_option("--log-interval", o->log_interval, "a progress line every N documents")
      ->default_val(1000);
  return prep;
}

// The samples subcommand's options into *o.
CLI::App* AddSamples(CLI::App* app, ds::tools::SamplesOptions* o) {
  CLI::App* smp = app->add_subcommand(
      "samples",
      "The samples a job trains on from Megatron datasets, in order, as JSON lines of token ids "
      "(megatron-core's GPTDataset / BlendedDataset order).");
  smp->add_option("--config", o->config, "a job config: its data.path, split, seed and samples");
  smp->add_option("--dp", o->dp, "with --config: data-parallel ranks (for the batch sizes)")
      ->default_val(1);
  smp->add_option("--data-path", o->data.data_path,
                  "a prefix, or weight prefix pairs (0.3 a 0.7 b)");
  smp->add_option("--split", o->data.split, "train,valid,test shares")->default_val("969, 30, 1");
  smp->add_option("--split-index", o->data.split_index, "0 train, 1 validation, 2 test")
      ->default_val(0);
  smp->add_option("--seq-length", o->data.seq_len, "tokens per sample (+1 read)");
  smp->add_option("--train-samples", o->data.num_samples, "samples the split is built for");
  smp->add_option("--seed", o->data.seed, "Megatron's --seed")->default_val(1234);
  smp->add_option("--first", o->first, "first sample printed")->default_val(0);
  smp->add_option("--count", o->count, "samples printed")->default_val(10);
  return smp;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds-data: prepare token files for ds-runtime"};
  app.require_subcommand(1);

  ds::tools::TokenizeOptions tokenize;
  CLI::App* tok = AddTokenize(&app, &tokenize);
  ds::tools::AdditionOptions addition;
  CLI::App* add = AddAddition(&app, &addition);
  ds::tools::PreprocessOptions pre;
  CLI::App* prep = AddPreprocess(&app, &pre);
  ds::tools::SamplesOptions samp;
  CLI::App* smp = AddSamples(&app, &samp);

  std::string info_path;
  CLI::App* info = app.add_subcommand("info", "Describe a token file (format, count, vocab).");
  info->add_option("--input", info_path, "token file")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (tok->parsed()) {
    ds::Status s = ds::tools::RunTokenize(tokenize);
    return s.ok() ? 0 : Fail(s);
  }
  if (smp->parsed()) {
    ds::Status s = ds::tools::RunSamples(samp);
    return s.ok() ? 0 : Fail(s);
  }
  if (prep->parsed()) {
    ds::Status s = ds::tools::RunPreprocess(pre);
    return s.ok() ? 0 : Fail(s);
  }
  if (add->parsed()) {
    ds::Status s = ds::tools::RunAddition(addition);
    return s.ok() ? 0 : Fail(s);
  }
  ds::StatusOr<std::string> line = ds::tools::DescribeTokenFile(info_path);
  if (!line.ok()) return Fail(line.status());
  std::printf("%s\n", line->c_str());
  return 0;
}
