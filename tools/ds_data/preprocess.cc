#include "tools/ds_data/preprocess.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/generate/chat_template.h"
#include "runtime/generate/tokenizer.h"
#include "tools/ds_data/chat_split.h"

namespace ds::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kMessages = "messages";  // conversations, rendered by the chat template
constexpr size_t kBatchPerWorker = 256;        // lines each worker tokenizes per batch

// Lines of a plain or gzip'd file (zlib reads both), with their numbers.
class LineReader {
 public:
  static StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return NotFoundError(path + ": cannot be opened");
    gzbuffer(f, 1 << 20);
    return std::unique_ptr<LineReader>(new LineReader(path, f));
  }
  ~LineReader() { gzclose(file_); }
  // The next line without its newline; false at the end. A read error is an error.
  StatusOr<bool> Next(std::string* line) {
    line->clear();
    char buf[1 << 16];
    while (gzgets(file_, buf, sizeof(buf)) != nullptr) {
      line->append(buf);
      if (!line->empty() && line->back() == '\n') {
        line->pop_back();
        ++number_;
        return true;
      }
    }
    int err = 0;
    const char* msg = gzerror(file_, &err);
    if (err != Z_OK && err != Z_STREAM_END)
      return DataLossError(path_ + ": line " + std::to_string(number_ + 1) + ": " + msg);
    if (line->empty()) return false;
    ++number_;  // a last line without a newline
    return true;
  }
  int64_t number() const { return number_; }
  int64_t compressed_offset() const { return gzoffset(file_); }

 private:
  LineReader(std::string path, gzFile f) : path_(std::move(path)), file_(f) {}
  std::string path_;
  gzFile file_;
  int64_t number_ = 0;
};

// The end-of-document id: tokenizer_config.json's eos_token beside the tokenizer, else the
// tokenizer.json special token "<|endoftext|>".
StatusOr<int64_t> ResolveEod(const std::string& tokenizer) {
  const size_t slash = tokenizer.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : tokenizer.substr(0, slash);
  std::string eos = "<|endoftext|>";
  std::ifstream config(dir + "/tokenizer_config.json");
  if (config) {
    std::stringstream text;
    text << config.rdbuf();
    DS_ASSIGN_OR_RETURN(Json c, ParseJson(text.str()));
    if (const Json* e = c.Find("eos_token")) {
      if (e->is_string()) eos = e->as_string();
      if (const Json* content = e->Find("content"); content && content->is_string())
        eos = content->as_string();
    }
  }
  std::ifstream in(tokenizer);
  if (tokenizer.size() >= 5 && tokenizer.substr(tokenizer.size() - 5) == ".json" && in) {
    std::stringstream text;
    text << in.rdbuf();
    DS_ASSIGN_OR_RETURN(Json t, ParseJson(text.str()));
    if (const Json* added = t.Find("added_tokens"); added && added->is_array())
      for (const Json& a : added->items())
        if (const Json* c = a.Find("content"); c && c->is_string() && c->as_string() == eos)
          if (const Json* id = a.Find("id")) return id->as_int();
  }
  return InvalidArgumentError(tokenizer + ": no special token \"" + eos +
                              "\" to end documents with; give --eod-id");
}

// One line's documents, one per key, or the reason it cannot be read.
struct Parsed {
  std::vector<std::vector<int64_t>> docs;
  std::string error;
};

// A conversation's prompt and answer (chat_split.h), tokenized.
Status AddConversation(const Json& messages, const generate::ChatTemplate& chat,
                       const generate::Tokenizer& tok, Parsed* p) {
  DS_ASSIGN_OR_RETURN(auto texts, SplitConversation(chat, messages.Dump()));
  for (const std::string& text : {texts.first, texts.second}) {
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text));
    p->docs.emplace_back(ids.begin(), ids.end());
  }
  return OkStatus();
}

