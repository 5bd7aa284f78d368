#include "runtime/hf/hf_lora.h"

#include <algorithm>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/hf/hf_tensor_map.h"

namespace ds::hf {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A linear module of the checkpoint: its path, our node and rows.
struct Module {
  std::string path;
  int node = -1;
  int64_t begin = 0, end = 0;
  std::string refused;  // why it cannot take an adapter (empty: it can)
};

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool IsHead(const NodeInfo& n) { return n.name == "logits" || n.name == "values"; }

StatusOr<std::vector<Module>> LinearModules(const ModelSpec& spec, const Graph& graph) {
  DS_ASSIGN_OR_RETURN(HfTensorMap map, MapHfTensors(spec, graph));
  DS_ASSIGN_OR_RETURN(std::vector<HfOutput> outputs, HfOutputs(map));
  std::map<int, int> linear_of;  // weight tensor -> the linear node reading it
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const NodeInfo& n = graph.nodes[i];
    if (n.op == "linear" && n.inputs.size() >= 2 && !IsHead(n))
      linear_of[n.inputs[1]] = static_cast<int>(i);
  }
  std::vector<Module> modules;
  for (const HfOutput& o : outputs) {
    if (!EndsWith(o.name, ".weight") || o.shape.size() != 2) continue;
    Module m;
    m.path = o.name.substr(0, o.name.size() - 7);
    const int tensor = graph.FindTensor(map.params[o.pieces[0].param].ours);
    auto it = linear_of.find(tensor);
    if (it == linear_of.end()) continue;  // an embedding, or the head
    m.node = it->second;
    m.begin = o.pieces[0].begin;
    m.end = o.pieces[0].end;
    if (o.pieces.size() > 1)
      m.refused = "its weight is split over " + std::to_string(o.pieces.size()) +
                  " of our parameters; name them instead";
    if (o.kind == HfSource::Kind::kHeadInterleaved)
      m.refused = "its rows are interleaved per head in the checkpoint";
    modules.push_back(std::move(m));
  }
  std::sort(modules.begin(), modules.end(), [](const Module& a, const Module& b) {
    return a.node != b.node ? a.node < b.node : a.begin < b.begin;
  });
  return modules;
}

bool Picks(const LoraSelection& s, const std::vector<std::string>& names, const std::regex* re,
           const std::string& path) {
  if (!s.substring.empty()) return path.find(s.substring) != std::string::npos;
  if (re) return std::regex_match(path, *re);
  for (const std::string& n : names)
    if (n == "all-linear" || path == n || EndsWith(path, "." + n)) return true;
  return false;
}

}  // namespace

std::vector<std::string> DefaultLoraModules(const std::string& family) {
  if (family == "gpt2") return {"c_attn"};
  if (family == "gpt_neox") return {"query_key_value"};
  if (family == "phi3") return {};
  return {"q_proj", "v_proj"};
}

StatusOr<std::vector<LoraTarget>> FindLoraTargets(const ModelSpec& spec, const Graph& graph,
                                                  const LoraSelection& selection) {
  std::vector<std::string> names = selection.modules;
  if (names.empty() && selection.regex.empty() && selection.substring.empty()) {
    names = DefaultLoraModules(spec.family);
    if (names.empty())
      return InvalidArgumentError("LoRA: " + spec.family +
                                  " has no default target modules (as in PEFT): name them in "
                                  "model.lora.target_modules");
  }
  std::unique_ptr<std::regex> re;
  if (!selection.regex.empty()) {
    try {
      re = std::make_unique<std::regex>(selection.regex);
    } catch (const std::regex_error& e) {
      return InvalidArgumentError("LoRA: target_modules \"" + selection.regex +
                                  "\" is not a regular expression: " + e.what());
    }
  }
  DS_ASSIGN_OR_RETURN(std::vector<Module> modules, LinearModules(spec, graph));
  std::vector<LoraTarget> targets;
  std::set<std::string> kinds;  // the modules' last names (q_proj, fc1, ...)
  for (const Module& m : modules) {
    kinds.insert(m.path.substr(m.path.rfind('.') + 1));
    if (!Picks(selection, names, re.get(), m.path)) continue;
    if (!m.refused.empty())
      return InvalidArgumentError("LoRA: module " + m.path +
                                  " cannot take an adapter: " + m.refused);
    targets.push_back({m.node, m.begin, m.end, m.path});
  }
  if (targets.empty()) {
    std::string asked = selection.substring.empty() ? selection.regex : selection.substring;
    for (const std::string& n : names) asked += (asked.empty() ? "" : ", ") + n;
    return InvalidArgumentError("LoRA: the target modules (" + asked +
                                ") match no linear layer of this " + spec.family +
                                " model; its linear modules are named " + Join(kinds));
  }
  return targets;
}

}  // namespace ds::hf
