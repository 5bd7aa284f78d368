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

namespace {

// The command-line flags that are not AgentOptions fields.
struct AgentFlags {
  bool token_stdin = false, slurm = false, tls_stdin = false;
  std::string token_file, log_level;
  int timeout_ms = 6000;
};

// Registers ds-agent's flags: into `o` where AgentOptions has the field, else into `f`.
void AddAgentFlags(CLI::App& app, ds::launcher::AgentOptions* o, AgentFlags* f) {
  app.add_option("--coordinator", o->coordinator, "coordinator host:port")->required();
  app.add_option("--node_name", o->node_name, "this node's name in the hostfile");
  app.add_option("--advertise_addr", o->advertise_addr, "address other nodes reach this one at");
  app.add_option("--slots", o->slots, "local ranks to run");
  app.add_flag("--probe_links", o->probe_links,
               "before joining, measure the links to this node's and the next node's store "
               "(ds-launch asks for it for parallel: auto)");
  app.add_option("--devices", o->devices, "GPU of each local rank, e.g. 1,3 (default: 0, 1, ...)")
      ->delimiter(',');
  app.add_option("--token_file", f->token_file, "file holding the job token");
  app.add_flag("--token_stdin", f->token_stdin, "read the job token from the first line of stdin");
  app.add_flag("--watch_stdin", o->watch_stdin,
               "stop everything when stdin closes (launcher gone)");
  app.add_flag("--slurm", f->slurm, "node name from SLURM_NODEID / SLURM_JOB_NODELIST");
  app.add_option("--tls_ca", o->tls_ca,
                 "PEM CA of the coordinator's and the clients' certificates");
  app.add_option("--tls_cert", o->tls_cert, "PEM client certificate (mutual TLS)");
  app.add_option("--tls_key", o->tls_key, "PEM key of --tls_cert");
  app.add_option("--tls_server_name", o->tls_server_name,
                 "name checked against the coordinator's certificate");
  app.add_flag("--tls_stdin", f->tls_stdin,
               "read the TLS CA, certificate and key from stdin after the token (ds-launch)");
  app.add_option("--coordinator_timeout_ms", f->timeout_ms,
                 "stop when the coordinator is silent this long");
  app.add_option("--log-level", f->log_level, "trace|debug|info|warn|error");
}

// Takes the node's name from Slurm's environment with --slurm, then checks it and --devices;
// false after printing what is wrong.
bool ResolveNode(bool slurm, ds::launcher::AgentOptions* o) {
  if (slurm) {
    auto env = ds::launcher::ReadSlurmEnv([](const char* k) { return std::getenv(k); });
    if (!env.ok()) {
      std::fprintf(stderr, "ds-agent: %s\n", env.status().ToString().c_str());
      return false;
    }
    o->node_name = env->nodes[env->node_id];
  }
  if (!o->devices.empty() && static_cast<int>(o->devices.size()) != o->slots) {
    std::fprintf(stderr, "ds-agent: --devices names %zu GPU(s) for %d slot(s)\n", o->devices.size(),
                 o->slots);
    return false;
  }
  if (o->node_name.empty()) {
    std::fprintf(stderr, "ds-agent: --node_name (or --slurm) is required\n");
    return false;
  }
  return true;
}

// Reads the job token from stdin or --token_file into `o`; false after printing what is wrong.
bool ReadJobToken(const AgentFlags& f, ds::launcher::AgentOptions* o) {
  if (f.token_stdin) {
    if (!std::getline(std::cin, o->token) || o->token.empty()) {
      std::fprintf(stderr, "ds-agent: no job token on stdin\n");
      return false;
    }
  } else if (!f.token_file.empty()) {
    std::ifstream in(f.token_file);
    if (!std::getline(in, o->token) || o->token.empty()) {
      std::fprintf(stderr, "ds-agent: cannot read the job token from %s\n", f.token_file.c_str());
      return false;
    }
    o->token_file = f.token_file;
  } else {
    std::fprintf(stderr, "ds-agent: the job token is needed (--token_file or --token_stdin)\n");
    return false;
  }
  return true;
}

// --tls_stdin: writes the TLS bundle that follows the token on stdin to private files and
// points `o` at them; false after printing what is wrong.
bool ReadTlsFromStdin(ds::launcher::AgentOptions* o, ds::launcher::TlsPaths* tls) {
  auto pems = ds::launcher::ReadTlsBundle(std::cin);
  auto files = pems.ok() ? ds::launcher::WritePrivateTls(*pems) : pems.status();
  if (!files.ok()) {
    std::fprintf(stderr, "ds-agent: %s\n", files.status().ToString().c_str());
    return false;
  }
  *tls = *files;
  o->tls_ca = tls->ca;
  o->tls_cert = tls->cert;
  o->tls_key = tls->key;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds-agent: the per-node agent of a ds-runtime job"};
  ds::launcher::AgentOptions o;
  AgentFlags f;
  AddAgentFlags(app, &o, &f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!f.log_level.empty()) ds::SetLogLevel(f.log_level);
  o.coordinator_timeout = std::chrono::milliseconds(f.timeout_ms);
  if (!ResolveNode(f.slurm, &o)) return 2;
  if (!ReadJobToken(f, &o)) return 2;
  ds::launcher::TlsPaths tls;
  if (f.tls_stdin && !ReadTlsFromStdin(&o, &tls)) return 2;
  if (o.tls_cert.empty() != o.tls_key.empty() || (!o.tls_cert.empty() && o.tls_ca.empty())) {
    std::fprintf(stderr, "ds-agent: --tls_cert and --tls_key go together, with --tls_ca\n");
    return 2;
  }
  const int rc = ds::launcher::RunAgent(o);
  if (f.tls_stdin) ds::launcher::RemovePrivateTls(tls);
  return rc;
}
