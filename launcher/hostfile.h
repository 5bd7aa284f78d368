// Hostfile: the pool of hosts and slots a job may use, in DeepSpeed's format.
//
// One host per line, `<host> slots=<N>`; `#` starts a comment (whole line or trailing);
// blank lines and surrounding whitespace are ignored. The order of the lines is the order
// of the nodes (node rank 0 is the first host listed).
//
//   # rack 1
//   worker-0 slots=8
//   worker-1 slots=8   # spare PSU
//
// Differences from DeepSpeed's `_parse_hostfile` (deliberately stricter): text after
// `slots=N` is an error, not ignored; slots must be positive; host names are restricted to
// the characters that survive the --include/--exclude syntax and ssh's argv (see
// ParseHostfile). Pure functions, thread-safe.
//
//   DS_ASSIGN_OR_RETURN(std::vector<HostSlots> pool, LoadHostfile("/job/hostfile"));
//   // or, without a hostfile:
//   DS_ASSIGN_OR_RETURN(std::vector<HostSlots> pool, DefaultLocalHosts(num_devices));
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

// Largest `slots=N` accepted; guards against a typo allocating per-slot state for billions.
inline constexpr int kMaxSlotsPerHost = 65536;

struct HostSlots {
  std::string host;  // host name or ssh alias, as written in the hostfile
  int slots = 0;     // number of worker processes the host runs (> 0)
  int line = 0;      // 1-based line in the hostfile; 0 when not from a file
};

// Parses hostfile text; `source` names it in errors (a path, or "<flag>").
// Returns the hosts in file order. All errors are InvalidArgument with a
// "source:line: " prefix ("source: " for an empty file):
//   - a host listed twice (the message names the line of the first entry);
//   - no `slots=` token, or a second token that is not `slots=<N>`;
//   - N not a decimal integer, N <= 0 or N > kMaxSlotsPerHost;
//   - any token after `slots=N`;
//   - a host name that is not [A-Za-z0-9._-]+ or starts with '-' or '.'
//     ('@', ':' and ',' would clash with --include; a leading '-' would be an ssh option);
//   - no host at all (empty file, or only comments and blank lines).
StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& source);

// Reads `path` and parses it with the path as source. A missing file is NotFound
// (DeepSpeed then falls back to the local host: the caller decides); other I/O errors
// come from ErrnoToStatus.
StatusOr<std::vector<HostSlots>> LoadHostfile(const std::string& path);

// The pool used without a hostfile: this machine, named "localhost", with `slots`
// slots (line 0). InvalidArgument when slots <= 0 (e.g. no devices were found) or
// slots > kMaxSlotsPerHost.
StatusOr<std::vector<HostSlots>> DefaultLocalHosts(int slots);

}  // namespace ds::launcher
