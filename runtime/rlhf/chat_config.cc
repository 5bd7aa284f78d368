#include "runtime/rlhf/chat_config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/rlhf/preference_data.h"

namespace ds::rlhf {
namespace {

// Strict reading of one map: every key read is known; Finish names the others.
class Block {
 public:
  Block(const YAML::Node& node, std::string where, std::string* error)
      : node_(node), where_(std::move(where)), error_(error) {
    if (node_ && !node_.IsMap()) Fail("", "must be a map");
  }
  template <typename T>
  void Get(const char* key, T* out) {
    known_.insert(key);
    if (!node_ || !node_[key]) return;
    try {
      *out = node_[key].as<T>();
    } catch (const YAML::Exception&) {
      Fail(key, "has the wrong type");
    }
  }
  YAML::Node Child(const char* key) {
    known_.insert(key);
    return node_ ? node_[key] : YAML::Node();
  }
  void Require(bool ok, const char* key, const std::string& what) {
    if (!ok) Fail(key, what);
  }
  void Finish() {
    if (!node_ || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string k = kv.first.as<std::string>();
      if (!known_.count(k)) Fail(k.c_str(), "is not a ds-chat setting");
    }
  }
  void Fail(const std::string& key, const std::string& what) {
    if (error_->empty()) error_->assign(where_ + (key.empty() ? "" : key) + " " + what);
  }

 private:
  YAML::Node node_;
  std::string where_;
  std::string* error_;
  std::set<std::string> known_;
};

std::string Resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return dir + path;
}

void ReadPpo(Block& root, const std::string& dir, ChatPpo* p, std::string* error) {
  Block b(root.Child("ppo"), "ppo.", error);
  b.Get("actor", &p->actor);
  b.Get("critic", &p->critic);
  p->actor = Resolve(dir, p->actor);
  p->critic = Resolve(dir, p->critic);
  b.Get("iterations", &p->iterations);
  b.Get("kl_ctl", &p->ppo.kl_ctl);
  b.Get("clip_reward_value", &p->ppo.clip_reward_value);
  b.Get("cliprange", &p->ppo.cliprange);
  b.Get("cliprange_value", &p->ppo.cliprange_value);
  b.Get("gamma", &p->ppo.gamma);
  b.Get("lam", &p->ppo.lam);
  b.Get("generation_batches", &p->generation_batches);
  b.Get("ppo_epochs", &p->ppo_epochs);
  b.Get("enable_ema", &p->enable_ema);
  b.Get("temperature", &p->temperature);
  b.Get("eval_prompts", &p->eval_prompts);
  b.Get("save_interval", &p->save_interval);
  b.Get("resume", &p->resume);
  b.Get("unsupervised_dataset", &p->unsupervised_dataset);
  p->unsupervised_dataset = Resolve(dir, p->unsupervised_dataset);
  b.Get("unsup_coef", &p->unsup_coef);
  b.Require(p->unsup_coef > 0, "unsup_coef", "must be > 0");
  b.Require(p->save_interval >= 0, "save_interval", "must be >= 0");
  b.Require(p->eval_prompts >= 0, "eval_prompts", "must be >= 0");
  b.Require(p->generation_batches >= 1 && p->ppo_epochs >= 1, "ppo_epochs",
            "and generation_batches must be >= 1");
  b.Require(p->temperature > 0, "temperature", "must be > 0");
  b.Finish();
}

// `stop_key`: the step's early-stop key (null: it has none).
void ReadStep(Block& root, const char* name, const std::string& dir, ChatStep* s,
              const char* stop_key, std::string* error) {
  Block b(root.Child(name), std::string(name) + ".", error);
  b.Get("job", &s->job);
  s->job = Resolve(dir, s->job);
  b.Get("steps", &s->steps);
  b.Require(s->steps >= 0, "steps", "must be >= 0");
  if (stop_key) {
    b.Get(stop_key, &s->stop_at);
    b.Get("eval_interval", &s->eval_interval);
    b.Require(s->stop_at >= 0 && s->stop_at <= 1, stop_key,
              "must be a share in [0, 1] (0: no early stop)");
    b.Require(s->eval_interval >= 1, "eval_interval", "must be >= 1");
  }
  b.Finish();
}

}  // namespace

StatusOr<ChatConfig> LoadChatConfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  ChatConfig c;
  c.source = path;
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string error;
  Block r(root, "", &error);
  Block d(r.Child("data"), "data.", &error);
  d.Get("files", &c.files);
  for (std::string& f : c.files) f = Resolve(dir, f);
  d.Get("data_split", &c.data_split);
  d.Get("seed", &c.seed);
  d.Require(!c.files.empty(), "files", "must name at least one JSONL dataset");
  d.Finish();
  r.Get("tokenizer", &c.tokenizer);
  if (c.tokenizer != "addition") c.tokenizer = Resolve(dir, c.tokenizer);
  r.Get("prompt_len", &c.prompt_len);
  r.Get("answer_len", &c.answer_len);
  r.Require(c.prompt_len >= 1 && c.answer_len >= 1, "prompt_len", "and answer_len must be >= 1");
  r.Get("end", &c.end);
  r.Get("stop", &c.stop);
  r.Get("output", &c.output);
  c.output = Resolve(dir, c.output);
  ReadStep(r, "sft", dir, &c.sft, "stop_at_exact_match", &error);
  ReadStep(r, "reward", dir, &c.reward, "stop_at_pairwise_accuracy", &error);
  ReadPpo(r, dir, &c.ppo, &error);
  r.Finish();
  if (!error.empty()) return InvalidArgumentError(path + ": " + error);
  DS_RETURN_IF_ERROR(ParseDataSplit(c.data_split).status().WithPrefix(path));
  for (const std::string* job : {&c.sft.job, &c.reward.job, &c.ppo.actor, &c.ppo.critic})
    if (job->empty() || !std::ifstream(*job))
      return InvalidArgumentError(path + ": job file \"" + *job + "\" cannot be read (sft.job, " +
                                  "reward.job, ppo.actor and ppo.critic name each model's job)");
  const std::string& ptx = c.ppo.unsupervised_dataset;
  if (!ptx.empty() && !std::ifstream(ptx))
    return InvalidArgumentError(path + ": ppo.unsupervised_dataset \"" + ptx +
                                "\" cannot be read (ptx: a text file, one document per line)");
  return c;
}

}  // namespace ds::rlhf
