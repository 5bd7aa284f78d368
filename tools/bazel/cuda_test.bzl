"""Tests that exist only where the CUDA toolkit is.

cuda_only_test(rule, name, ...) defines `rule(name = name, ...)` (cc_test, sh_test) when the
toolkit was found (@local_cuda's HAVE_CUDA); without it, a test of the same name that passes
and prints "SKIPPED TARGET: //pkg:name (...)", which tools/test.sh counts as skipped and lists
by name, so a machine without the toolkit shows what it did not run instead of fewer tests.
"""

load("@local_cuda//:defs.bzl", "HAVE_CUDA")

def cuda_only_test(rule, name, **kwargs):
    if HAVE_CUDA:
        rule(name = name, **kwargs)
        return
    native.sh_test(
        name = name,
        size = "small",
        srcs = ["//tools/bazel:skipped_test.sh"],
        tags = kwargs.get("tags", []),
    )
