#include "launcher/launch/agent_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "launcher/process/process.h"
#include "launcher/slurm.h"
#include "launcher/slurm_allocation.h"
#include "launcher/ssh_command.h"
#include "runtime/base/status_macros.h"

extern char** environ;

namespace ds::launcher {
namespace {

std::vector<std::pair<std::string, std::string>> Environ() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

// Variables worth carrying to remote agents (ssh passes almost none).
std::vector<std::pair<std::string, std::string>> ForwardedEnv() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : Environ())
    if (k == "OPENBLAS_CORETYPE" || k == "SPDLOG_LEVEL" || k.rfind("NCCL_", 0) == 0 ||
        k.rfind("GLOO_", 0) == 0 || k == "LD_LIBRARY_PATH")
      out.emplace_back(k, v);
  return out;
}

}  // namespace

AgentBackend::AgentBackend(const AgentBackendOptions& options, CoordinatorState* state)
    : opt_(options), state_(state) {
  sup_ = std::make_unique<Supervisor>(
      [this](int id, bool is_stderr, std::string_view line) {
        std::fprintf(stderr, "[agent %s] %.*s\n", names_[id].c_str(), static_cast<int>(line.size()),
                     line.data());
      },
      [this](int id, ExitInfo info) { OnExit(id, std::move(info)); });
}

AgentBackend::~AgentBackend() {
  for (auto& [id, fd] : stdin_fds_) close(fd);
}

std::vector<std::string> AgentBackend::AgentArgv(const NodeSpec& node, bool slurm) const {
  std::vector<std::string> argv = {opt_.agent,
                                   "--coordinator",
                                   opt_.coordinator,
                                   "--token_stdin",
                                   "--watch_stdin",
                                   "--coordinator_timeout_ms",
                                   std::to_string(opt_.heartbeat_timeout_ms)};
  if (slurm) {
    argv.push_back("--slurm");
  } else {
    argv.insert(argv.end(), {"--node_name", node.name, "--slots", std::to_string(node.slots)});
    if (node.name.rfind("127.", 0) == 0) argv.insert(argv.end(), {"--advertise_addr", node.name});
  }
  if (!node.devices.empty()) {  // --include host:1,3: those GPUs, in that order
    std::string list;
    for (int d : node.devices) list += (list.empty() ? "" : ",") + std::to_string(d);
    argv.insert(argv.end(), {"--devices", list});
  }
  if (!opt_.tls_bundle.empty()) argv.push_back("--tls_stdin");
  if (opt_.probe_links) argv.push_back("--probe_links");
  if (!opt_.tls_server_name.empty())
    argv.insert(argv.end(), {"--tls_server_name", opt_.tls_server_name});
  return argv;
}

Status AgentBackend::Start(const std::vector<NodeSpec>& nodes) {
  DS_RETURN_IF_ERROR(sup_->Start());
  std::vector<std::vector<std::string>> commands;
  if (opt_.backend == "local") {
    for (const NodeSpec& n : nodes) {
      commands.push_back(AgentArgv(n, false));
      names_.push_back(n.name);
    }
  } else if (opt_.backend == "netns") {
    // Emulated nodes (tools/emulated_nodes.sh): each host is a network namespace of this
    // machine; its agent (and so its workers) runs inside it and advertises its address there.
    for (const NodeSpec& n : nodes) {
      std::vector<std::string> argv = {"ip", "netns", "exec", n.name};
      const std::vector<std::string> agent = AgentArgv(n, false);
      argv.insert(argv.end(), agent.begin(), agent.end());
      commands.push_back(argv);
      names_.push_back(n.name);
    }
  } else if (opt_.backend == "ssh") {
    for (const NodeSpec& n : nodes) {
      DS_ASSIGN_OR_RETURN(std::vector<std::string> argv, SshArgv(n));
      commands.push_back(argv);
      names_.push_back(n.name);
    }
  } else {
    DS_ASSIGN_OR_RETURN(std::vector<std::string> argv, SrunArgv(nodes));
    commands.push_back(argv);
    names_.push_back("srun");
  }
  for (size_t i = 0; i < commands.size(); ++i) DS_RETURN_IF_ERROR(SpawnAgent(i, commands[i]));
  return OkStatus();
}

