// Loads the CUDA plugins on demand:
//   libds_cuda.so (runtime/cuda/cuda_backend_plugin.cc): a DeviceMemory on one GPU; loading
//       registers every op's CUDA kernels and the optimizer's in their registries. CPU-only
//       runs never load it.
//   libds_nccl.so (parallel/comm/nccl/nccl_plugin.cc): an NCCL data-parallel communicator over
//       such a memory, for ranks whose model states are on their GPU.
//
// Where each is looked for, first found wins: $DS_CUDA_BACKEND / $DS_NCCL_BACKEND (a file
// path); next to the running executable (tools/build.sh installs them into bin/); the
// executable's Bazel runfiles. Errors say where it looked and why loading failed.
// Thread-compatible: call it from one thread (the worker's start).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"
#include "runtime/core/device_memory.h"

namespace ds::parallel {
class KvStore;
}  // namespace ds::parallel

namespace ds::exec {

StatusOr<std::unique_ptr<DeviceMemory>> LoadCudaMemory(int ordinal);

// Rank `rank` of `size` over `memory` (from LoadCudaMemory), the NCCL unique id exchanged
// through `store` under `name` within `timeout`. `memory` and `store` must outlive it.
// NotFound when the plugin cannot be loaded (the same on every rank of one build); other
// errors come from NCCL.
StatusOr<std::unique_ptr<parallel::Communicator>> LoadNcclCommunicator(
    DeviceMemory* memory, int rank, int size, const std::string& name, parallel::KvStore* store,
    std::chrono::milliseconds timeout);

}  // namespace ds::exec
