// What a DeepSpeed user types, mapped onto ds-launch (DeepSpeed's launcher/runner.py habits):
//
//   --master_addr A --master_port P    the coordinator's address (--coordinator A:P); port 29500
//                                      when only the address is given, as DeepSpeed's default
//   --hostfile                         /job/hostfile when none is given and it exists
//   --launcher pdsh | openmpi | ...    pdsh runs agents over ssh (what pdsh does); the MPI
//                                      launchers (openmpi, mpich, impi, mvapich) are refused:
//                                      ds-runtime starts its own agents and needs no MPI
//   .deepspeed_env                     KEY=VALUE lines exported to every rank on every node:
//                                      ~/.deepspeed_env, then ./.deepspeed_env (later wins), or
//                                      the file DS_ENV_FILE names
//
// Pure functions but for LoadDeepSpeedEnv's reads.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

// `coordinator` when set (and then neither master flag may be), else master_addr:master_port;
// "" when none is given. master_port <= 0: unset.
StatusOr<std::string> CoordinatorFromMaster(const std::string& coordinator,
                                            const std::string& master_addr, int master_port);

// The hostfile to read: `hostfile`, else `default_path` when that file exists, else "".
std::string HostfileOrDefault(const std::string& hostfile, const std::string& default_path);

// The backend for a --launcher name: "local", "ssh" (also for "pdsh"; `note` says so) or
// "slurm". InvalidArgument naming the MPI launchers and any other name.
StatusOr<std::string> BackendForLauncher(const std::string& name, std::string* note);

struct DeepSpeedEnv {
  std::map<std::string, std::string> vars;
  std::vector<std::string> files;  // the files read, in order
};
// `ds_env_file` is DS_ENV_FILE's value (null: unset): an absolute path, or a name looked up in
// `home` then `cwd` as .deepspeed_env is. Lines are KEY=VALUE (the first '=' splits; blank
// lines and '#' comments skipped); anything else is refused naming the file and line.
StatusOr<DeepSpeedEnv> LoadDeepSpeedEnv(const std::string& home, const std::string& cwd,
                                        const char* ds_env_file);

}  // namespace ds::launcher
