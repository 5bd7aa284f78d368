#include "launcher/slurm_allocation.h"

#include <cctype>

#include "launcher/slurm.h"

namespace ds::launcher {
namespace {

// A positive decimal number filling `s`, else -1.
int64_t Positive(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  const int64_t v = std::stoll(s);
  return v >= 1 ? v : -1;
}

}  // namespace

StatusOr<std::vector<int>> ExpandPerNodeCounts(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  const auto bad = [&text](const std::string& why) {
    return InvalidArgumentError("per-node counts \"" + text + "\": " + why);
  };
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const size_t paren = item.find('(');
    const int64_t count = Positive(item.substr(0, paren));
    int64_t repeat = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')')
        return bad("\"" + item + "\" is not N or N(xM)");
      repeat = Positive(item.substr(paren + 2, item.size() - paren - 3));
    }
    if (count < 1 || repeat < 1) return bad("\"" + item + "\" is not N or N(xM)");
    if (out.size() + repeat > 1000000) return bad("more than a million nodes");
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(count));
    at = comma + 1;
  }
  return out;
}

StatusOr<SlurmAllocation> ReadSlurmAllocation(
    const std::function<const char*(const char*)>& getenv) {
  const std::string outside = "not inside a Slurm allocation: ";
  auto get = [&getenv](const char* a, const char* b = nullptr) -> std::string {
    const char* v = getenv(a);
    if ((!v || !*v) && b) v = getenv(b);
    return v ? v : "";
  };
  SlurmAllocation a;
  a.job_id = get("SLURM_JOB_ID", "SLURM_JOBID");
  const std::string list = get("SLURM_JOB_NODELIST", "SLURM_NODELIST");
  if (a.job_id.empty() || list.empty())
    return FailedPreconditionError(outside +
                                   "SLURM_JOB_ID / SLURM_JOB_NODELIST are not set (run "
                                   "ds-launch --launcher slurm from sbatch or salloc, or give "
                                   "a --hostfile)");
  const std::string tasks = get("SLURM_TASKS_PER_NODE");
  if (tasks.empty())
    return FailedPreconditionError("Slurm job " + a.job_id +
                                   ": SLURM_TASKS_PER_NODE is not set; ask for the ranks with "
                                   "--ntasks-per-node (one task per rank)");
  StatusOr<std::vector<std::string>> nodes = ExpandHostlist(list);
  if (!nodes.ok()) return nodes.status().WithPrefix("SLURM_JOB_NODELIST");
  a.nodes = std::move(nodes).value();
  StatusOr<std::vector<int>> per = ExpandPerNodeCounts(tasks);
  if (!per.ok()) return per.status().WithPrefix("SLURM_TASKS_PER_NODE");
  a.tasks = std::move(per).value();
  if (a.tasks.size() != a.nodes.size())
    return InvalidArgumentError(
        "SLURM_TASKS_PER_NODE=" + tasks + " counts " + std::to_string(a.tasks.size()) +
        " node(s), SLURM_JOB_NODELIST=" + list + " names " + std::to_string(a.nodes.size()));
  const std::string cpus = get("SLURM_JOB_CPUS_PER_NODE");
  if (!cpus.empty()) {
    StatusOr<std::vector<int>> c = ExpandPerNodeCounts(cpus);
    if (c.ok() && c->size() == a.nodes.size()) a.cpus = std::move(c).value();
  }
  return a;
}

}  // namespace ds::launcher