Parsed ParseLine(const std::string& line, const PreprocessOptions& o,
                 const generate::Tokenizer& tok, int64_t eod, const generate::ChatTemplate* chat) {
  Parsed p;
  StatusOr<Json> j = ParseJson(line);
  if (!j.ok() || !j->is_object()) {
    p.error = "not a JSON object" + (j.ok() ? std::string() : ": " + j.status().message());
    return p;
  }
  for (const std::string& key : o.json_keys) {
    const Json* v = j->Find(key);
    if (key == kMessages && v) {
      Status added = AddConversation(*v, *chat, tok, &p);
      if (!added.ok()) p.error = std::string(added.message());
      if (!added.ok()) return p;
      continue;
    }
    if (!v || !v->is_string()) {
      p.error = v ? "\"" + key +
                        "\" is not a string (lists of sentences need sentence splitting, "
                        "which ds-data does not do)"
                  : "no key \"" + key + "\"";
      return p;
    }
    StatusOr<std::vector<int32_t>> ids = tok.Encode(v->as_string());
    if (!ids.ok()) {
      p.error = "\"" + key + "\": " + ids.status().message();
      return p;
    }
    std::vector<int64_t> doc(ids->begin(), ids->end());
    if (o.append_eod && !doc.empty()) doc.push_back(eod);  // empty documents get no EOD
    p.docs.push_back(std::move(doc));
  }
  return p;
}

// --chat-template, or the tokenizer's folder.
StatusOr<generate::ChatTemplate> LoadChatTemplate(const PreprocessOptions& o) {
  std::string path = o.chat_template;
  if (path.empty()) {
    const size_t slash = o.tokenizer.rfind('/');
    path = slash == std::string::npos ? "." : o.tokenizer.substr(0, slash);
  }
  auto t = generate::ChatTemplate::Load(path);
  if (!t.ok()) return t.status().WithPrefix("preprocess --json-keys messages");
  return t;
}

// Inputs, tokenizer and output directory, checked before any line is read.
Status CheckOptions(const PreprocessOptions& o) {
  if (o.inputs.empty()) return InvalidArgumentError("preprocess: no --input");
  if (o.json_keys.empty()) return InvalidArgumentError("preprocess: no --json-keys");
  if (o.workers < 1) return InvalidArgumentError("preprocess: --workers must be at least 1");
  struct stat st;
  for (const std::string& in : o.inputs)
    if (::stat(in.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return NotFoundError(in + ": no such input file");
  const size_t slash = o.output_prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : o.output_prefix.substr(0, slash);
  if (o.output_prefix.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return NotFoundError("--output-prefix " + o.output_prefix + ": the directory " + dir +
                         " does not exist");
  return OkStatus();
}

struct Progress {
  Clock::time_point start = Clock::now();
  int64_t docs = 0, tokens = 0, input_bytes = 0, read_bytes = 0, next_report = 0;

  void Report(bool last) {
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    const double pct = input_bytes ? 100.0 * read_bytes / input_bytes : 100.0;
    std::fprintf(stderr,
                 "%spreprocess: %lld documents, %.2fM tokens, %.2f%% of the input | %.0f docs/s, "
                 "%.0f tokens/s%s",
                 "\r", static_cast<long long>(docs), tokens / 1e6,
                 last ? 100.0 : std::min(pct, 99.99), s > 0 ? docs / s : 0.0,
                 s > 0 ? tokens / s : 0.0, last ? "\n" : "");
    std::fflush(stderr);
  }
};

// Tokenizes `lines` on `workers` threads; the documents come back in line order.
std::vector<Parsed> TokenizeBatch(const std::vector<std::string>& lines, const PreprocessOptions& o,
                                  const generate::Tokenizer& tok, int64_t eod,
                                  const generate::ChatTemplate* chat) {
  std::vector<Parsed> out(lines.size());
  const size_t per = (lines.size() + o.workers - 1) / o.workers;
  std::vector<std::thread> threads;
  for (size_t begin = 0; begin < lines.size(); begin += per)
    threads.emplace_back([&, begin] {
      for (size_t i = begin; i < std::min(lines.size(), begin + per); ++i)
        out[i] = ParseLine(lines[i], o, tok, eod, chat);
    });
  for (std::thread& t : threads) t.join();
  return out;
}

// Reads `path` batch by batch and appends its documents to the writers, in line order.
Status ProcessFile(const std::string& path, const PreprocessOptions& o,
                   const generate::Tokenizer& tok, int64_t eod, const generate::ChatTemplate* chat,
                   std::vector<std::unique_ptr<data::IndexedDatasetWriter>>& writers,
                   Progress* progress) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader, LineReader::Open(path));
  const int64_t done_before = progress->read_bytes;
  std::vector<std::string> lines;
  std::vector<int64_t> numbers;
  std::string line;
  for (bool more = true; more;) {
    lines.clear();
    numbers.clear();
    while (lines.size() < kBatchPerWorker * o.workers) {
      DS_ASSIGN_OR_RETURN(more, reader->Next(&line));
      if (!more) break;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
      lines.push_back(line);
      numbers.push_back(reader->number());
    }
    const std::vector<Parsed> parsed = TokenizeBatch(lines, o, tok, eod, chat);
    for (size_t i = 0; i < parsed.size(); ++i) {
      if (!parsed[i].error.empty())
        return InvalidArgumentError(path + ":" + std::to_string(numbers[i]) + ": " +
                                    parsed[i].error);
      for (size_t k = 0; k < writers.size(); ++k) {
        DS_RETURN_IF_ERROR(writers[k]->AddDocument(parsed[i].docs[k]));
        progress->tokens += static_cast<int64_t>(parsed[i].docs[k].size());
      }
      ++progress->docs;
    }
    progress->read_bytes = done_before + reader->compressed_offset();
    if (o.log_interval > 0 && progress->docs >= progress->next_report) {
      progress->Report(false);
      progress->next_report = progress->docs + o.log_interval;
    }
  }
  return OkStatus();
}

}  // namespace

