#include "runtime/worker/blas_setup.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace ds::worker {
namespace {

// The best OpenBLAS core this CPU can run, or nullptr.
const char* BestCore() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

int Rank(const char* core) {
  if (!core) return 0;
  if (!strcasecmp(core, "skylakex") || !strcasecmp(core, "cooperlake") ||
      !strcasecmp(core, "sapphirerapids"))
    return 3;
  if (!strcasecmp(core, "haswell") || !strcasecmp(core, "zen")) return 2;
  return 1;
}

}  // namespace

void EnsureBlasKernels(int argc, char** argv) {
  (void)argc;
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const char* best = BestCore();
  const char* now = openblas_get_corename();
  if (!best || Rank(now) >= Rank(best)) return;
  setenv("OPENBLAS_CORETYPE", best, 1);
  std::fprintf(stderr,
               "ds-worker: OpenBLAS chose %s kernels on a CPU that runs %s; "
               "restarting with OPENBLAS_CORETYPE=%s\n",
               now ? now : "generic", best, best);
  execv("/proc/self/exe", argv);
  std::perror("ds-worker: re-exec failed; continuing with the slower kernels");
}

std::string BlasCoreDescription() {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  std::string core = openblas_get_corename();
  return env ? core + " (OPENBLAS_CORETYPE=" + env + ")" : core + " (detected)";
}

}  // namespace ds::worker
