"""Detects the CUDA toolkit at configure time and provides nvcc-built libraries.

`@local_cuda//:defs.bzl` exports HAVE_CUDA and CUDA_PATH; when the toolkit is missing
the library targets exist but are empty, so everything else still builds.

Environment read at fetch time (changing it re-runs the rule):
  DS_CUDA_PATH=/opt/cuda   toolkit root (default /usr/local/cuda)
  DS_DISABLE_CUDA=1        behave as if no toolkit were installed

Only the runtime (cudart) and the libraries are linked, never the driver (-lcuda): a
binary that needs libcuda.so.1 does not even start on a machine without a driver.
"""

_CUDA_PATH = "/usr/local/cuda"

# Architectures every .cu file is built for: cubins for A100 (sm_80) and H100/H200
# (sm_90), plus compute_90 PTX that newer GPUs JIT-compile. cuda_build_test checks the
# linked fatbinary for exactly these.
CUDA_GENCODE = [
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

_EMPTY_BUILD = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "cublas")
cc_library(name = "nccl")
"""

_CUDA_BUILD = """
package(default_visibility = ["//visibility:public"])

# nvcc, through a wrapper that execs the toolkit's own binary (nvcc finds cicc, ptxas
# and its nvcc.profile next to its real path).
exports_files(["nvcc"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inl", "include/**/*.cuh"]),
    includes = ["include"],
)
cc_library(name = "cudart", srcs = ["lib/libcudart.so.13"], deps = [":cuda_headers"])
cc_library(
    name = "cublas",
    srcs = ["lib/libcublas.so.13", "lib/libcublasLt.so.13"],
    deps = [":cuda_headers", ":cudart"],
)
cc_library(name = "nccl", srcs = ["lib/libnccl.so.2"], deps = [":cuda_headers", ":cudart"])
"""

def _local_cuda_impl(ctx):
    cuda = ctx.os.environ.get("DS_CUDA_PATH", _CUDA_PATH)
    have = ctx.path(cuda + "/bin/nvcc").exists and ctx.path(cuda + "/include/cuda_runtime.h").exists
    if ctx.os.environ.get("DS_DISABLE_CUDA", "") == "1":
        have = False
    ctx.file("defs.bzl", "HAVE_CUDA = %s\nCUDA_PATH = \"%s\"\n" % (have, cuda))
    if not have:
        ctx.file("BUILD", _EMPTY_BUILD)
        return
    for entry in ["include", "lib"]:
        ctx.symlink(cuda + "/" + entry, entry)
    ctx.file("nvcc", "#!/bin/sh\nexec \"%s/bin/nvcc\" \"$@\"\n" % cuda, executable = True)
    ctx.file("BUILD", _CUDA_BUILD)

local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["DS_CUDA_PATH", "DS_DISABLE_CUDA"],
    local = True,
)

def cuda_objects(name, srcs, hdrs = [], copts = []):
    """Compiles each .cu file with nvcc for CUDA_GENCODE; returns the object labels.

    Call only when HAVE_CUDA (the nvcc label exists only then). `hdrs` are the headers
    the .cu files include (repo-rooted: `-I.` is the execution root). Put the returned
    objects in a cc_library's srcs next to a dep on @local_cuda//:cudart.
    """
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_objects: %s is not a .cu file" % src)
        obj = name + "_" + src.replace("/", "_")[:-len(".cu")] + ".pic.o"
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            tools = ["@local_cuda//:nvcc"],
            cmd = " ".join([
                "$(location @local_cuda//:nvcc)",
                "-std=c++17 -O3 -c -Xcompiler -fPIC -I.",
            ] + CUDA_GENCODE + copts + ["$(location %s) -o $@" % src]),
            message = "nvcc %s" % src,
        )
        objs.append(":" + obj)
    return objs
