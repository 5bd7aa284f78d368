#include "runtime/worker/cpu_matmul.h"

#include "kernels/cpu/gemm.h"
#include "runtime/core/cpu_isa.h"

namespace ds::worker {

using kernels::cpu::GemmLibrary;

std::string ApplyCpuGemm(const config::JobConfig& job) {
  GemmLibrary library = GemmLibrary::kAuto;
  kernels::cpu::ParseGemmLibrary(job.device.cpu_gemm, &library);  // the reader checked the name
  kernels::cpu::SetGemmLibrary(library);
  // gemm.h's kAuto: on avx512_core_bf16 oneDNN's gemm:jit takes what OpenBLAS takes elsewhere.
  const std::string isa = kernels::cpu::OneDnnIsa();
  std::string line =
      library == GemmLibrary::kOneDnn     ? "oneDNN"
      : library == GemmLibrary::kOpenBlas ? "OpenBLAS"
      : isa == "avx512_core_bf16"
          ? "oneDNN, its gemm:jit in two halves for fp32 products with a plain B of "
            "768+ columns (auto)"
          : "oneDNN, OpenBLAS for fp32 products with a plain B of 768+ columns (auto)";
  line += " (oneDNN ISA " + isa + ")";
  if (CpuIsaCapped())
    line += std::string("; DS_CPU_ISA caps the host's kernels at ") + CpuIsaName(HostCpuIsa()) +
            " (the CPU has " + CpuIsaName(DetectedCpuIsa()) + ")";
  if (!job.bf16.enabled || job.device.type != config::DeviceType::kCpu) return line;
  if (CpuMatmulDtype(job) == DType::kBF16)
    return line + "; bf16 products: bf16 inputs, fp32 accumulation (" +
           (kernels::cpu::HasNativeBf16Gemm() ? "native" : "emulated by oneDNN: slow") + ")";
  return line + "; bf16 products: fp32 on the widened weights" +
         (kernels::cpu::HasNativeBf16Gemm() ? "" : " (no AVX512_BF16 or AMX here)");
}

DType CpuMatmulDtype(const config::JobConfig& job) {
  if (!job.bf16.enabled || job.device.type != config::DeviceType::kCpu) return DType::kF32;
  const std::string& mode = job.device.cpu_bf16_matmul;
  const bool bf16 = mode == "bf16" || (mode == "auto" && kernels::cpu::HasNativeBf16Gemm());
  return bf16 ? DType::kBF16 : DType::kF32;
}

}  // namespace ds::worker
