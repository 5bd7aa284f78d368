#include "runtime/exec/cuda_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ds::exec {
namespace {

constexpr char kPlugin[] = "libds_cuda.so";
constexpr char kNcclPlugin[] = "libds_nccl.so";

std::string ExecutablePath() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), n) : std::string();
}

// `file` from $`env` alone when it is set (a file the user names is the only one tried, never
// silently replaced by another), else beside the executable or at `package`/`file` in its
// runfiles.
std::vector<std::string> Candidates(const char* env, const std::string& file,
                                    const std::string& package) {
  std::vector<std::string> paths;
  if (const char* p = std::getenv(env); p && *p) return {p};
  const std::string exe = ExecutablePath();
  const size_t slash = exe.rfind('/');
  paths.push_back((slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/" +
                  file);
  std::vector<std::string> runfiles;
  if (const char* r = std::getenv("RUNFILES_DIR")) runfiles.push_back(r);
  if (const char* r = std::getenv("TEST_SRCDIR")) runfiles.push_back(r);
  if (!exe.empty()) runfiles.push_back(exe + ".runfiles");
  for (const std::string& r : runfiles) paths.push_back(r + "/ds_runtime/" + package + "/" + file);
  return paths;
}

// dlopens the first candidate that loads; `tried` collects why the others did not.
void* Open(const std::vector<std::string>& candidates, std::string* tried) {
  for (const std::string& path : candidates) {
    if (access(path.c_str(), R_OK) != 0) {
      *tried += "\n  " + path + ": not found";
      continue;
    }
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    *tried += "\n  " + path + ": " + dlerror();
  }
  return nullptr;
}

}  // namespace

StatusOr<std::unique_ptr<DeviceMemory>> LoadCudaMemory(int ordinal) {
  static void* handle = nullptr;
  std::string tried;
  if (!handle) handle = Open(Candidates("DS_CUDA_BACKEND", kPlugin, "runtime/cuda"), &tried);
  if (!handle)
    return UnavailableError(std::string("the CUDA backend ") + kPlugin +
                            " could not be loaded (it is built only where the CUDA toolkit is; "
                            "tools/build.sh installs it next to ds-worker; DS_CUDA_BACKEND names "
                            "another file):" +
                            tried);
  using Abi = int (*)();
  using Create = DeviceMemory* (*)(int, char*, size_t);
  auto abi = reinterpret_cast<Abi>(dlsym(handle, "ds_cuda_plugin_abi_version"));
  auto create = reinterpret_cast<Create>(dlsym(handle, "ds_cuda_create_memory"));
  if (!abi || !create || abi() != 1)
    return FailedPreconditionError(std::string(kPlugin) +
                                   " is not a ds-runtime CUDA backend of ABI 1");
  char error[1024] = "";
  DeviceMemory* memory = create(ordinal, error, sizeof(error));
  if (!memory) return UnavailableError(error);
  return std::unique_ptr<DeviceMemory>(memory);
}

StatusOr<std::unique_ptr<parallel::Communicator>> LoadNcclCommunicator(
    DeviceMemory* memory, int rank, int size, const std::string& name, parallel::KvStore* store,
    std::chrono::milliseconds timeout) {
  static void* handle = nullptr;
  std::string tried;
  if (!handle)
    handle = Open(Candidates("DS_NCCL_BACKEND", kNcclPlugin, "parallel/comm/nccl"), &tried);
  if (!handle)
    return NotFoundError(
        std::string("the NCCL backend ") + kNcclPlugin +
        " could not be loaded (it is built only where the CUDA toolkit and NCCL are; "
        "DS_NCCL_BACKEND names another file):" +
        tried);
  using Abi = int (*)();
  using Create = parallel::Communicator* (*)(DeviceMemory*, int, int, const char*,
                                             parallel::KvStore*, long long, char*, size_t);
  auto abi = reinterpret_cast<Abi>(dlsym(handle, "ds_nccl_plugin_abi_version"));
  auto create = reinterpret_cast<Create>(dlsym(handle, "ds_nccl_create_communicator"));
  if (!abi || !create || abi() != 1)
    return FailedPreconditionError(std::string(kNcclPlugin) +
                                   " is not a ds-runtime NCCL backend of ABI 1");
  char error[1024] = "";
  parallel::Communicator* comm =
      create(memory, rank, size, name.c_str(), store, static_cast<long long>(timeout.count()),
             error, sizeof(error));
  if (!comm) return UnavailableError(std::string("NCCL: ") + error);
  return std::unique_ptr<parallel::Communicator>(comm);
}

}  // namespace ds::exec
