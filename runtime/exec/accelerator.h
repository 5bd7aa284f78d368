// The accelerator a rank with device.type cuda trains on: GPU `ordinal` through the CUDA
// plugin (cuda_loader.h), or, with DS_ACCELERATOR=host in the environment, host memory and the
// CPU kernels standing in for it (as DeepSpeed's DS_ACCELERATOR picks an accelerator). The
// stand-in runs the whole device path (model states on the "device", its optimizer kernels,
// collectives staged as for a GPU over Gloo) on machines without a GPU: tests and dry runs
// of GPU configs. DS_ACCELERATOR=cuda or unset: the GPU; anything else is an error naming it.
#pragma once

#include <memory>

#include "runtime/base/status.h"
#include "runtime/core/device_memory.h"

namespace ds::exec {

StatusOr<std::unique_ptr<DeviceMemory>> OpenAccelerator(int ordinal);

}  // namespace ds::exec
