// The CUDA backend as a loadable plugin (libds_cuda.so): every op's CUDA kernels (registered
// into the host program's kernel registry when the library loads: the program exports its
// symbols with -rdynamic, so the registration calls bind to its registry) and CudaMemory.
// A CPU-only run never maps cuBLAS / cuBLASLt (hundreds of MiB of address space, ~200 MiB
// resident at load); runtime/exec/cuda_loader.h loads this on device.type cuda.
#include <cstdio>
#include <memory>

#include "runtime/cuda/cuda_memory.h"

extern "C" {

// The ABI between runtime/exec/cuda_loader.cc and this library.
int ds_cuda_plugin_abi_version() { return 1; }

// A CudaMemory for device `ordinal`, or nullptr with the reason in `error` (NUL-terminated,
// truncated to error_size). The caller owns the result.
ds::DeviceMemory* ds_cuda_create_memory(int ordinal, char* error, size_t error_size) {
  auto m = ds::cuda::CudaMemory::Create(ordinal);
  if (!m.ok()) {
    std::snprintf(error, error_size, "%s", m.status().message().c_str());
    return nullptr;
  }
  return std::move(m).value().release();
}

}  // extern "C"
