#!/usr/bin/env python3
"""Every key the config reader stores must change what runs: each field of the structs in
runtime/config/job_config.h must be read somewhere outside runtime/config (tests do not count),
unless its line says why not with a marker comment:

    [reader]  the reader's own bookkeeping (a block was present, the file name, the warnings)
    [warned]  a DeepSpeed setting that changes nothing here: the reader warns when it is given

A field stored and read by nobody is a key that is parsed and silently dropped; this check fails
naming it. Run from the repository root (tools/test.sh does); `--self-test` checks the checker.
"""
import os
import re
import sys

HEADER = "runtime/config/job_config.h"
FIELD = re.compile(r"^\s+(?!return\b|using\b)[\w:<>, ]+?[\s*&](\w+)(?:\s*=\s*[^;]+|\{\})?;(.*)$")


def fields(text):
    """(name, line number, marker) of every data member in the header's structs."""
    out, depth = [], 0
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0]
        if depth > 0 and "(" not in code:
            m = FIELD.match(line)
            if m:
                marker = re.search(r"\[(reader|warned)\]", m.group(2) or "")
                out.append((m.group(1), n, marker.group(1) if marker else None))
        depth += code.count("{") - code.count("}")
    return out


def sources(root):
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "bazel-"))]
        rel = os.path.relpath(base, root)
        if rel.startswith("runtime/config") or rel.startswith("tests"):
            continue
        for f in files:
            if f.endswith((".cc", ".h", ".cu")) and not f.endswith("_test.cc"):
                yield os.path.join(base, f)


def check(root):
    with open(os.path.join(root, HEADER)) as f:
        found = fields(f.read())
    text = "\n".join(open(p, errors="ignore").read() for p in sources(root))
    bad = []
    for name, line, marker in found:
        used = re.search(r"(\.|->)" + name + r"\b", text)
        if not used and not marker:
            bad.append(f"{HEADER}:{line}: {name} is parsed and read by nothing outside "
                       "runtime/config: make it change what runs, or have the reader warn "
                       "(MapReader::Inert) and mark it [warned]")
    return found, bad


def self_test():
    text = ("struct A {\n  int used = 1;\n  bool flag = false;  // [reader]\n"
            "  double dropped = 2.0;\n  std::vector<std::string> list;\n};\n")
    names = [(n, m) for n, _, m in fields(text)]
    assert names == [("used", None), ("flag", "reader"), ("dropped", None), ("list", None)], names
    print("check_config_fields self-test: ok")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return 0
    found, bad = check(".")
    for b in bad:
        print(b)
    print(f"config fields: {len(found)} fields checked, {len(bad)} read by nothing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
