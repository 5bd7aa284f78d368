#include "runtime/exec/accelerator.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "runtime/exec/cuda_loader.h"

namespace ds::exec {

StatusOr<std::unique_ptr<DeviceMemory>> OpenAccelerator(int ordinal) {
  const char* env = std::getenv("DS_ACCELERATOR");
  const std::string which = env ? env : "";
  if (which.empty() || which == "cuda") return LoadCudaMemory(ordinal);
  if (which == "host") return std::unique_ptr<DeviceMemory>(new HostMemory());
  return InvalidArgumentError("DS_ACCELERATOR=\"" + which +
                              "\": expected cuda (the GPU) or host (host memory "
                              "standing in for it)");
}

StatusOr<DeviceMemory*> JobDevice(bool cuda, DeviceMemory* given,
                                  std::unique_ptr<DeviceMemory>* owned) {
  if (!cuda) return nullptr;
  if (given) return given;
  auto gpu = OpenAccelerator(0);
  if (!gpu.ok()) return gpu.status();
  *owned = std::move(gpu).value();
  return owned->get();
}

}  // namespace ds::exec
