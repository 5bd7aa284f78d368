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

// The memory a job's executors compute on: none on the CPU (`cuda` false, whatever `given` is),
// else `given` when the caller has one (a test's stand-in for a GPU), else OpenAccelerator(0)
// kept in `*owned` (the agent pins one GPU per rank with CUDA_VISIBLE_DEVICES: device 0).
StatusOr<DeviceMemory*> JobDevice(bool cuda, DeviceMemory* given,
                                  std::unique_ptr<DeviceMemory>* owned);

}  // namespace ds::exec
