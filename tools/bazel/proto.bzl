"""Protobuf and gRPC C++ code from the system protoc, without network rules."""

def ds_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    """Generates C++ for `srcs` (in this package) and wraps it as cc_library `name`.

    With grpc = True the gRPC service stubs are generated too.
    """
    bases = [s[:-len(".proto")] for s in srcs]
    outs = []
    for b in bases:
        outs += [b + ".pb.h", b + ".pb.cc"]
        if grpc:
            outs += [b + ".grpc.pb.h", b + ".grpc.pb.cc"]
    plugin = ""
    if grpc:
        plugin = "--plugin=protoc-gen-grpc=$$(which grpc_cpp_plugin) --grpc_out=$(GENDIR) "
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc -I. --cpp_out=$(GENDIR) " + plugin +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//tools/bazel/syslibs:protobuf"] +
               (["//tools/bazel/syslibs:grpc"] if grpc else []),
        visibility = visibility,
    )
