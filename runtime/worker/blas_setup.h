// OpenBLAS picks its kernels once, when the library loads, from OPENBLAS_CORETYPE or its
// own CPU detection. Inside some VMs the detection falls back to the generic "Prescott"
// kernels, 3-5x slower than the AVX2/AVX-512 ones the CPU supports. Before anything else
// runs, ds-worker calls EnsureBlasKernels(): when OPENBLAS_CORETYPE is unset and OpenBLAS
// chose a core below what the CPU offers, it sets the variable and re-executes itself
// (once; the variable being set prevents a loop). A user's OPENBLAS_CORETYPE always wins.
#pragma once

#include <string>

namespace ds::worker {

void EnsureBlasKernels(int argc, char** argv);
// "SkylakeX (OPENBLAS_CORETYPE=SkylakeX)" or "Haswell (detected)", for logs and benchmarks.
std::string BlasCoreDescription();

}  // namespace ds::worker
