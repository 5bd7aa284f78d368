// The ops that have no CUDA kernel yet, as BUILD.bazel's PENDING_CUDA_OPS lists them: a test
// that includes this passes that list as the DS_CUDA_PENDING_OPS define (local_defines).
// Used by cuda_registration_test (the list stays exact) and conformance_gpu_test (no case is
// asked of a pending op).
#pragma once

#include <set>
#include <sstream>
#include <string>

namespace ds::kernels {

inline std::set<std::string> PendingCudaOps() {
  std::set<std::string> out;
  std::stringstream ss(DS_CUDA_PENDING_OPS);
  std::string op;
  while (std::getline(ss, op, ','))
    if (!op.empty()) out.insert(op);
  return out;
}

}  // namespace ds::kernels
