#include "runtime/exec/cuda_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ds {
namespace {

constexpr char kPlugin[] = "libds_cuda.so";

std::string ExecutablePath() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), n) : std::string();
}

std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* p = std::getenv("DS_CUDA_BACKEND"); p && *p) paths.push_back(p);
  const std::string exe = ExecutablePath();
  const size_t slash = exe.rfind('/');
  paths.push_back((slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/" + kPlugin);
  std::vector<std::string> runfiles;
  if (const char* r = std::getenv("RUNFILES_DIR")) runfiles.push_back(r);
  if (const char* r = std::getenv("TEST_SRCDIR")) runfiles.push_back(r);
  if (!exe.empty()) runfiles.push_back(exe + ".runfiles");
  for (const std::string& r : runfiles) paths.push_back(r + "/ds_runtime/runtime/cuda/" + kPlugin);
  return paths;
}

}  // namespace

StatusOr<std::unique_ptr<DeviceMemory>> LoadCudaMemory(int ordinal) {
  static void* handle = nullptr;
  std::string tried;
  if (!handle) {
    for (const std::string& path : Candidates()) {
      if (access(path.c_str(), R_OK) != 0) {
        tried += "\n  " + path + ": not found";
        continue;
      }
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
      tried += "\n  " + path + ": " + dlerror();
    }
  }
  if (!handle)
    return UnavailableError(std::string("the CUDA backend ") + kPlugin +
                            " could not be loaded (it is built only where the CUDA toolkit is; "
                            "tools/build.sh installs it next to ds-worker; DS_CUDA_BACKEND names "
                            "another file):" + tried);
  using Abi = int (*)();
  using Create = DeviceMemory* (*)(int, char*, size_t);
  auto abi = reinterpret_cast<Abi>(dlsym(handle, "ds_cuda_plugin_abi_version"));
  auto create = reinterpret_cast<Create>(dlsym(handle, "ds_cuda_create_memory"));
  if (!abi || !create || abi() != 1)
    return FailedPreconditionError(std::string(kPlugin) + " is not a ds-runtime CUDA backend of ABI 1");
  char error[1024] = "";
  DeviceMemory* memory = create(ordinal, error, sizeof(error));
  if (!memory) return UnavailableError(error);
  return std::unique_ptr<DeviceMemory>(memory);
}

}  // namespace ds
