// What ds-launch reads inside a Slurm allocation (sbatch or salloc) to lay out a job without a
// hostfile: the nodes (SLURM_JOB_NODELIST), the ranks per node (SLURM_TASKS_PER_NODE: the
// --ntasks-per-node the user asked for) and the CPUs per node (SLURM_JOB_CPUS_PER_NODE), so
// each node's agent gets a step with that node's CPUs for its workers. Pure, thread-safe.
//
//   DS_ASSIGN_OR_RETURN(SlurmAllocation a, ReadSlurmAllocation(&std::getenv));
//   a.nodes = {"n1", "n2"}; a.tasks = {2, 2}; a.cpus = {2, 2};
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

// Slurm's per-node counts: "2(x3),1" -> {2, 2, 2, 1}. InvalidArgument naming the text for
// anything else (an empty item, a count below 1, a bad repeat).
StatusOr<std::vector<int>> ExpandPerNodeCounts(const std::string& text);

struct SlurmAllocation {
  std::string job_id;
  std::vector<std::string> nodes;
  std::vector<int> tasks;  // per node
  std::vector<int> cpus;   // per node (empty when Slurm does not say)
};

// FailedPrecondition "not inside a Slurm allocation" when SLURM_JOB_ID or the node list is
// unset (or SLURM_TASKS_PER_NODE: the allocation was made without tasks); InvalidArgument
// when the lists disagree on the node count.
StatusOr<SlurmAllocation> ReadSlurmAllocation(
    const std::function<const char*(const char*)>& getenv);

}  // namespace ds::launcher
