// Slurm backend inputs: hostlist expansion, the allocation's environment, the srun command.
//
// Inside an allocation the launcher starts one agent per node with SrunCommand; each agent
// learns its node index and the node list from ReadSlurmEnv (evaluated inside the task, not
// in the batch script, where SLURM_NODEID is 0 for everyone). ExpandHostlist replaces
// `scontrol show hostnames`, which containers often lack. Reference: launcher.md 1.4.
// Pure functions, thread-safe.
//
//   DS_ASSIGN_OR_RETURN(SlurmEnv env, ReadSlurmEnv(&std::getenv));
//   std::string coordinator_host = env.nodes[0];
//   DS_ASSIGN_OR_RETURN(std::vector<std::string> argv, SrunCommand(options));
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

// Upper bound on the names one hostlist may expand to (a typo like `n[1-999999999]`
// must fail, not allocate gigabytes).
inline constexpr size_t kMaxHostlistHosts = 1 << 20;

// Expands Slurm's compressed hostlist syntax, in order, keeping duplicates:
//   `node[01-03,07],gpu-a[1-2]-ib,login1` -> node01 node02 node03 node07 gpu-a1-ib gpu-a2-ib
//   login1. Items are separated by commas outside brackets; a bracket holds comma-separated
//   numbers or `lo-hi` ranges, zero-padded to the width of `lo` (`[08-10]` -> 08 09 10);
//   several bracket groups in one name expand as a Cartesian product, leftmost slowest
//   (`r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2). Leading/trailing whitespace of `list` is
//   ignored. InvalidArgument for: an empty list or item (`a,,b`, trailing ','), unbalanced or
//   nested brackets, an empty bracket or range bound (`[]`, `[1,]`, `[-3]`), a non-digit in a
//   bracket, a reversed range (`[5-3]`), whitespace inside, more than kMaxHostlistHosts names.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

// What an agent started by srun needs to know about its allocation.
struct SlurmEnv {
  int node_id = 0;                 // SLURM_NODEID: this node's index in `nodes`
  int num_nodes = 0;               // SLURM_JOB_NUM_NODES (or SLURM_NNODES)
  std::vector<std::string> nodes;  // SLURM_JOB_NODELIST (or SLURM_NODELIST), expanded
  std::string job_id;              // SLURM_JOB_ID (or the older SLURM_JOBID)
};

// Reads the allocation from `getenv` (pass `&std::getenv`; tests pass a fake; it returns
// nullptr for unset variables). Errors:
//   - FailedPrecondition "not inside a Slurm allocation ..." when SLURM_JOB_ID, the node
//     count or the node list is unset or empty;
//   - FailedPrecondition when SLURM_NODEID is unset (outside a task started by srun);
//   - InvalidArgument when a number does not parse, the node count is < 1, the expanded list
//     has a different length than the node count, or node_id is not in [0, num_nodes).
StatusOr<SlurmEnv> ReadSlurmEnv(const std::function<const char*(const char*)>& getenv);

struct SrunOptions {
  std::string srun = "srun";  // program to run (a name looked up in PATH, or a path)
  int num_nodes = 0;          // --nodes and --ntasks; one agent per node (>= 1)
  bool overlap = false;       // --overlap: share the resources of a running step
  // Extra srun options placed before --export (the user's --launcher_args, already split).
  std::vector<std::string> extra_args;
  // Variables set for the agent, in order, on top of srun's whole environment (ALL).
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> argv;  // the agent program and its arguments
};

// Builds (does not run) `srun --nodes=N --ntasks=N --ntasks-per-node=1 --kill-on-bad-exit=1
// [--overlap] [extra_args...] --export=ALL[,K=V...] AGENT ARGS...` as an argv vector.
// --ntasks is explicit because srun inherits SLURM_NTASKS from the batch environment and
// would otherwise start several agents per node. srun splits --export at commas outside
// quotes; a value containing ',' is sent as `"K=V"`, which srun unquotes.
// InvalidArgument when num_nodes < 1, argv is empty or argv[0] is empty or starts with '-',
// an env name is not [A-Za-z_][A-Za-z0-9_]*, or a value contains a quote (' or "), which
// srun's --export cannot carry. Do not put secrets in `env`: the command line is visible in
// `ps` and in Slurm's job records; send them through the control plane instead.
StatusOr<std::vector<std::string>> SrunCommand(const SrunOptions& options);

}  // namespace ds::launcher
