#include "launcher/agent/worker_env.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>

#include "runtime/cuda/device.h"

extern char** environ;

namespace ds::launcher {

// The CPUs this process may run on, split into `parts` contiguous shares.
std::vector<std::vector<int>> SplitCpus(int parts) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  std::vector<std::vector<int>> out(parts);
  if (cpus.empty()) return out;
  if (static_cast<int>(cpus.size()) < parts) {  // more ranks than cores: share round-robin
    for (int p = 0; p < parts; ++p) out[p] = {cpus[p % cpus.size()]};
    return out;
  }
  const size_t per = cpus.size() / parts;
  for (int p = 0; p < parts; ++p)
    out[p].assign(cpus.begin() + p * per, cpus.begin() + (p + 1) * per);
  return out;
}

// The agent's environment without the variables each rank gets its own value of.
Env InheritedEnv() {
  Env base;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string k = kv.substr(0, eq);
    if (k == "RANK" || k == "LOCAL_RANK" || k == "WORLD_SIZE" || k == "LOCAL_SIZE" ||
        k == "NODE_RANK" || k.rfind("DS_", 0) == 0 || k == "OMP_NUM_THREADS")
      continue;
    base.emplace_back(k, kv.substr(eq + 1));
  }
  return base;
}

Env WorkerEnv(const AgentOptions& opt, const JoinResult& join, const std::string& copy_dir, Env env,
              int i, size_t cpus) {
  // GPU nodes: one device per local rank (round-robin when ranks outnumber devices), unless
  // the user pinned devices already; --devices (ds-launch --include host:1,3) names them.
  static const int gpus = [] {
    auto n = cuda::CudaDeviceCount();
    return n.ok() ? *n : 0;
  }();
  const bool pin_gpus = gpus > 0 && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr;
  auto add = [&](const std::string& k, const std::string& v) { env.emplace_back(k, v); };
  add("RANK", std::to_string(join.global_ranks[i]));
  add("LOCAL_RANK", std::to_string(i));
  add("WORLD_SIZE", std::to_string(join.world_size));
  add("LOCAL_SIZE", std::to_string(join.global_ranks.size()));
  add("NODE_RANK", std::to_string(join.node_rank));
  add("DS_COORDINATOR", opt.coordinator);
  add("DS_JOB_TOKEN_FILE", opt.token_file);
  if (!opt.tls_ca.empty()) {  // the workers' clients (progress, KV store) use our identity
    add("DS_TLS_CA", opt.tls_ca);
    add("DS_TLS_CERT", opt.tls_cert);
    add("DS_TLS_KEY", opt.tls_key);
    add("DS_TLS_SERVER_NAME", opt.tls_server_name);
  }
  add("DS_ROUND", std::to_string(join.round));
  add("DS_RESUME", join.job.resume ? "1" : "0");
  add("DS_NODE_NAME", opt.node_name);
  add("DS_NODE_ADDR", join.advertise_addr);
  if (!copy_dir.empty()) add("DS_COPY_DIR", copy_dir);
  std::string stores;
  for (const std::string& a : join.copy_stores) stores += (stores.empty() ? "" : ",") + a;
  if (!stores.empty()) add("DS_COPY_STORES", stores);
  if (join.memory_step > 0 && join.memory_world > 0 && join.memory_world != join.world_size) {
    std::string sources;  // every old rank's: this rank cuts its part from all of them
    for (const std::string& a : join.memory_sources) sources += (sources.empty() ? "" : ",") + a;
    add("DS_MEMORY_STEP", std::to_string(join.memory_step));
    add("DS_MEMORY_WORLD", std::to_string(join.memory_world));
    add("DS_MEMORY_SOURCES", sources);
  } else if (join.memory_step > 0 && i < static_cast<int>(join.memory_sources.size())) {
    add("DS_MEMORY_STEP", std::to_string(join.memory_step));
    add("DS_MEMORY_SOURCE", join.memory_sources[i]);
  }
  add("OMP_NUM_THREADS", std::to_string(std::max<size_t>(1, cpus)));
  if (!opt.devices.empty())  // the hostfile slots --include picked: the user's GPUs
    add("CUDA_VISIBLE_DEVICES", std::to_string(opt.devices.at(i % opt.devices.size())));
  else if (pin_gpus)
    add("CUDA_VISIBLE_DEVICES", std::to_string(i % gpus));
  return env;
}

}  // namespace ds::launcher
