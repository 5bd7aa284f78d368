// ds-agent: one per node; started by ds-launch (local fork, ssh, or srun).
//
//   ds-agent --coordinator 10.0.0.1:4000 --node_name host2 --slots 2 --token_stdin --watch_stdin
//
// The job token comes from --token_file or the first line of stdin, never the command line; with
// --tls_stdin the TLS CA, client certificate and key follow it there (launcher/tls_bundle.h).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "launcher/agent/agent.h"
#include "launcher/slurm.h"
#include "launcher/tls_bundle.h"
#include "runtime/base/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"ds-agent: the per-node agent of a ds-runtime job"};
  ds::launcher::AgentOptions o;
  bool token_stdin = false, slurm = false, tls_stdin = false;
  std::string token_file, log_level;
  int timeout_ms = 6000;
  app.add_option("--coordinator", o.coordinator, "coordinator host:port")->required();
  app.add_option("--node_name", o.node_name, "this node's name in the hostfile");
  app.add_option("--advertise_addr", o.advertise_addr, "address other nodes reach this one at");
  app.add_option("--slots", o.slots, "local ranks to run");
  app.add_option("--devices", o.devices, "GPU of each local rank, e.g. 1,3 (default: 0, 1, ...)")
      ->delimiter(',');
  app.add_option("--token_file", token_file, "file holding the job token");
  app.add_flag("--token_stdin", token_stdin, "read the job token from the first line of stdin");
  app.add_flag("--watch_stdin", o.watch_stdin, "stop everything when stdin closes (launcher gone)");
  app.add_flag("--slurm", slurm, "node name from SLURM_NODEID / SLURM_JOB_NODELIST");
  app.add_option("--tls_ca", o.tls_ca, "PEM CA of the coordinator's and the clients' certificates");
  app.add_option("--tls_cert", o.tls_cert, "PEM client certificate (mutual TLS)");
  app.add_option("--tls_key", o.tls_key, "PEM key of --tls_cert");
  app.add_option("--tls_server_name", o.tls_server_name,
                 "name checked against the coordinator's certificate");
  app.add_flag("--tls_stdin", tls_stdin,
               "read the TLS CA, certificate and key from stdin after the token (ds-launch)");
  app.add_option("--coordinator_timeout_ms", timeout_ms,
                 "stop when the coordinator is silent this long");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!log_level.empty()) ds::SetLogLevel(log_level);
  o.coordinator_timeout = std::chrono::milliseconds(timeout_ms);
  if (slurm) {
    auto env = ds::launcher::ReadSlurmEnv([](const char* k) { return std::getenv(k); });
    if (!env.ok()) {
      std::fprintf(stderr, "ds-agent: %s\n", env.status().ToString().c_str());
      return 2;
    }
    o.node_name = env->nodes[env->node_id];
  }
  if (!o.devices.empty() && static_cast<int>(o.devices.size()) != o.slots) {
    std::fprintf(stderr, "ds-agent: --devices names %zu GPU(s) for %d slot(s)\n", o.devices.size(),
                 o.slots);
    return 2;
  }
  if (o.node_name.empty()) {
    std::fprintf(stderr, "ds-agent: --node_name (or --slurm) is required\n");
    return 2;
  }
  if (token_stdin) {
    if (!std::getline(std::cin, o.token) || o.token.empty()) {
      std::fprintf(stderr, "ds-agent: no job token on stdin\n");
      return 2;
    }
  } else if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!std::getline(in, o.token) || o.token.empty()) {
      std::fprintf(stderr, "ds-agent: cannot read the job token from %s\n", token_file.c_str());
      return 2;
    }
    o.token_file = token_file;
  } else {
    std::fprintf(stderr, "ds-agent: the job token is needed (--token_file or --token_stdin)\n");
    return 2;
  }
  ds::launcher::TlsPaths tls;
  if (tls_stdin) {
    auto pems = ds::launcher::ReadTlsBundle(std::cin);
    auto files = pems.ok() ? ds::launcher::WritePrivateTls(*pems) : pems.status();
    if (!files.ok()) {
      std::fprintf(stderr, "ds-agent: %s\n", files.status().ToString().c_str());
      return 2;
    }
    tls = *files;
    o.tls_ca = tls.ca;
    o.tls_cert = tls.cert;
    o.tls_key = tls.key;
  }
  if (o.tls_cert.empty() != o.tls_key.empty() || (!o.tls_cert.empty() && o.tls_ca.empty())) {
    std::fprintf(stderr, "ds-agent: --tls_cert and --tls_key go together, with --tls_ca\n");
    return 2;
  }
  const int rc = ds::launcher::RunAgent(o);
  if (tls_stdin) ds::launcher::RemovePrivateTls(tls);
  return rc;
}
