// Checks a swap directory (offload_*.nvme_path) on the node that will swap to it, before any
// step: it must exist, be a directory, and take a file created there (with O_DIRECT where its
// filesystem allows). Each error names the config key and the path.
//
//   DS_RETURN_IF_ERROR(CheckSwapDir("zero_optimization.offload_optimizer.nvme_path", path));
#pragma once

#include <string>

#include "runtime/base/status.h"

namespace ds::zero {

// NotFound (missing), FailedPrecondition (not a directory), PermissionDenied (cannot create a
// file there: read-only, no permission, or a filesystem that takes no files).
Status CheckSwapDir(const std::string& key, const std::string& path);

}  // namespace ds::zero
