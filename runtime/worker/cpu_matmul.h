// The CPU's matrix products for a job (kernels/cpu/gemm.h): the library device.cpu_gemm names,
// and whether a bf16 model's linear layers multiply bf16 inputs (device.cpu_bf16_matmul: bf16,
// fp32, or auto = bf16 where the CPU has AVX512_BF16 or AMX). ds-worker applies the library
// once at start; the trainer asks for the executors' matmul precision.
#pragma once

#include <string>

#include "runtime/config/job_config.h"
#include "runtime/core/dtype.h"

namespace ds::worker {

// Sets the process's GEMM library and returns the line the worker logs: the library, oneDNN's
// instruction set, and how bf16 products run, e.g. "oneDNN (avx512_core); bf16 products: fp32
// on the widened weights (no AVX512_BF16 or AMX here)".
std::string ApplyCpuGemm(const config::JobConfig& job);
// OpArgs::matmul for this job's executors: kBF16 for a bf16 model on the CPU whose products run
// in bf16 (see above), else kF32.
DType CpuMatmulDtype(const config::JobConfig& job);

}  // namespace ds::worker
