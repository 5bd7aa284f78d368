// NCCL as a loadable plugin (libds_nccl.so): a data-parallel NcclCommunicator for a rank whose
// model states are on its GPU, loaded by runtime/exec/cuda_loader.h only for such jobs, so
// nothing else maps libnccl (and a machine without it still trains on one GPU, or over Gloo).
// Its collectives are ordered after the memory's stream by the events the caller places
// (Communicator::OrderAfterStream), not after everything queued when they start.
#include <cstdio>
#include <memory>

#include "parallel/comm/nccl/nccl_communicator.h"
#include "runtime/core/device_memory.h"

extern "C" {

// The ABI between runtime/exec/cuda_loader.cc and this library.
int ds_nccl_plugin_abi_version() { return 1; }

// A communicator of `size` ranks over `memory`'s GPU and stream, bootstrapped through `store`
// under `name`; nullptr with the reason in `error` (NUL-terminated, truncated to error_size).
// The caller owns the result; `memory` and `store` must outlive it.
ds::parallel::Communicator* ds_nccl_create_communicator(ds::DeviceMemory* memory, int rank,
                                                        int size, const char* name,
                                                        ds::parallel::KvStore* store,
                                                        long long timeout_ms, char* error,
                                                        size_t error_size) {
  ds::parallel::NcclOptions o;
  o.rank = rank;
  o.size = size;
  o.device = memory->ordinal();
  o.name = name;
  o.bootstrap_timeout = std::chrono::milliseconds(timeout_ms);
  o.compute_stream = static_cast<cudaStream_t>(memory->native_stream());
  // The step runner places the ordering events itself, at each collective of the plan
  // (OrderAfterStream right after the producers are queued), so later compute overlaps.
  o.order_after_compute_stream = false;
  auto comm = ds::parallel::NcclCommunicator::Create(o, store);
  if (!comm.ok()) {
    std::snprintf(error, error_size, "%s", comm.status().message().c_str());
    return nullptr;
  }
  return std::move(comm).value().release();
}

}  // extern "C"
