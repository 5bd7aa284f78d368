#include "tools/ds_generate/generate_command.h"

#include <omp.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/byte_tokenizer.h"
#include "runtime/generate/generator.h"
#include "runtime/generate/hf_model.h"
#include "runtime/generate/tokenizer.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"

namespace ds::tools {
namespace {

using generate::Generator;

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;  // as given (text prompts)
  bool is_text = false;
};

StatusOr<std::vector<int32_t>> ParseIds(const std::string& s, const std::string& where) {
  std::vector<int32_t> ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return InvalidArgumentError(where + ": \"" + item + "\" is not a token id");
    }
  }
  return ids;
}

Status ReadPromptsFile(const std::string& path, std::vector<Prompt>* out) {
  std::ifstream in(path);
  if (!in) return NotFoundError("--prompts " + path + ": cannot open");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    auto doc = ParseJson(line);
    if (!doc.ok()) return doc.status().WithPrefix(where);
    Prompt p;
    if (const Json* text = doc->Find("prompt"); text && text->is_string()) {
      p.text = text->as_string();
      p.is_text = true;
    } else if (const Json* ids = doc->Find("ids"); ids && ids->is_array()) {
      for (const Json& v : ids->items()) {
        if (!v.is_int() || v.as_int() < 0)
          return InvalidArgumentError(where + ": \"ids\" holds a non-token value");
        p.ids.push_back(static_cast<int32_t>(v.as_int()));
      }
    } else {
      return InvalidArgumentError(where + ": a line needs \"prompt\" (text) or \"ids\" (tokens)");
    }
    out->push_back(std::move(p));
  }
  return OkStatus();
}

// The model and its Generator, and how text becomes its tokens: a tokenizer (tokenizer.json,
// a SentencePiece model), or bytes.
struct Loaded {
  generate::HfModel hf;
  std::unique_ptr<worker::Trainer> trainer;
  std::unique_ptr<Generator> gen;
  std::unique_ptr<generate::Tokenizer> bpe;
  bool bytes = false;
};

// --tokenizer, else the Hugging Face directory's own; checked against the model.
Status LoadTokenizer(const GenerateFlags& f, Loaded* m) {
  const std::string where = f.tokenizer.empty() ? f.hf : f.tokenizer;
  if (!f.tokenizer.empty()) {
    DS_ASSIGN_OR_RETURN(m->bpe, generate::LoadTokenizer(f.tokenizer));
  } else if (!f.hf.empty()) {
    DS_ASSIGN_OR_RETURN(m->bpe, generate::LoadDirTokenizer(f.hf));
  }
  if (m->bpe && m->bpe->vocab_size() > m->gen->vocab())
    return InvalidArgumentError(where + "'s tokenizer has " + std::to_string(m->bpe->vocab_size()) +
                                " tokens, more than the model's " +
                                std::to_string(m->gen->vocab()));
  return OkStatus();
}

StatusOr<Loaded> Load(const GenerateFlags& f) {
  Loaded m;
  const generate::GeneratorOptions o{f.batch, f.max_len};
  if (!f.hf.empty()) {
    DS_ASSIGN_OR_RETURN(m.hf, generate::LoadHfModel(f.hf));
    DS_ASSIGN_OR_RETURN(m.gen, Generator::Create(m.hf.graph, m.hf.params.get(), o));
    DS_RETURN_IF_ERROR(LoadTokenizer(f, &m));
    return m;
  }
  DS_ASSIGN_OR_RETURN(config::JobConfig c, config::LoadJobConfig(f.config));
  if (!f.checkpoint.empty()) c.checkpoint.load = f.checkpoint;
  if (c.checkpoint.load.empty()) c.checkpoint.load = "latest";
  if (c.train_iters <= 0) c.train_iters = 1;
  // Generation runs on this one rank whatever layout trained the model: its checkpoint holds
  // whole-parameter slices that load at any tp, pp, ep, sp and stage.
  c.parallel = config::ParallelConfig();
  c.pipeline.virtual_stages = 1;
  c.zero.offload_optimizer.device = config::OffloadDevice::kNone;
  c.zero.offload_param.device = config::OffloadDevice::kNone;
  c.device.type = config::DeviceType::kCpu;
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(c));
  DS_ASSIGN_OR_RETURN(m.trainer, worker::Trainer::Create(c, std::move(graph)));
  DS_RETURN_IF_ERROR(m.trainer->Initialize());
  if (m.trainer->step() == 0)
    return NotFoundError(f.config + ": no checkpoint to generate from (checkpoint.load \"" +
                         c.checkpoint.load + "\" under \"" + c.checkpoint.dir + "\")");
  DS_ASSIGN_OR_RETURN(m.gen, m.trainer->MakeGenerator(f.batch, f.max_len));
  // A byte-level vocabulary (ds-data tokenize): 256 tokens, padded a little at most.
  m.bytes = m.gen->vocab() >= data::kByteVocabSize && m.gen->vocab() <= 384;
  DS_RETURN_IF_ERROR(LoadTokenizer(f, &m));
  return m;
}

std::string JsonIds(const std::vector<int32_t>& ids) {
  Json a = Json::Array();
  for (int32_t t : ids) a.Append(Json::Int(t));
  return a.Dump();
}