Status RunPreprocess(const PreprocessOptions& o) {
  DS_RETURN_IF_ERROR(CheckOptions(o));
  DS_ASSIGN_OR_RETURN(std::unique_ptr<generate::Tokenizer> tok,
                      generate::LoadTokenizer(o.tokenizer));
  int64_t eod = o.eod_id;
  if (o.append_eod && eod < 0) {
    DS_ASSIGN_OR_RETURN(eod, ResolveEod(o.tokenizer));
  }
  const data::IndexedDtype dtype = data::IndexedDtypeForVocab(tok->vocab_size());
  std::unique_ptr<generate::ChatTemplate> chat;
  std::vector<std::unique_ptr<data::IndexedDatasetWriter>> writers;
  for (const std::string& key : o.json_keys) {
    if (key != kMessages) {
      writers.push_back(std::make_unique<data::IndexedDatasetWriter>(
          o.output_prefix + "_" + key + "_document", dtype));
      continue;
    }
    DS_ASSIGN_OR_RETURN(generate::ChatTemplate t, LoadChatTemplate(o));
    chat = std::make_unique<generate::ChatTemplate>(std::move(t));
    for (const char* part : {"prompt", "answer"})
      writers.push_back(std::make_unique<data::IndexedDatasetWriter>(
          o.output_prefix + "_" + key + "_" + part + "_document", dtype));
  }
  Progress progress;
  struct stat st;
  for (const std::string& in : o.inputs)
    if (::stat(in.c_str(), &st) == 0) progress.input_bytes += st.st_size;
  for (const std::string& in : o.inputs)
    DS_RETURN_IF_ERROR(ProcessFile(in, o, *tok, eod, chat.get(), writers, &progress));
  for (auto& w : writers) DS_RETURN_IF_ERROR(w->Finalize());
  progress.Report(true);
  std::printf("preprocess: %lld documents, %lld tokens (%s) into %s_{%s}_document.{bin,idx}\n",
              static_cast<long long>(progress.docs), static_cast<long long>(progress.tokens),
              data::IndexedDtypeName(dtype), o.output_prefix.c_str(),
              [&] {
                std::string keys;
                for (const std::string& k : o.json_keys) keys += (keys.empty() ? "" : ",") + k;
                return keys;
              }()
                  .c_str());
  return OkStatus();
}

}  // namespace ds::tools
