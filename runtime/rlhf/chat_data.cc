#include "runtime/rlhf/chat_data.h"

#include <fstream>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/addition_task.h"
#include "runtime/plan/model_loader.h"

namespace ds::rlhf {

std::vector<PreferenceExample> ChatData::Part(int part) const {
  std::vector<const PreferenceDataset*> sets;
  for (const PreferenceDataset& d : datasets) sets.push_back(&d);
  return BlendPart(sets, split, part, config.seed);
}

StatusOr<std::vector<std::vector<int32_t>>> PtxRows(const ChatData& d) {
  const std::string& path = d.config.ppo.unsupervised_dataset;
  std::vector<std::vector<int32_t>> rows;
  if (path.empty()) return rows;
  std::ifstream in(path);
  if (!in) return InvalidArgumentError(path + ": cannot read ppo.unsupervised_dataset");
  std::vector<int32_t> all;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    auto tokens = d.encoding.encode(line);
    if (!tokens.ok()) return tokens.status().WithPrefix(path + ":" + std::to_string(n));
    all.insert(all.end(), tokens->begin(), tokens->end());
    all.insert(all.end(), d.encoding.end.begin(), d.encoding.end.end());
  }
  const int64_t seq = d.seq();
  for (size_t at = 0; at + seq <= all.size(); at += seq)
    rows.emplace_back(all.begin() + at, all.begin() + at + seq);
  if (rows.empty())
    return InvalidArgumentError(path + ": " + std::to_string(all.size()) +
                                " tokens; ptx needs at least one row of seq " +
                                std::to_string(seq));
  return rows;
}

StatusOr<ChatData> OpenChat(const ChatConfig& c) {
  ChatData d;
  d.config = c;
  for (const std::string& f : c.files) {
    DS_ASSIGN_OR_RETURN(PreferenceDataset set, ReadPreferenceJsonl(f));
    d.datasets.push_back(std::move(set));
  }
  auto split = ParseDataSplit(c.data_split);
  if (!split.ok()) return split.status().WithPrefix(c.source);
  d.split = *split;
  if (c.tokenizer == "addition") {
    d.encoding.encode = [](const std::string& s) { return data::AdditionStringToTokens(s); };
  } else {
    DS_ASSIGN_OR_RETURN(std::unique_ptr<generate::Tokenizer> t,
                        generate::LoadTokenizer(c.tokenizer));
    d.tokenizer = std::move(t);
    std::shared_ptr<generate::Tokenizer> t2 = d.tokenizer;
    d.encoding.encode = [t2](const std::string& s) { return t2->Encode(s); };
  }
  d.encoding.seq = d.seq();
  d.encoding.pad = c.tokenizer == "addition" ? data::kAdditionPad : 0;
  if (!c.end.empty()) {
    DS_ASSIGN_OR_RETURN(d.encoding.end, d.encoding.encode(c.end));
  }
  if (!c.stop.empty()) {
    DS_ASSIGN_OR_RETURN(d.stop, d.encoding.encode(c.stop));
  }
  return d;
}

StatusOr<std::unique_ptr<worker::Trainer>> ChatModel(
    const std::string& job, const std::string& head, int64_t seq, parallel::Communicator* comm,
    const std::string& weights, bool keep_missing, const std::string& checkpoints, bool pad_mask) {
  DS_ASSIGN_OR_RETURN(config::JobConfig config, config::LoadJobConfig(job));
  if (!checkpoints.empty()) config.checkpoint.dir = checkpoints;
  config.model.head = head;
  config.model.pad_mask = config.model.pad_mask || pad_mask;
  config.data.seq_len = static_cast<int>(seq);
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(config));
  DS_ASSIGN_OR_RETURN(std::unique_ptr<worker::Trainer> t,
                      worker::Trainer::Create(config, std::move(graph), comm));
  DS_RETURN_IF_ERROR(t->Initialize());
  if (!weights.empty()) DS_RETURN_IF_ERROR(t->LoadWeights(weights, keep_missing));
  return t;
}

}  // namespace ds::rlhf
