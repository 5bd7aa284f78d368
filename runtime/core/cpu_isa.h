#pragma once

// The x86 vector features the host's kernels may use: what the CPU has, capped by the
// DS_CPU_ISA environment variable so that a newer CPU can run an older one's paths (CI forces
// the fallback of CPUs without AVX512_BF16 this way; users can compare the two on one host).
//
//   DS_CPU_ISA=avx2         the AVX2 paths only: no 16-lane loops, oneDNN capped at AVX2, bf16
//                           products as fp32 products of the widened values
//   DS_CPU_ISA=avx512       AVX-512 without its bf16 dot products
//   DS_CPU_ISA=avx512_bf16  (or unset, or "native") everything the CPU has
//
// Every check of a vector feature in the host's kernels goes through here, so one variable
// moves them all. The build itself targets AVX2; a CPU without it is not supported.

#include <string>

namespace ds {

enum class CpuIsa { kAvx2 = 0, kAvx512 = 1, kAvx512Bf16 = 2 };

// What the CPU has (avx512f + avx512bw for kAvx512; AVX512_BF16 or AMX-BF16 for kAvx512Bf16),
// lowered to DS_CPU_ISA's cap; read once per process.
CpuIsa HostCpuIsa();

// What the CPU has, whatever DS_CPU_ISA says.
CpuIsa DetectedCpuIsa();

// Whether DS_CPU_ISA lowered HostCpuIsa() below what the CPU has.
bool CpuIsaCapped();

// "avx2", "avx512", "avx512_bf16".
const char* CpuIsaName(CpuIsa isa);

// HostCpuIsa() >= kAvx512: the 16-lane loops' check.
bool CpuHasAvx512();

// Parses DS_CPU_ISA's value; false for a name it does not know.
bool ParseCpuIsa(const std::string& name, CpuIsa* isa);

}  // namespace ds