// --prompt, --prompt_ids and --prompts, in that order.
StatusOr<std::vector<Prompt>> ReadPrompts(const GenerateFlags& f) {
  std::vector<Prompt> prompts;
  for (const std::string& t : f.prompts) prompts.push_back({{}, t, true});
  for (const std::string& s : f.prompt_ids) {
    DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(s, "--prompt_ids"));
    prompts.push_back({ids, "", false});
  }
  if (!f.prompts_file.empty()) DS_RETURN_IF_ERROR(ReadPromptsFile(f.prompts_file, &prompts));
  if (prompts.empty())
    return InvalidArgumentError("no prompt (--prompt, --prompt_ids or --prompts)");
  return prompts;
}

// Text prompts as the model's tokens: its tokenizer's, or bytes for a byte-level model.
Status Tokenize(const Loaded& m, std::vector<Prompt>* prompts) {
  for (Prompt& p : *prompts) {
    if (!p.is_text) continue;
    if (m.bpe) {
      DS_ASSIGN_OR_RETURN(p.ids, m.bpe->Encode(p.text));
      continue;
    }
    if (!m.bytes)
      return InvalidArgumentError(
          "text prompts need the model's tokenizer: give --tokenizer (a tokenizer.json or a "
          "SentencePiece .model) or --prompt_ids");
    for (uint32_t b : data::ByteEncode(p.text)) p.ids.push_back(static_cast<int32_t>(b));
  }
  return OkStatus();
}

// One prompt's completion: JSONL, its text, or its ids.
Status Write(const GenerateFlags& f, const Loaded& m, size_t index, const Prompt& p,
             const std::vector<int32_t>& ids, std::FILE* out) {
  const bool text = m.bpe || m.bytes;
  std::string completion;
  if (m.bpe) {
    DS_ASSIGN_OR_RETURN(completion, m.bpe->Decode(ids));
  } else if (m.bytes) {
    DS_ASSIGN_OR_RETURN(completion, data::ByteDecode(ids.data(), ids.size()));
  }
  if (f.jsonl)
    std::fprintf(out, "{\"index\": %zu, \"prompt_ids\": %s, \"ids\": %s%s%s}\n", index,
                 JsonIds(p.ids).c_str(), JsonIds(ids).c_str(), text ? ", \"text\": " : "",
                 text ? Json::String(completion).Dump().c_str() : "");
  else if (text)
    std::fprintf(out, "%s%s\n", p.is_text ? p.text.c_str() : "", completion.c_str());
  else
    std::fprintf(out, "%s -> %s\n", JsonIds(p.ids).c_str(), JsonIds(ids).c_str());
  return OkStatus();
}

void WriteSummary(const GenerateFlags& f, size_t prompts, const generate::GenerateResult& t,
                  std::FILE* out) {
  const double prefill_s = t.prefill_ms / 1e3, decode_s = t.decode_ms / 1e3;
  std::fprintf(
      out,
      f.jsonl ? "{\"summary\": {\"prompts\": %zu, \"prefill_tokens\": %lld, \"prefill_ms\": "
                "%.3f, \"prefill_tokens_per_s\": %.1f, \"decode_tokens\": %lld, "
                "\"decode_ms\": %.3f, \"decode_tokens_per_s\": %.1f}}\n"
              : "ds-generate: %zu prompts; prefill %lld tokens in %.1f ms (%.1f tokens/s); "
                "decode %lld tokens in %.1f ms (%.1f tokens/s)\n",
      prompts, static_cast<long long>(t.prefill_tokens), t.prefill_ms,
      prefill_s > 0 ? t.prefill_tokens / prefill_s : 0.0, static_cast<long long>(t.decode_tokens),
      t.decode_ms, decode_s > 0 ? t.decode_tokens / decode_s : 0.0);
}

}  // namespace

Status RunGenerate(const GenerateFlags& f, std::FILE* out) {
  if (f.hf.empty() == f.config.empty())
    return InvalidArgumentError("give one of --hf DIR or --config JOB");
  if (!f.checkpoint.empty() && f.config.empty())
    return InvalidArgumentError("--checkpoint needs --config JOB (the model it was trained as)");
  DS_RETURN_IF_ERROR(generate::CheckSamplingOptions(f.sampling));
  DS_ASSIGN_OR_RETURN(std::vector<Prompt> prompts, ReadPrompts(f));
  DS_ASSIGN_OR_RETURN(std::vector<int32_t> stops, ParseIds(f.stop_ids, "--stop_ids"));
  if (f.threads > 0) omp_set_num_threads(f.threads);
  DS_ASSIGN_OR_RETURN(Loaded m, Load(f));
  DS_RETURN_IF_ERROR(Tokenize(m, &prompts));
  generate::GenerateResult total;
  for (size_t start = 0; start < prompts.size(); start += f.batch) {
    generate::GenerateRequest r;
    r.max_new_tokens = f.max_new_tokens;
    r.stop_tokens = stops;
    r.sampling = f.sampling;
    r.first_sequence = static_cast<int64_t>(start);
    const size_t end = std::min(prompts.size(), start + static_cast<size_t>(f.batch));
    for (size_t i = start; i < end; ++i) r.prompts.push_back(prompts[i].ids);
    DS_ASSIGN_OR_RETURN(generate::GenerateResult g, m.gen->Generate(r));
    for (size_t i = start; i < end; ++i)
      DS_RETURN_IF_ERROR(Write(f, m, i, prompts[i], g.tokens[i - start], out));
    total.prefill_tokens += g.prefill_tokens;
    total.decode_tokens += g.decode_tokens;
    total.prefill_ms += g.prefill_ms;
    total.decode_ms += g.decode_ms;
  }
  WriteSummary(f, prompts.size(), total, out);
  return OkStatus();
}

}  // namespace ds::tools
