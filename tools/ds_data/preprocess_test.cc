// ds-data preprocess against Megatron: the golden .bin/.idx were written by megatron-core's
// IndexedDatasetBuilder from the `tokenizers` library's ids of the same JSON lines
// (tools/megatron_preprocess_golden.py); plain, gzip'd, split and multi-threaded inputs must
// give the same bytes, and bad input stops with the file and line, leaving no dataset.
#include "tools/ds_data/preprocess.h"

#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/data/indexed_dataset.h"
#include "runtime/data/test_files.h"
#include "runtime/generate/jinja.h"

namespace ds::tools {
namespace {

const std::string kData = "runtime/data/testdata/megatron/";
const std::string kTokenizer = "runtime/generate/testdata/tokenizer.json";

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out(1);
  for (uint8_t c : testing::ReadBytes(path)) {
    if (c == '\n')
      out.emplace_back();
    else
      out.back().push_back(static_cast<char>(c));
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

void WriteText(const std::string& path, const std::vector<std::string>& lines, bool gz) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  if (!gz) {
    REQUIRE(testing::WriteBytes(path, std::vector<uint8_t>(all.begin(), all.end())));
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, all.data(), static_cast<unsigned>(all.size())) ==
          static_cast<int>(all.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

PreprocessOptions Options(std::vector<std::string> inputs, const std::string& out) {
  PreprocessOptions o;
  o.inputs = std::move(inputs);
  o.tokenizer = kTokenizer;
  o.output_prefix = testing::TempPath(out);
  o.append_eod = true;
  o.log_interval = 0;
  return o;
}

void ExpectGolden(const PreprocessOptions& o) {
  REQUIRE(RunPreprocess(o).ok());
  const std::string ours = o.output_prefix + "_text_document";
  CHECK(testing::ReadBytes(ours + ".bin") ==
        testing::ReadBytes(kData + "preprocess_text_document.bin"));
  CHECK(testing::ReadBytes(ours + ".idx") ==
        testing::ReadBytes(kData + "preprocess_text_document.idx"));
}

TEST_CASE("preprocess writes Megatron's bytes for the same JSON lines", "[ds_data][megatron]") {
  ExpectGolden(Options({kData + "preprocess.jsonl"}, "plain"));

  const std::vector<std::string> lines = Lines(kData + "preprocess.jsonl");
  const std::string gz = testing::TempPath("in.jsonl.gz");
  WriteText(gz, lines, true);
  PreprocessOptions threaded = Options({gz}, "gz");
  threaded.workers = 3;
  ExpectGolden(threaded);

  // The same lines over two files, one of them gzip'd: documents follow the files' order.
  const std::string a = testing::TempPath("a.jsonl"), b = testing::TempPath("b.jsonl.gz");
  WriteText(a, {lines.begin(), lines.begin() + 2}, false);
  WriteText(b, {lines.begin() + 2, lines.end()}, true);
  ExpectGolden(Options({a, b}, "split"));
}

void ExpectRefused(const std::vector<std::string>& lines, const std::string& what) {
  const std::string in = testing::TempPath("bad.jsonl");
  WriteText(in, lines, false);
  const PreprocessOptions o = Options({in}, "bad");
  const Status s = RunPreprocess(o);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find(in + what) != std::string::npos);
  CHECK(testing::ReadBytes(o.output_prefix + "_text_document.bin").empty());
  CHECK(testing::ReadBytes(o.output_prefix + "_text_document.idx").empty());
}

TEST_CASE("preprocess stops at a bad line naming file and line, writing nothing",
          "[ds_data][megatron]") {
  ExpectRefused({R"({"text": "fine"})", R"({"body": "no text key"})"}, ":2: no key \"text\"");
  ExpectRefused({R"({"text": "fine"})", "", R"({"text": ["a", "list"]})"},
                ":3: \"text\" is not a string");
  ExpectRefused({R"({"text": "fine"})", R"({"text": "cut)"}, ":2: not a JSON object");
  ExpectRefused({"[1, 2]"}, ":1: not a JSON object");
}

// Conversations ({"messages": [...]}) with a chat template: every prompt and answer equal the
// `tokenizers` package's ids of transformers' renderings (tools/chat_template_golden.py).
TEST_CASE("preprocess cuts conversations into prompts and answers by the chat template",
          "[ds_data][chat]") {
  const std::string dir = "runtime/generate/testdata/chat_templates/";
  const std::vector<uint8_t> bytes = testing::ReadBytes(dir + "golden.json");
  auto golden = generate::jinja::FromJson(std::string(bytes.begin(), bytes.end()));
  REQUIRE(golden.ok());
  const generate::jinja::Value sft = golden->Get("sft");
  REQUIRE(sft.list->size() == 6);
  for (size_t k = 0; k < sft.list->size(); k += 2) {  // each template's two conversations
    const generate::jinja::Value& a = (*sft.list)[k];
    INFO(a.Get("template").s);
    const std::string input = testing::TempPath("chat.jsonl");
    WriteText(
        input,
        {"{\"messages\": " + generate::jinja::ToJson(a.Get("messages")) + "}",
         "{\"messages\": " + generate::jinja::ToJson((*sft.list)[k + 1].Get("messages")) + "}"},
        false);
    PreprocessOptions o = Options({input}, "chat");
    o.json_keys = {"messages"};
    // A tokenizer folder as transformers saves one: the template beside tokenizer_config.json's
    // special tokens.
    const std::string folder = testing::TempPath("tokenizer_" + std::to_string(k));
    REQUIRE(std::system(("mkdir -p " + folder + " && cp " + dir + a.Get("template").s + " " +
                         folder + "/chat_template.jinja")
                            .c_str()) == 0);
    const std::string config = R"({"bos_token": "<s>", "eos_token": "</s>"})";
    REQUIRE(testing::WriteBytes(folder + "/tokenizer_config.json",
                                std::vector<uint8_t>(config.begin(), config.end())));
    o.chat_template = folder;
    const Status run = RunPreprocess(o);
    if (!run.ok()) FAIL(run.ToString());
    for (const char* part : {"prompt", "answer"}) {
      auto d = data::IndexedDataset::Open(o.output_prefix + "_messages_" + part + "_document");
      REQUIRE(d.ok());
      REQUIRE(d->sequences() == 2);
      for (int64_t i = 0; i < 2; ++i) {
        std::vector<int64_t> ids;
        REQUIRE(d->Tokens(i, &ids).ok());
        std::vector<int64_t> want;
        for (const auto& v : *(*sft.list)[k + i].Get(part).list) want.push_back(v.i);
        CHECK(ids == want);
      }
    }
  }
  const std::string bad = testing::TempPath("bad_chat.jsonl");
  WriteText(bad, {R"({"messages": [{"role": "user", "content": "no answer"}]})"}, false);
  PreprocessOptions o = Options({bad}, "bad_chat");
  o.json_keys = {"messages"};
  o.chat_template = dir + "llama3.jinja";
  const Status s = RunPreprocess(o);
  CHECK(s.message().find("bad_chat.jsonl:1: the conversation ends with a \"user\" message") !=
        std::string::npos);
  o.chat_template = testing::TempPath("no_template_here");
  CHECK(RunPreprocess(o).message().find("no chat template") != std::string::npos);
}

TEST_CASE("preprocess checks its inputs before reading", "[ds_data][megatron]") {
  PreprocessOptions o = Options({testing::TempPath("missing.jsonl")}, "missing");
  CHECK(RunPreprocess(o).code() == StatusCode::kNotFound);
  o = Options({kData + "preprocess.jsonl"}, "x");
  o.output_prefix = testing::TempPath("no/such/dir/x");
  const Status s = RunPreprocess(o);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message().find("no/such/dir does not exist") != std::string::npos);
  o = Options({kData + "preprocess.jsonl"}, "x");
  o.workers = 0;
  CHECK(RunPreprocess(o).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds::tools
