"""Detects the CUDA toolkit at configure time and provides nvcc-built libraries.

`@local_cuda//:defs.bzl` exports HAVE_CUDA; when the toolkit is missing the library
targets exist but are empty, so everything else still builds.
"""

_CUDA_PATH = "/usr/local/cuda"

def _local_cuda_impl(ctx):
    cuda = ctx.os.environ.get("DS_CUDA_PATH", _CUDA_PATH)
    have = ctx.path(cuda + "/bin/nvcc").exists and ctx.path(cuda + "/include/cuda_runtime.h").exists
    if ctx.os.environ.get("DS_DISABLE_CUDA", "") == "1":
        have = False
    ctx.file("defs.bzl", "HAVE_CUDA = %s\nCUDA_PATH = \"%s\"\n" % (have, cuda))
    if not have:
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "cublas")
cc_library(name = "nccl")
""")
        return
    for entry in ["include", "lib"]:
        ctx.symlink(cuda + "/" + entry, entry)
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
)
cc_library(name = "cudart", srcs = ["lib/libcudart.so.13"], deps = [":cuda_headers"])
cc_library(
    name = "cublas",
    srcs = ["lib/libcublas.so.13", "lib/libcublasLt.so.13"],
    deps = [":cuda_headers"],
)
cc_library(name = "nccl", srcs = ["lib/libnccl.so.2"], deps = [":cuda_headers"])
""")

local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["DS_CUDA_PATH", "DS_DISABLE_CUDA"],
    local = True,
)

def cuda_objects(name, srcs, hdrs = [], copts = []):
    """Compiles .cu files with nvcc for sm_80 and sm_90 (cubin) plus compute_90 PTX."""
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".pic.o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = ("%s/bin/nvcc -std=c++17 -O3 -c -Xcompiler -fPIC -I. " % _CUDA_PATH +
                   "-gencode arch=compute_80,code=sm_80 " +
                   "-gencode arch=compute_90,code=sm_90 " +
                   "-gencode arch=compute_90,code=compute_90 " +
                   " ".join(copts) + " $(location %s) -o $@" % src),
        )
        objs.append(obj)
    return objs
