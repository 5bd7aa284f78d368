// DS_CPU_ISA caps the host's vector paths. This test runs twice (BUILD.bazel): as is, and as
// cpu_isa_avx2_test with DS_CPU_ISA=avx2, where every check must report the AVX2 machine.
#include "runtime/core/cpu_isa.h"

#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

namespace ds {
namespace {

TEST_CASE("ParseCpuIsa knows the three levels and native", "[core][isa]") {
  CpuIsa isa = CpuIsa::kAvx512Bf16;
  CHECK(ParseCpuIsa("avx2", &isa));
  CHECK(isa == CpuIsa::kAvx2);
  CHECK(ParseCpuIsa("avx512", &isa));
  CHECK(isa == CpuIsa::kAvx512);
  CHECK(ParseCpuIsa("native", &isa));
  CHECK(isa == CpuIsa::kAvx512Bf16);
  CHECK(ParseCpuIsa("avx512_bf16", &isa));
  CHECK_FALSE(ParseCpuIsa("sse4", &isa));
  CHECK_FALSE(ParseCpuIsa("AVX2", &isa));
  CHECK(std::string(CpuIsaName(CpuIsa::kAvx512)) == "avx512");
}

TEST_CASE("HostCpuIsa is what the CPU has, lowered to DS_CPU_ISA", "[core][isa]") {
  const char* env = std::getenv("DS_CPU_ISA");
  CpuIsa cap = CpuIsa::kAvx512Bf16;
  if (env) REQUIRE(ParseCpuIsa(env, &cap));
  const CpuIsa expect = cap < DetectedCpuIsa() ? cap : DetectedCpuIsa();
  INFO("detected " << CpuIsaName(DetectedCpuIsa()) << ", DS_CPU_ISA " << (env ? env : "unset"));
  CHECK(HostCpuIsa() == expect);
  CHECK(CpuIsaCapped() == (expect != DetectedCpuIsa()));
  CHECK(CpuHasAvx512() == (expect >= CpuIsa::kAvx512));
  // The CPU's own answer for avx512f agrees with the detection.
  CHECK((DetectedCpuIsa() >= CpuIsa::kAvx512) ==
        (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")));
  if (env && std::string(env) == "avx2") CHECK_FALSE(CpuHasAvx512());
}

}  // namespace
}  // namespace ds
