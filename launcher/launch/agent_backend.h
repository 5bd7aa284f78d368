// Starts one ds-agent per node and watches them: `local` forks them here (hosts 127.0.0.x
// count as distinct nodes), `ssh` runs one ssh per node (BatchMode, ConnectTimeout, the
// agent by absolute path, environment explicit), `slurm` runs one srun for all nodes. The
// job token goes to each agent over its stdin, never on a command line; keeping stdin open
// lets agents notice when the launcher is gone (EOF). An agent that fails before its node
// joined (unreachable host, missing binary) stops the job at once, naming the host.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_state.h"
#include "launcher/process/supervisor.h"

namespace ds::launcher {

struct AgentBackendOptions {
  std::string backend = "local";
  std::string agent;        // absolute path of ds-agent (on every node)
  std::string coordinator;  // address agents dial
  std::string token;
  int ssh_port = 0;
  std::string ssh_user, ssh_identity, ssh_config;
  std::string tls_bundle;            // mutual TLS: EncodeTlsBundle's, written after the token
  std::string tls_server_name;       // passed to the agents ("" = the coordinator's host)
  int heartbeat_timeout_ms = 10000;  // agents stop when the coordinator is silent this long
  bool probe_links = false;          // agents measure the links first (link_probes.h)
};

class AgentBackend {
 public:
  AgentBackend(const AgentBackendOptions& options, CoordinatorState* state);
  ~AgentBackend();

  Status Start(const std::vector<NodeSpec>& nodes);
  // Waits (bounded) for every agent to exit, then stops what is left and closes stdin.
  void WaitAndStop(std::chrono::milliseconds timeout);

 private:
  void OnExit(int id, ExitInfo info);
  std::vector<std::string> AgentArgv(const NodeSpec& node, bool slurm) const;
  // The ssh command that runs `node`'s agent there, with ForwardedEnv().
  StatusOr<std::vector<std::string>> SshArgv(const NodeSpec& node) const;
  // The one srun command that runs every node's agent; the nodes' slots must agree.
  StatusOr<std::vector<std::string>> SrunArgv(const std::vector<NodeSpec>& nodes) const;
  // Spawns agent `id` (`argv`), hands it the token and the TLS bundle, and supervises it.
  Status SpawnAgent(size_t id, const std::vector<std::string>& argv);

  const AgentBackendOptions opt_;
  CoordinatorState* state_;
  std::vector<std::string> names_;  // id -> host ("srun" for slurm)
  std::map<int, int> stdin_fds_;
  std::unique_ptr<Supervisor> sup_;
};

}  // namespace ds::launcher
