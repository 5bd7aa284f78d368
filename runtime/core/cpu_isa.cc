#include "runtime/core/cpu_isa.h"

#include <cstdio>
#include <cstdlib>

namespace ds {
namespace {

CpuIsa Detected() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw"))
    return CpuIsa::kAvx2;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16; leaf 7 sub-leaf 0, EDX bit 22: AMX-BF16.
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(1));
  const bool avx512_bf16 = (eax >> 5) & 1;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
  const bool amx_bf16 = (edx >> 22) & 1;
  return avx512_bf16 || amx_bf16 ? CpuIsa::kAvx512Bf16 : CpuIsa::kAvx512;
}

struct Isa {
  CpuIsa detected;
  CpuIsa chosen;
};

Isa Choose() {
  const CpuIsa detected = Detected();
  const char* env = std::getenv("DS_CPU_ISA");
  CpuIsa cap = CpuIsa::kAvx512Bf16;
  if (env && *env && !ParseCpuIsa(env, &cap)) {
    std::fprintf(stderr,
                 "DS_CPU_ISA=%s: unknown; use avx2, avx512 or avx512_bf16 (native). Using what "
                 "the CPU has.\n",
                 env);
    cap = CpuIsa::kAvx512Bf16;
  }
  return {detected, cap < detected ? cap : detected};
}

const Isa& Chosen() {
  static const Isa isa = Choose();
  return isa;
}

}  // namespace

CpuIsa HostCpuIsa() { return Chosen().chosen; }

CpuIsa DetectedCpuIsa() { return Chosen().detected; }

bool CpuIsaCapped() { return Chosen().chosen != Chosen().detected; }

bool CpuHasAvx512() { return HostCpuIsa() >= CpuIsa::kAvx512; }

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "?";
}

bool ParseCpuIsa(const std::string& name, CpuIsa* isa) {
  if (name == "avx2")
    *isa = CpuIsa::kAvx2;
  else if (name == "avx512")
    *isa = CpuIsa::kAvx512;
  else if (name == "avx512_bf16" || name == "native")
    *isa = CpuIsa::kAvx512Bf16;
  else
    return false;
  return true;
}

}  // namespace ds
