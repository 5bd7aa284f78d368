"""Compiler options shared by every ds-runtime target."""
DS_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
    "-DSPDLOG_SHARED_LIB",
    "-DSPDLOG_COMPILED_LIB",
    "-DSPDLOG_FMT_EXTERNAL",
]

DS_TEST_COPTS = DS_COPTS
