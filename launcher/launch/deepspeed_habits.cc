#include "launcher/launch/deepspeed_habits.h"

#include <unistd.h>

#include <cctype>
#include <fstream>

namespace ds::launcher {
namespace {

constexpr int kDeepSpeedMasterPort = 29500;

bool ValidName(const std::string& key) {
  if (key.empty() || std::isdigit(static_cast<unsigned char>(key[0]))) return false;
  for (char c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

Status ReadEnvFile(const std::string& path, DeepSpeedEnv* out) {
  std::ifstream in(path);
  if (!in) return OkStatus();  // absent: nothing to export
  out->files.push_back(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t eq = line.find('=');
    const std::string key = eq == std::string::npos ? "" : line.substr(0, eq);
    if (!ValidName(key))
      return InvalidArgumentError(path + ":" + std::to_string(n) + ": \"" + line.substr(0, 60) +
                                  "\" is not KEY=VALUE with a variable name for KEY");
    out->vars[key] = line.substr(eq + 1);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> CoordinatorFromMaster(const std::string& coordinator,
                                            const std::string& master_addr, int master_port) {
  const bool master = !master_addr.empty() || master_port > 0;
  if (!coordinator.empty() && master)
    return InvalidArgumentError(
        "--coordinator and --master_addr / --master_port say the same thing: give one");
  if (!master) return coordinator;
  if (master_addr.empty())
    return InvalidArgumentError("--master_port " + std::to_string(master_port) +
                                " needs --master_addr (the address every node reaches)");
  const int port = master_port > 0 ? master_port : kDeepSpeedMasterPort;
  if (port > 65535) return InvalidArgumentError("--master_port " + std::to_string(port));
  const bool v6 = master_addr.find(':') != std::string::npos && master_addr.front() != '[';
  return (v6 ? "[" + master_addr + "]" : master_addr) + ":" + std::to_string(port);
}

std::string HostfileOrDefault(const std::string& hostfile, const std::string& default_path) {
  if (!hostfile.empty()) return hostfile;
  return !default_path.empty() && access(default_path.c_str(), R_OK) == 0 ? default_path : "";
}

StatusOr<std::string> BackendForLauncher(const std::string& name, std::string* note) {
  if (name == "local" || name == "ssh" || name == "slurm" || name == "netns") return name;
  if (name == "pdsh") {
    *note = "--launcher pdsh: the agents start over ssh, one per node, as pdsh would";
    return std::string("ssh");
  }
  for (const char* mpi : {"openmpi", "mpich", "impi", "mvapich", "mpi"})
    if (name == mpi)
      return InvalidArgumentError(
          "--launcher " + name +
          " is not supported: ds-runtime starts one agent per node itself and needs no MPI "
          "launcher; use --launcher ssh (or pdsh) with a hostfile, or slurm inside an "
          "allocation");
  return InvalidArgumentError("--launcher must be local, ssh, pdsh, slurm or netns, got \"" + name +
                              "\"");
}

StatusOr<DeepSpeedEnv> LoadDeepSpeedEnv(const std::string& home, const std::string& cwd,
                                        const char* ds_env_file) {
  DeepSpeedEnv env;
  const std::string name = ds_env_file && *ds_env_file ? ds_env_file : ".deepspeed_env";
  if (name.front() == '/') {
    std::ifstream probe(name);
    if (!probe) return NotFoundError("DS_ENV_FILE=" + name + " cannot be read");
    Status s = ReadEnvFile(name, &env);
    if (!s.ok()) return s;
    return env;
  }
  const std::string dirs[2] = {home, cwd == home ? "" : cwd};  // cwd = home: read once
  for (const std::string& dir : dirs) {
    if (dir.empty()) continue;
    Status s = ReadEnvFile(dir + "/" + name, &env);
    if (!s.ok()) return s;
  }
  return env;
}

}  // namespace ds::launcher
