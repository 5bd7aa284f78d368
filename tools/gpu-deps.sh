#!/usr/bin/env bash
# tools/gpu-deps.sh: gathers, on a machine with the Debian packages (tools/setup.sh), what
# tools/gpu-check.sh's nvcc/g++ build needs and a bare CUDA machine lacks: Catch2's header,
# OpenBLAS's headers and library (the CPU reference kernels the GPU tests compare against).
# They go to .gpu-deps/ (ignored by git through .git/info/exclude), about 40 MiB; carry that
# folder to the GPU machine with the working tree, where gpu-check.sh picks it up:
#
#   tools/gpu-deps.sh            # here
#   tools/gpu-check.sh           # there, with .gpu-deps carried along
set -euo pipefail
cd "$(dirname "$0")/.."
D=.gpu-deps
rm -rf "$D"
mkdir -p "$D/include/catch2" "$D/lib"
cp /usr/include/catch2/catch.hpp "$D/include/catch2/"
blas_inc=$(dirname "$(readlink -f /usr/include/x86_64-linux-gnu/cblas.h)")
cp "$blas_inc"/*.h "$D/include/"
blas_lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)
cp "$blas_lib" "$D/lib/libopenblas.so.0"
ln -s libopenblas.so.0 "$D/lib/libopenblas.so"
# OpenBLAS's own dependencies that a non-Debian image may lack.
for lib in libgfortran.so.5 libquadmath.so.0; do
  src=$(ldd "$blas_lib" | awk -v l="$lib" '$1 == l {print $3}')
  [[ -n "$src" ]] && cp "$(readlink -f "$src")" "$D/lib/$lib"
done
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
echo "gpu-deps: $(du -sh "$D" | cut -f1) in $D (carry it: run(..., carry=[\".gpu-deps\"]))"
