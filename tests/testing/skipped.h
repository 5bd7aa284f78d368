// A test case that cannot run on this machine (a CPU without the ISA, one GPU where two are
// needed, no tmpfs) reports itself here instead of passing silently: one line on stdout,
//   SKIPPED CASE: <what> (<why>)
// which tools/test.sh counts into the summary's skipped figure and lists by name.
//
//   if (!HasAvx512()) return ReportSkippedCase("cpu_adam AVX-512 path", "the CPU lacks avx512f");
#pragma once

#include <cstdio>
#include <string>

namespace ds::testing {

inline void ReportSkippedCase(const std::string& what, const std::string& why) {
  std::printf("SKIPPED CASE: %s (%s)\n", what.c_str(), why.c_str());
  std::fflush(stdout);
}

}  // namespace ds::testing
