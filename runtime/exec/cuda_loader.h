// Loads the CUDA backend plugin (libds_cuda.so, runtime/cuda/cuda_backend_plugin.cc) on
// demand and makes a DeviceMemory on one GPU. Loading registers every op's CUDA kernels in
// the kernel registry; CPU-only runs never load it.
//
// Where it looks, first found wins: $DS_CUDA_BACKEND (a file path); next to the running
// executable (tools/build.sh installs it into bin/); the executable's Bazel runfiles
// (runtime/cuda/libds_cuda.so). Errors say where it looked and why loading failed.
// Thread-compatible: call it from one thread (the trainer's Build).
#pragma once

#include <memory>

#include "runtime/base/status.h"
#include "runtime/exec/device_memory.h"

namespace ds {

StatusOr<std::unique_ptr<DeviceMemory>> LoadCudaMemory(int ordinal);

}  // namespace ds
