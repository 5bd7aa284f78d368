// ds-launch's job run: validates the config and the hostfile before anything starts,
// starts the coordinator in this process, one ds-agent per node through a backend (local
// fork, ssh, or srun), prints every rank's output as "[rank N] ..." with a live progress
// line, and exits 0 only when every rank finished; otherwise it names the failing rank,
// its host, its exit status and its last lines.
#pragma once

#include <string>

namespace ds::launcher {

struct LaunchOptions {
  std::string config;    // job YAML/JSON
  std::string hostfile;  // "" = default_hostfile if it exists, else this machine
  std::string default_hostfile = "/job/hostfile";  // DeepSpeed's
  std::string include, exclude;
  int num_nodes = -1, num_slots = -1;
  std::string backend = "local";  // local | ssh | pdsh (= ssh) | slurm
  std::string coordinator;        // bind address host:port ("" = 127.0.0.1:0 for local jobs)
  std::string master_addr;        // DeepSpeed's spelling of coordinator: master_addr:master_port
  int master_port = 0;
  int ssh_port = 0;
  std::string ssh_user, ssh_identity, ssh_config;
  int max_restarts = 0;
  double rdzv_timeout_s = 60;
  double heartbeat_s = 1.0;
  double node_timeout_s = 5.0;
  double grace_s = 5.0;
  bool detach = false;
  std::string worker;  // ds-worker path ("" = next to ds-launch)
  std::string agent;   // ds-agent path ("" = next to ds-launch)
  // Mutual TLS: the coordinator's certificate and key, the CA that signed it and every client's
  // certificate, and the clients' own certificate and key (default: tls_cert / tls_key, a
  // certificate for both ends); tls_server_name: what clients check the coordinator's
  // certificate against ("" = the coordinator's host).
  std::string tls_cert, tls_key, tls_ca, tls_client_cert, tls_client_key, tls_server_name;
  int tp = 0, pp = 0;  // override parallel.tensor / parallel.pipeline (0: the config's)
  // torchrun's --nnodes: "N" or "MIN:MAX" (elastic: when a node is lost the job goes on with the
  // others, down to MIN nodes, under --max_restarts); "" = every node given.
  std::string nnodes;
  double rdzv_last_call_s = 5;  // elastic rounds: wait this long for more nodes once MIN joined
  // parallel: auto: the memory of each node the layouts must fit, GiB (0: this machine's).
  double host_memory_gib = 0;
};

// Returns the process exit code: 0 success, 1 job failed, 2 bad input, 3 stopped.
int RunLaunch(const LaunchOptions& options);

}  // namespace ds::launcher
