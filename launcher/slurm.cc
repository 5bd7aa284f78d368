#include "launcher/slurm.h"

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Bracket numbers are kept to 18 digits so that they fit in uint64_t with room to spare.
constexpr size_t kMaxDigits = 18;

StatusOr<uint64_t> ParseBound(std::string_view text, const std::string& where) {
  if (text.empty()) return InvalidArgumentError(where + "empty number in brackets");
  if (text.size() > kMaxDigits) {
    return InvalidArgumentError(where + "number '" + std::string(text) + "' is too long");
  }
  for (char c : text) {
    if (!IsDigit(c)) {
      return InvalidArgumentError(where + "'" + std::string(text) +
                                  "' in brackets is not a number or lo-hi range");
    }
  }
  uint64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

std::string Padded(uint64_t v, size_t width) {
  std::string digits = std::to_string(v);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Expands the inside of one bracket group, e.g. "01-03,07" -> 01 02 03 07.
StatusOr<std::vector<std::string>> ExpandGroup(std::string_view group, const std::string& where) {
  if (group.empty()) return InvalidArgumentError(where + "empty brackets '[]'");
  std::vector<std::string> out;
  while (true) {
    size_t comma = group.find(',');
    std::string_view part = group.substr(0, comma);
    if (part.empty()) return InvalidArgumentError(where + "empty entry in brackets");
    size_t dash = part.find('-');
    std::string_view lo_text = part.substr(0, dash);
    DS_ASSIGN_OR_RETURN(uint64_t lo, ParseBound(lo_text, where));
    uint64_t hi = lo;
    if (dash != std::string_view::npos) {
      DS_ASSIGN_OR_RETURN(hi, ParseBound(part.substr(dash + 1), where));
    }
    if (hi < lo) {
      return InvalidArgumentError(where + "reversed range '" + std::string(part) + "'");
    }
    if (hi - lo >= kMaxHostlistHosts || out.size() + (hi - lo + 1) > kMaxHostlistHosts) {
      return InvalidArgumentError(where + "expands to more than " +
                                  std::to_string(kMaxHostlistHosts) + " names");
    }
    for (uint64_t v = lo; v <= hi; ++v) out.push_back(Padded(v, lo_text.size()));
    if (comma == std::string_view::npos) return out;
    group = group.substr(comma + 1);
  }
}

// Expands one top-level item (brackets balanced and not nested, checked by the caller),
// appending to `out`. Groups form a Cartesian product, leftmost group slowest.
Status ExpandItem(std::string_view item, const std::string& where, std::vector<std::string>* out) {
  std::vector<std::string> names = {""};
  while (!item.empty()) {
    size_t open = item.find('[');
    std::string_view literal = item.substr(0, open);
    for (std::string& n : names) n.append(literal);
    if (open == std::string_view::npos) break;
    size_t close = item.find(']', open);
    DS_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        ExpandGroup(item.substr(open + 1, close - open - 1), where));
    if (names.size() * values.size() + out->size() > kMaxHostlistHosts) {
      return InvalidArgumentError(where + "expands to more than " +
                                  std::to_string(kMaxHostlistHosts) + " names");
    }
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const std::string& n : names) {
      for (const std::string& v : values) next.push_back(n + v);
    }
    names = std::move(next);
    item = item.substr(close + 1);
  }
  for (std::string& n : names) out->push_back(std::move(n));
  return OkStatus();
}

// getenv wrapper: the first of `names` that is set and non-empty, and which one it was.
struct EnvValue {
  std::string value;
  const char* name = nullptr;  // nullptr when none is set
};

EnvValue GetFirst(const std::function<const char*(const char*)>& getenv,
                  std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = getenv(name);
    if (v != nullptr && v[0] != '\0') return EnvValue{v, name};
  }
  return EnvValue{};
}

StatusOr<int> ParseEnvInt(const EnvValue& v) {
  int n = 0;
  const char* end = v.value.data() + v.value.size();
  auto [ptr, ec] = std::from_chars(v.value.data(), end, n);
  if (ec != std::errc() || ptr != end) {
    return InvalidArgumentError(std::string(v.name) + "='" + v.value + "' is not an integer");
  }
  return n;
}

