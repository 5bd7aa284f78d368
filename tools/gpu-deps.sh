#!/usr/bin/env bash
# tools/gpu-deps.sh: gathers, on a machine with the Debian packages (tools/setup.sh), what a
# bare CUDA machine lacks for tools/gpu-check.sh:
#   - Catch2's, OpenBLAS's and oneDNN's headers: the nvcc/g++ build of the kernel tests (the
#     CPU reference kernels they compare against multiply through OpenBLAS and oneDNN);
#   - bundle.tar.xz: every binary gpu-check runs, Bazel-built here (ds-worker, ds-data, the
#     CUDA and NCCL plugins, every GPU test and benchmark) with every
#     shared library they load that is neither glibc, libstdc++ nor CUDA's, OpenBLAS included.
# Everything goes to .gpu-deps/ (in .gitignore): about 15 MiB before oneDNN, whose library adds
# about 7 MiB xz'd; carry that folder to the GPU machine with the working tree, where
# gpu-check.sh picks it up:
#
#   tools/gpu-deps.sh            # here (builds the bundle's targets with Bazel)
#   tools/gpu-check.sh           # there, with .gpu-deps carried along
set -euo pipefail
cd "$(dirname "$0")/.."
D=.gpu-deps
rm -rf "$D"
mkdir -p "$D/include/catch2"
cp /usr/include/catch2/catch.hpp "$D/include/catch2/"
blas_inc=$(dirname "$(readlink -f /usr/include/x86_64-linux-gnu/cblas.h)")
cp "$blas_inc"/*.h "$D/include/"
# oneDNN's headers: kernels/cpu/gemm.cc (its library comes in the bundle, ds-worker loads it).
cp /usr/include/dnnl*.h /usr/include/dnnl*.hpp "$D/include/"
mkdir -p "$D/include/oneapi"
cp -r /usr/include/oneapi/dnnl "$D/include/oneapi/"

# The bundle: binaries in bundle/bin (the plugin beside them, where the loader looks), their
# libraries in bundle/lib (Bazel's test binaries load our libraries from _solib_k8 too).
# Every binary tools/gpu-check.sh runs, so the device machine builds nothing.
TARGETS=(//runtime/worker:ds-worker //tools/ds_data:ds-data //runtime/cuda:libds_cuda.so
         //parallel/comm/nccl:libds_nccl.so //runtime/worker:trainer_gpu_test
         //runtime/exec:cuda_loader_test //runtime/cuda:allocator_gpu_test
         //zero:device_states_gpu_test //parallel/comm/nccl:nccl_gpu_test //runtime/cuda:device_test
         //kernels/cuda:cuda_build_test //kernels/cuda:cuda_registration_test
         //kernels/cuda:gelu_gpu_test //kernels/cuda:conformance_gpu_test
         //kernels/cuda:optimizer_gpu_test //kernels/cuda/blas:linear_gpu_test
         //kernels/cuda/attention:attention_gpu_test //kernels/cuda:gemm_bench
         //kernels/cuda:adamw_bench //kernels/cuda/attention:attention_bench)
bazel build "${TARGETS[@]}"
B=$D/bundle
mkdir -p "$B/bin" "$B/lib"
for t in "${TARGETS[@]}"; do
  path=bazel-bin/${t#//}
  path=${path/://}
  cp "$path" "$B/bin/"
  ldd "$path" | awk '$3 ~ /^\// {print $1, $3}' |
    { grep -v -E '^(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|libcudart|libcublas|libcublasLt|libnccl|libcuda)\.so' || true; } |
    while read -r name file; do cp -L "$file" "$B/lib/$name"; done
done
# OpenBLAS for the nvcc/g++ build's CPU reference kernels (the bundle's binaries bring it too).
blas_lib=/usr/lib/x86_64-linux-gnu/libopenblas.so.0
cp -L "$blas_lib" "$B/lib/libopenblas.so.0"
ldd "$blas_lib" | awk '$1 ~ /^lib(gfortran|quadmath)/ {print $1, $3}' |
  while read -r name file; do cp -L "$file" "$B/lib/$name"; done
tar -cJf "$D/bundle.tar.xz" -C "$D" bundle
rm -rf "$B"
echo "gpu-deps: $(du -sh "$D" | cut -f1) in $D (carry it: run(..., carry=[\".gpu-deps\"]))"