// The ssh command that runs `node`'s agent there.
StatusOr<std::vector<std::string>> AgentBackend::SshArgv(const NodeSpec& node) const {
  SshOptions s;
  s.host = node.name;
  s.port = opt_.ssh_port;
  s.user = opt_.ssh_user;
  s.identity_file = opt_.ssh_identity;
  s.ssh_config_file = opt_.ssh_config;
  s.remote_env = ForwardedEnv();
  s.remote_argv = AgentArgv(node, false);
  return SshCommand(s);
}

// The one srun command that runs every node's agent.
StatusOr<std::vector<std::string>> AgentBackend::SrunArgv(
    const std::vector<NodeSpec>& nodes) const {
  // Every node's slots must agree: the agent learns its node from SLURM_NODEID.
  for (const NodeSpec& n : nodes)
    if (n.slots != nodes[0].slots || n.devices != nodes[0].devices)
      return InvalidArgumentError(
          "slurm: every node needs the same slot count and --include devices");
  SrunOptions s;
  s.num_nodes = static_cast<int>(nodes.size());
  s.extra_args = {"--input=all"};  // the token reaches every agent's stdin
  // Each agent's step gets its node's CPUs (the least any node has): its workers share them.
  auto alloc = ReadSlurmAllocation(&std::getenv);
  if (alloc.ok() && !alloc->cpus.empty())
    s.extra_args.push_back("--cpus-per-task=" + std::to_string(*std::min_element(
                                                    alloc->cpus.begin(), alloc->cpus.end())));
  s.env = ForwardedEnv();
  s.argv = AgentArgv(nodes[0], true);
  s.argv.insert(s.argv.end(), {"--slots", std::to_string(nodes[0].slots)});
  return SrunCommand(s);
}

// Spawns agent `id`, writes it the token and the TLS bundle, and hands it to the supervisor.
Status AgentBackend::SpawnAgent(size_t id, const std::vector<std::string>& argv) {
  SpawnOptions so;
  so.argv = argv;
  so.env = Environ();
  so.stdin_pipe = true;
  so.parent_death_signal = SIGTERM;  // a local agent stops its workers when we die
  DS_ASSIGN_OR_RETURN(Child child, Spawn(so));
  const std::string line = opt_.token + "\n" + opt_.tls_bundle;  // (ssh, srun: their channel)
  if (write(child.stdin_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    // EPIPE: the agent command (ssh to an unreachable host, say) already exited. The
    // supervisor reports its exit status and last lines through OnExit, which names the host.
    if (errno != EPIPE)
      return ErrnoToStatus(errno, "writing the token to the agent for " + names_[id]);
    close(child.stdin_fd);
  } else {
    stdin_fds_[static_cast<int>(id)] = child.stdin_fd;
  }
  child.stdin_fd = -1;
  return sup_->Add(static_cast<int>(id), std::move(child));
}

void AgentBackend::OnExit(int id, ExitInfo info) {
  const std::string& host = names_[id];
  if (!info.signaled && info.code_or_signal == 0) return;
  JobStatus s = state_->Snapshot();
  if (IsTerminal(s.phase)) return;
  bool joined = false;
  for (const NodeStatus& n : s.nodes)
    if (n.name == host && n.last_heartbeat_ms_ago >= 0) joined = true;
  std::fprintf(stderr, "ds-launch: the agent for %s exited (%s)%s\n", host.c_str(),
               info.ToString().c_str(),
               joined ? "; its node will be declared lost" : " before joining");
  for (const std::string& l : info.last_lines)
    std::fprintf(stderr, "    [agent %s] %s\n", host.c_str(), l.c_str());
  if (!joined) {
    std::string why = info.last_lines.empty() ? info.ToString() : info.last_lines.back();
    state_->Stop("the agent for " + host + " failed before joining: " + why).IgnoreError();
  }
}

void AgentBackend::WaitAndStop(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (sup_->num_tracked() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (auto& [id, fd] : stdin_fds_) close(fd);  // EOF: agents still running stop their workers
  stdin_fds_.clear();
  sup_->StopAll(std::chrono::milliseconds(2000)).IgnoreError();
}

}  // namespace ds::launcher
