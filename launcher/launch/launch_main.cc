// ds-launch: start a job, or look at / stop the current one.
//
//   ds-launch job.yaml [--hostfile F] [--include S] [--exclude S] [--num_nodes N]
//             [--num_slots|--num_gpus K] [--tp N] [--pp N] [--launcher local|ssh|pdsh|slurm]
//             [--coordinator HOST:PORT | --master_addr A --master_port P]
//             [--ssh_port P] [--max_restarts N] [--rdzv_timeout S] [--detach]
//             [--tls_cert C --tls_key K --tls_ca CA [--tls_client_cert C --tls_client_key K]]
//   ds-launch status [--coordinator A --token_file F] [--tls_*] [--json] [--watch]
//   ds-launch stop [--coordinator A --token_file F] [--tls_*]
//   ds-launch plan job.yaml --world N [--json] [--stage S] [--dump]   (no process started)
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/status_format.h"
#include "launcher/hostfile.h"
#include "launcher/launch/job_dir.h"
#include "launcher/launch/launch_auto.h"
#include "launcher/launch/launcher.h"
#include "runtime/planner/plan_command.h"

namespace ds::launcher {
namespace {

struct Access {
  std::string coordinator, token_file;
  TlsClient tls;  // "" = the current job's (its job directory's tls file), or plaintext
};

void AddTlsOptions(CLI::App* app, Access* a) {
  app->add_option("--tls_ca", a->tls.ca, "PEM CA of the coordinator (default: the job's)");
  app->add_option("--tls_cert", a->tls.cert, "PEM client certificate (mutual TLS)");
  app->add_option("--tls_key", a->tls.key, "PEM key of --tls_cert");
  app->add_option("--tls_server_name", a->tls.server_name,
                  "name checked against the coordinator's certificate");
}

StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const Access& a) {
  ClientOptions co;
  TlsClient tls = a.tls;
  if (a.coordinator.empty()) {
    auto job = CurrentJob();
    if (!job.ok()) return job.status();
    co.address = job->coordinator;
    co.token = job->token;
    if (tls.ca.empty()) tls = job->tls;
  } else {
    co.address = a.coordinator;
    if (a.token_file.empty()) return InvalidArgumentError("--coordinator needs --token_file");
    auto token = ReadTokenFile(a.token_file);
    if (!token.ok()) return token.status();
    co.token = *token;
  }
  co.tls_ca_path = tls.ca;
  co.tls_cert_path = tls.cert;
  co.tls_key_path = tls.key;
  co.tls_server_name = tls.server_name;
  co.rpc_timeout = std::chrono::milliseconds(5000);
  return CoordinatorClient::Create(co);
}

int Status_(int argc, char** argv) {
  CLI::App app{"ds-launch status: the job service's view of the current job"};
  Access a;
  bool json = false, watch = false;
  app.add_option("--coordinator", a.coordinator,
                 "coordinator host:port (default: the current job)");
  app.add_option("--token_file", a.token_file, "the job token (0600 file)");
  AddTlsOptions(&app, &a);
  app.add_flag("--json", json, "print JSON");
  app.add_flag("--watch", watch, "print every change until the job ends");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto client = Connect(a);
  if (!client.ok()) {
    std::fprintf(stderr, "ds-launch status: %s\n", client.status().ToString().c_str());
    return 2;
  }
  auto print = [&](const JobStatus& s) {
    if (json) {
      auto j = JobStatusToJson(s, true);
      std::printf("%s\n", j.ok() ? j->c_str() : j.status().ToString().c_str());
    } else {
      std::printf("%s\n", FormatJobStatus(s).c_str());
    }
    std::fflush(stdout);
    return !IsTerminal(s.phase);
  };
  if (watch) {
    Status s = (*client)->Watch(print, std::chrono::hours(24 * 7));
    if (!s.ok()) std::fprintf(stderr, "ds-launch status: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  auto s = (*client)->GetStatus();
  if (!s.ok()) {
    std::fprintf(stderr, "ds-launch status: %s\n", s.status().ToString().c_str());
    if (s.status().code() == StatusCode::kUnavailable)
      std::fprintf(stderr,
                   "ds-launch status: the job's coordinator is not running: the job has "
                   "ended or its launcher is gone%s\n",
                   a.coordinator.empty() ? " (see launch output, or launch.log in the job "
                                           "directory for --detach jobs)"
                                         : "");
    return 1;
  }
  print(*s);
  return 0;
}

int Stop(int argc, char** argv) {
  CLI::App app{"ds-launch stop: stop the current job (SIGTERM, grace, SIGKILL on every node)"};
  Access a;
  std::string reason = "ds-launch stop";
  app.add_option("--coordinator", a.coordinator,
                 "coordinator host:port (default: the current job)");
  app.add_option("--token_file", a.token_file, "the job token (0600 file)");
  AddTlsOptions(&app, &a);
  app.add_option("--reason", reason, "recorded in the job status");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto client = Connect(a);
  Status s = client.ok() ? (*client)->Stop(reason) : client.status();
  if (!s.ok()) {
    std::fprintf(stderr, "ds-launch stop: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ds-launch stop: stopping the job\n");
  return 0;
}

// Mutual TLS: the coordinator's identity, the CA, and what the clients present.
void AddTlsOptions(CLI::App* app, LaunchOptions* o) {
  app->add_option("--tls_cert", o->tls_cert, "coordinator TLS certificate (PEM): mutual TLS");
  app->add_option("--tls_key", o->tls_key, "its key (PEM)");
  app->add_option("--tls_ca", o->tls_ca,
                  "CA (PEM) of the coordinator's and the clients' certificates");
  app->add_option("--tls_client_cert", o->tls_client_cert,
                  "certificate agents, workers and status present (default: --tls_cert)");
  app->add_option("--tls_client_key", o->tls_client_key, "its key (default: --tls_key)");
  app->add_option("--tls_server_name", o->tls_server_name,
                  "name clients check the coordinator's certificate against (default: its host)");
}

int Launch(int argc, char** argv) {
  CLI::App app{"ds-launch: start a ds-runtime job (see also: ds-launch status|stop)"};
  LaunchOptions o;
  app.add_option("config", o.config, "job config (YAML or JSON)")->required();
  app.add_option("--hostfile", o.hostfile,
                 "DeepSpeed hostfile (host slots=N); default: /job/hostfile if it exists, else "
                 "this machine");
  app.add_option("--include", o.include, "hosts/slots to use, e.g. host1:0,2@host2");
  app.add_option("--exclude", o.exclude, "hosts/slots to leave out");
  app.add_option("--num_nodes", o.num_nodes, "use the first N hosts");
  app.add_option(
      "--nnodes", o.nnodes,
      "N or MIN:MAX nodes (torchrun's): an elastic job goes on with fewer nodes when one "
      "is lost, down to MIN, under --max_restarts");
  app.add_option("--rdzv_last_call", o.rdzv_last_call_s,
                 "elastic jobs: seconds a round waits for more nodes once MIN joined (default 5)");
  CLI::Option* slots =
      app.add_option("--num_slots", o.num_slots, "use the first K slots of each host");
  app.add_option("--tp", o.tp, "override parallel.tensor (tensor-parallel size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--pp", o.pp, "override parallel.pipeline (pipeline stages)")
      ->check(CLI::PositiveNumber);
  app.add_option("--num_gpus", o.num_slots, "DeepSpeed's name of --num_slots")
      ->check(CLI::PositiveNumber)
      ->excludes(slots);
  app.add_option("--launcher", o.backend,
                 "local | ssh | pdsh (over ssh) | slurm | netns (hosts are network namespaces "
                 "of this machine: tools/emulated_nodes.sh)");
  app.add_option("--coordinator", o.coordinator, "coordinator bind address HOST:PORT");
  app.add_option("--master_addr", o.master_addr,
                 "DeepSpeed's: the coordinator's address (with --master_port, default 29500)");
  app.add_option("--master_port", o.master_port, "DeepSpeed's: the coordinator's port")
      ->check(CLI::Range(1, 65535));
  app.add_option("--ssh_port", o.ssh_port, "ssh port");
  app.add_option("--ssh_user", o.ssh_user, "ssh user");
  app.add_option("--ssh_identity", o.ssh_identity, "ssh identity file");
  app.add_option("--ssh_config", o.ssh_config, "ssh config file");
  app.add_option("--max_restarts", o.max_restarts,
                 "restart rounds after a failure (resume from checkpoint)");
  app.add_option("--rdzv_timeout", o.rdzv_timeout_s, "seconds for all nodes to join");
  app.add_option("--host_memory", o.host_memory_gib,
                 "parallel: auto: GiB of memory per node the layouts must fit (default: this "
                 "machine's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--heartbeat", o.heartbeat_s, "agent heartbeat interval, seconds");
  app.add_option("--node_timeout", o.node_timeout_s,
                 "no heartbeat for this long = node lost, seconds");
  app.add_option("--grace", o.grace_s, "SIGTERM -> SIGKILL grace when stopping workers, seconds");
  app.add_flag("--detach", o.detach, "run in the background; follow with ds-launch status");
  app.add_option("--worker", o.worker, "ds-worker path (default: next to ds-launch)");
  app.add_option("--agent", o.agent, "ds-agent path (default: next to ds-launch)");
  AddTlsOptions(&app, &o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return RunLaunch(o);
}

}  // namespace
}  // namespace ds::launcher

namespace ds::launcher {
namespace {

// `ds-launch plan JOB --hostfile H ...`: the planner does not read hostfiles; the nodes' slots
// and which machine each is (loopback names are this one) go to it as --node-slots and
// --host-of-node. Returns the exit code of the plan command.
int Plan(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a != "--hostfile" || i + 1 >= argc) {
      args.push_back(a);
      continue;
    }
    auto hosts = LoadHostfile(argv[++i]);
    if (!hosts.ok()) {
      std::fprintf(stderr, "ds-launch plan: %s\n", hosts.status().message().c_str());
      return 1;
    }
    std::vector<std::pair<std::string, int>> named;
    for (const HostSlots& h : *hosts) named.push_back({h.host, h.slots});
    const NodeMachines m = MachinesOf(named);
    auto join = [](const std::vector<int>& v) {
      std::string s;
      for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
      return s;
    };
    args.insert(args.end(), {"--node-slots", join(m.slots), "--host-of-node", join(m.machine)});
  }
  std::vector<char*> v;
  for (std::string& a : args) v.push_back(a.data());
  return planner::RunPlanCommand(static_cast<int>(v.size()), v.data());
}

}  // namespace
}  // namespace ds::launcher

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "status") == 0)
    return ds::launcher::Status_(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "stop") == 0) return ds::launcher::Stop(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "plan") == 0) return ds::launcher::Plan(argc - 1, argv + 1);
  return ds::launcher::Launch(argc, argv);
}
