#include "runtime/exec/accelerator.h"

#include <cstdlib>
#include <string>

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

}  // namespace ds::exec
