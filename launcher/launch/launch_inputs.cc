#include "launcher/launch/launch_inputs.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "launcher/hostfile.h"
#include "launcher/launch/deepspeed_habits.h"
#include "launcher/resource_filter.h"
#include "launcher/slurm_allocation.h"
#include "launcher/tls_bundle.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {

std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char buf[4096];
  if (!getcwd(buf, sizeof(buf))) return path;
  return std::string(buf) + "/" + path;
}

// ds-worker / ds-agent: the flag, else next to this executable, else Bazel's layout.
StatusOr<std::string> FindBinary(const std::string& flag, const std::string& name,
                                 const std::string& bazel_rel) {
  if (!flag.empty()) return Absolute(flag);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& c : {dir + "/" + name, dir + "/../../" + bazel_rel})
      if (access(c.c_str(), X_OK) == 0) return c;
  }
  return NotFoundError("cannot find " + name + " next to ds-launch; pass --" +
                       (name == "ds-worker" ? std::string("worker") : std::string("agent")) +
                       " PATH");
}

std::string DialAddress(const std::string& bound) {
  const size_t colon = bound.rfind(':');
  const std::string host = bound.substr(0, colon);
  if (host != "0.0.0.0" && host != "[::]") return bound;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || !name[0]) return bound;
  return std::string(name) + bound.substr(colon);
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

std::string HomeDir() {
  const char* h = std::getenv("HOME");
  return h ? h : "";
}

std::string CurrentDir() {
  char buf[4096];
  return getcwd(buf, sizeof(buf)) ? buf : "";
}

// DeepSpeed's launcher flags onto ours (deepspeed_habits.h), saying what they chose.
Status ResolveDeepSpeedHabits(LaunchOptions* o) {
  std::string note;
  DS_ASSIGN_OR_RETURN(o->backend, BackendForLauncher(o->backend, &note));
  if (!note.empty()) std::printf("ds-launch: %s\n", note.c_str());
  DS_ASSIGN_OR_RETURN(o->coordinator,
                      CoordinatorFromMaster(o->coordinator, o->master_addr, o->master_port));
  const std::string hostfile = HostfileOrDefault(o->hostfile, o->default_hostfile);
  if (o->hostfile.empty() && !hostfile.empty())
    std::printf("ds-launch: no --hostfile: using %s (DeepSpeed's default)\n", hostfile.c_str());
  o->hostfile = hostfile;
  return OkStatus();
}

// Everything validated before a process starts: the nodes of the job.
StatusOr<std::vector<NodeSpec>> SelectNodes(const LaunchOptions& o) {
  std::vector<HostSlots> hosts;
  if (o.hostfile.empty() && o.backend == "slurm") {  // the allocation's nodes and tasks
    DS_ASSIGN_OR_RETURN(SlurmAllocation a, ReadSlurmAllocation(&std::getenv));
    std::string layout;
    for (size_t i = 0; i < a.nodes.size(); ++i) {
      hosts.push_back({a.nodes[i], a.tasks[i], 0});
      layout += (i ? ", " : "") + a.nodes[i] + " x " + std::to_string(a.tasks[i]);
    }
    std::printf("ds-launch: Slurm job %s: %s rank(s) (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE)\n",
                a.job_id.c_str(), layout.c_str());
  } else if (o.hostfile.empty()) {
    DS_ASSIGN_OR_RETURN(hosts, DefaultLocalHosts(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))));
  } else {
    DS_ASSIGN_OR_RETURN(hosts, LoadHostfile(o.hostfile));
  }
  DS_ASSIGN_OR_RETURN(std::vector<HostSelection> sel,
                      ApplyIncludeExclude(hosts, o.include, o.exclude, o.hostfile));
  DS_ASSIGN_OR_RETURN(sel, ApplyLimits(sel, o.num_nodes, o.num_slots));
  std::vector<NodeSpec> nodes;
  for (const HostSelection& h : sel) {
    NodeSpec n{h.host, static_cast<int>(h.slot_ids.size()), {}};
    for (size_t i = 0; i < h.slot_ids.size(); ++i)
      if (h.slot_ids[i] != static_cast<int>(i)) n.devices = h.slot_ids;  // --include host:1,3
    nodes.push_back(std::move(n));
  }
  return nodes;
}

// Ranks are numbered node by node in hostfile order, tp fastest (runtime/plan/parallel_grid.h):
// every tensor-parallel group stays on one node when each node's slots are a multiple of tp.
Status CheckTensorGroupsOnNodes(const std::vector<NodeSpec>& nodes, int tp) {
  if (tp <= 1) return OkStatus();
  for (const NodeSpec& n : nodes)
    if (n.slots % tp != 0)
      return InvalidArgumentError("parallel.tensor " + std::to_string(tp) + ": node " + n.name +
                                  " has " + std::to_string(n.slots) +
                                  " slots, so a tensor-parallel group would span two nodes; "
                                  "give every node a multiple of " +
                                  std::to_string(tp) + " slots");
  return OkStatus();
}

// Mutual TLS: the coordinator's certificate and key and the CA go together; the clients'
// identity (default: the same certificate) travels to every agent in a bundle (tls_bundle.h).

StatusOr<Tls> TlsMaterial(const LaunchOptions& o) {
  Tls t;
  if (o.tls_cert.empty() && o.tls_key.empty() && o.tls_ca.empty()) {
    if (!o.tls_client_cert.empty() || !o.tls_client_key.empty())
      return InvalidArgumentError(
          "--tls_client_cert / --tls_client_key need --tls_cert, "
          "--tls_key and --tls_ca");
    return t;
  }
  if (o.tls_cert.empty() || o.tls_key.empty() || o.tls_ca.empty())
    return InvalidArgumentError(
        "--tls_cert, --tls_key and --tls_ca go together: the coordinator's certificate and key, "
        "and the CA that signed it and the certificate every client presents (mutual TLS)");
  DS_RETURN_IF_ERROR(ReadTlsPems(o.tls_ca, o.tls_cert, o.tls_key).status());
  const std::string cert = o.tls_client_cert.empty() ? o.tls_cert : o.tls_client_cert;
  const std::string key = o.tls_client_key.empty() ? o.tls_key : o.tls_client_key;
  DS_ASSIGN_OR_RETURN(TlsPems pems, ReadTlsPems(o.tls_ca, cert, key));
  t.bundle = EncodeTlsBundle(pems);
  t.client = {Absolute(o.tls_ca), Absolute(cert), Absolute(key), o.tls_server_name};
  return t;
}

}  // namespace ds::launcher
