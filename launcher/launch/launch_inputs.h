// What ds-launch works out before any process starts (launcher.cc's step 1): the binaries, the
// nodes (hostfile or this machine, --include / --exclude, limits, the GPUs --include picked),
// DeepSpeed's spellings of our flags (deepspeed_habits.h), the tensor-parallel groups' fit on
// the nodes, and the mutual TLS material for the clients. Each failure names its input.
#pragma once

#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_types.h"
#include "launcher/launch/job_dir.h"
#include "launcher/launch/launcher.h"
#include "runtime/base/status.h"

namespace ds::launcher {

// `path` made absolute against the working directory.
std::string Absolute(const std::string& path);
std::string HomeDir();     // $HOME, "" when unset
std::string CurrentDir();  // the working directory
bool IsLoopback(const std::string& host);
// The address agents dial for a coordinator bound to `bound` ("host:port"): with a wildcard
// host (0.0.0.0, [::]) this machine's host name, which the nodes resolve; else `bound`.
std::string DialAddress(const std::string& bound);

// ds-worker / ds-agent: the flag, else next to this executable, else Bazel's layout.
StatusOr<std::string> FindBinary(const std::string& flag, const std::string& name,
                                 const std::string& bazel_rel);

// DeepSpeed's launcher flags onto ours (--launcher pdsh, --master_addr / --master_port, the
// /job/hostfile default), printing what they chose.
Status ResolveDeepSpeedHabits(LaunchOptions* o);

// The job's nodes in hostfile order (--launcher slurm without a hostfile: the allocation's
// nodes and --ntasks-per-node); NodeSpec::devices when --include picked slots.
StatusOr<std::vector<NodeSpec>> SelectNodes(const LaunchOptions& o);

// Ranks are numbered node by node, tp fastest: every tensor-parallel group stays on one node
// when each node's slots are a multiple of tp; InvalidArgument naming the node otherwise.
Status CheckTensorGroupsOnNodes(const std::vector<NodeSpec>& nodes, int tp);

// Mutual TLS: the coordinator's certificate and key and the CA go together; the clients'
// identity (default: the same certificate) travels to every agent in a bundle (tls_bundle.h).
struct Tls {
  std::string bundle;  // "" = plaintext
  TlsClient client;    // what ds-launch status / stop present
};
StatusOr<Tls> TlsMaterial(const LaunchOptions& o);

}  // namespace ds::launcher
