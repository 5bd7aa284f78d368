// ds-agent: the per-node agent. Joins the coordinator's rendezvous round, starts one
// ds-worker per local slot with the rank environment (each in its own session and process
// group, with a parent-death signal, pinned to its share of the CPUs), forwards their
// output, heartbeats, reports every exit at once, sends the thread stacks of the ranks a
// DUMP_STACKS reply names (stack_dump.h), and stops and reaps all workers when the
// job stops, fails or restarts, when the coordinator stops answering, or when the launcher
// disappears (stdin EOF). It is the subreaper of its descendants: no process of the job
// outlives it.
//
//   AgentOptions o; o.coordinator = "127.0.0.1:4000"; o.node_name = "127.0.0.2"; o.slots = 2;
//   return RunAgent(o);   // process exit code
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ds::launcher {

struct AgentOptions {
  std::string coordinator;     // host:port
  std::string node_name;       // the host as the hostfile names it
  std::string advertise_addr;  // "" = the source address of our connection (coordinator's view)
  int slots = 1;
  std::vector<int> devices;  // GPU per local rank (--include host:1,3); empty = one each
  std::string token;         // the job token (from --token_file or stdin)
  std::string token_file;    // file the workers read the token from ("" = write a private one)
  bool watch_stdin = false;  // stdin EOF = the launcher is gone: stop everything
  // Mutual TLS ("" = plaintext): the CA of the coordinator's (and our) certificate, the client
  // certificate and key this agent and its workers present, and the name the coordinator's
  // certificate is checked against ("" = the host of `coordinator`).
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  // Before the first Join: the launch's link probes (agent_probes.h), for parallel: auto.
  bool probe_links = false;
  // No successful heartbeat for this long = the coordinator is gone: stop and exit.
  std::chrono::milliseconds coordinator_timeout{6000};
};

// Runs until the job ends; returns the process exit code (0 after a clean SHUTDOWN).
int RunAgent(const AgentOptions& options);

}  // namespace ds::launcher
