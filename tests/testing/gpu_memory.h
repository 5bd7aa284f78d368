// GPU tests of packages below the executor (zero/): the GPU through the CUDA plugin, as a
// worker loads it (runtime/exec/cuda_loader.h), without their code depending on runtime/exec.
#pragma once

#include <memory>

#include "runtime/exec/cuda_loader.h"

namespace ds::testing {

inline StatusOr<std::unique_ptr<DeviceMemory>> OpenTestGpu() { return exec::LoadCudaMemory(0); }

}  // namespace ds::testing