bool IsEnvName(const std::string& name) {
  if (name.empty() || IsDigit(name[0])) return false;
  for (char c : name) {
    bool ok = IsDigit(c) || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list) {
  const std::string where = "hostlist '" + list + "': ";
  size_t begin = 0, end = list.size();
  while (begin < end && IsBlank(list[begin])) ++begin;
  while (end > begin && IsBlank(list[end - 1])) --end;
  std::string_view text(list.data() + begin, end - begin);
  if (text.empty()) return InvalidArgumentError(where + "empty host list");

  std::vector<std::string> hosts;
  size_t item_start = 0;
  bool in_bracket = false;
  for (size_t i = 0; i <= text.size(); ++i) {
    char c = i < text.size() ? text[i] : ',';  // a virtual ',' ends the last item
    if (IsBlank(c)) return InvalidArgumentError(where + "whitespace inside the list");
    if (c == '[') {
      if (in_bracket) return InvalidArgumentError(where + "nested '['");
      in_bracket = true;
    } else if (c == ']') {
      if (!in_bracket) return InvalidArgumentError(where + "unbalanced ']'");
      in_bracket = false;
    } else if (c == ',' && !in_bracket) {
      std::string_view item = text.substr(item_start, i - item_start);
      if (item.empty()) return InvalidArgumentError(where + "empty item");
      DS_RETURN_IF_ERROR(ExpandItem(item, where, &hosts));
      item_start = i + 1;
    }
    if (i == text.size() && in_bracket) return InvalidArgumentError(where + "unbalanced '['");
  }
  return hosts;
}

StatusOr<SlurmEnv> ReadSlurmEnv(const std::function<const char*(const char*)>& getenv) {
  const std::string outside = "not inside a Slurm allocation: ";
  EnvValue job_id = GetFirst(getenv, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (job_id.name == nullptr) {
    return FailedPreconditionError(outside +
                                   "SLURM_JOB_ID is not set (start the job with "
                                   "sbatch or salloc, then launch inside it)");
  }
  EnvValue num_nodes = GetFirst(getenv, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"});
  if (num_nodes.name == nullptr) {
    return FailedPreconditionError(outside + "neither SLURM_JOB_NUM_NODES nor SLURM_NNODES is set");
  }
  EnvValue nodelist = GetFirst(getenv, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (nodelist.name == nullptr) {
    return FailedPreconditionError(outside +
                                   "neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set");
  }
  EnvValue node_id = GetFirst(getenv, {"SLURM_NODEID"});
  if (node_id.name == nullptr) {
    return FailedPreconditionError("SLURM_NODEID is not set in job " + job_id.value +
                                   ": run the agent as a task started by srun");
  }

  SlurmEnv env;
  env.job_id = job_id.value;
  DS_ASSIGN_OR_RETURN(env.num_nodes, ParseEnvInt(num_nodes));
  DS_ASSIGN_OR_RETURN(env.node_id, ParseEnvInt(node_id));
  if (env.num_nodes < 1) {
    return InvalidArgumentError(std::string(num_nodes.name) + "=" + num_nodes.value +
                                " must be at least 1");
  }
  StatusOr<std::vector<std::string>> nodes = ExpandHostlist(nodelist.value);
  if (!nodes.ok()) return nodes.status().WithPrefix(nodelist.name);
  env.nodes = std::move(nodes).value();
  if (static_cast<int>(env.nodes.size()) != env.num_nodes) {
    return InvalidArgumentError(std::string(nodelist.name) + "='" + nodelist.value + "' names " +
                                std::to_string(env.nodes.size()) + " node(s) but " +
                                num_nodes.name + "=" + num_nodes.value);
  }
  if (env.node_id < 0 || env.node_id >= env.num_nodes) {
    return InvalidArgumentError("SLURM_NODEID=" + node_id.value + " is outside [0, " +
                                std::to_string(env.num_nodes) + ")");
  }
  return env;
}

StatusOr<std::vector<std::string>> SrunCommand(const SrunOptions& options) {
  if (options.num_nodes < 1) {
    return InvalidArgumentError("srun: num_nodes must be at least 1, got " +
                                std::to_string(options.num_nodes));
  }
  if (options.argv.empty() || options.argv[0].empty()) {
    return InvalidArgumentError("srun: no agent program given");
  }
  if (options.argv[0][0] == '-') {
    return InvalidArgumentError("srun: agent program '" + options.argv[0] +
                                "' starts with '-' and would be read as an srun option");
  }
  std::string exports = "--export=ALL";
  for (const auto& [name, value] : options.env) {
    if (!IsEnvName(name)) {
      return InvalidArgumentError("srun: '" + name + "' is not a valid environment variable name");
    }
    if (value.find_first_of("'\"") != std::string::npos) {
      return InvalidArgumentError("srun: the value of " + name +
                                  " contains a quote, which srun --export cannot pass");
    }
    // Note: srun's --export parser splits at commas outside quotes and strips quotes that
    // enclose a whole item, so `"K=a,b"` arrives as K=a,b.
    const std::string item = name + "=" + value;
    exports += "," + (value.find(',') == std::string::npos ? item : "\"" + item + "\"");
  }

  const std::string n = std::to_string(options.num_nodes);
  std::vector<std::string> argv = {options.srun, "--nodes=" + n, "--ntasks=" + n,
                                   "--ntasks-per-node=1", "--kill-on-bad-exit=1"};
  if (options.overlap) argv.push_back("--overlap");
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  argv.push_back(exports);
  argv.insert(argv.end(), options.argv.begin(), options.argv.end());
  return argv;
}

}  // namespace ds::launcher
