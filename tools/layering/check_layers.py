#!/usr/bin/env python3
"""Layering check for ds-runtime: fails when a quoted #include crosses a forbidden edge.

Every C++/CUDA source (.h .cc .cu .cuh) is placed in a layer by the longest matching path
pattern of tools/layering/layers.rules (format documented at the top of that file). Each
repo-rooted `#include "dir/file.h"` must stay in its layer or go to a layer that the
including one "may include" (transitively), and must match no `forbid` line. Files that
match an `exempt` glob (tests) may include across the layer order but are held to the `forbid`
lines, and other files may not include them. Files
that match a `compose` glob (binaries' mains, benchmarks) may include across the layer order,
since they put the layers together, but are held to the `forbid` lines like every other file,
and other files may not include them either. A source file in no layer is a violation, so new
folders must be placed. Two folders whose files include each other are a violation even where
the layers allow both edges (a folder with a file placed lower than the rest): each folder
includes another in one direction only, so a reader can order the rooms.

Run:  python3 tools/layering/check_layers.py [--root DIR] [--rules FILE]
Prints `FILE:LINE: includes "X" (FROM -> TO): RULE` per violation,
`folders A and B include each other: FILE:LINE -> ..., FILE:LINE -> ...` per folder cycle, then
`layering: N files, M includes checked, K violations`. Exit 0 when there is none, 1
otherwise, 2 on a bad rules file. Stdlib only.
"""
import argparse
import collections
import fnmatch
import os
import re
import subprocess
import sys

SOURCE_EXTS = (".h", ".cc", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
Rule = collections.namedtuple("Rule", "cite")  # "layers.rules:N <line text>"
Forbid = collections.namedtuple("Forbid", "src dst rule")
Violation = collections.namedtuple("Violation", "key text")  # key: FILE: includes "HEADER"


class RulesError(Exception):
    pass


def matches(pattern, path):
    """dir/ matches the subtree, dir/* the files directly in dir, anything else one file."""
    if pattern.endswith("/*"):
        rest = path[len(pattern) - 1:]
        return path.startswith(pattern[:-1]) and "/" not in rest
    if pattern.endswith("/"):
        return path.startswith(pattern)
    return path == pattern


class Rules:
    def __init__(self, name):
        self.name = name
        self.patterns = []  # (pattern, layer), longest first once parsed
        self.defined = {}  # layer -> Rule of its first `layer` line
        self.allow = {}  # layer -> Rule of its `may include` line
        self.edges = collections.defaultdict(set)
        self.reach = {}  # layer -> every layer it may include, itself too
        self.forbids = []
        self.exempt = []  # (glob, Rule)
        self.compose = []  # (glob, Rule)

    def layer_of(self, path):
        return next((layer for p, layer in self.patterns if matches(p, path)), None)

    def exempt_rule(self, path):
        return next((r for g, r in self.exempt if fnmatch.fnmatchcase(path, g)), None)

    def compose_rule(self, path):
        return next((r for g, r in self.compose if fnmatch.fnmatchcase(path, g)), None)

    def forbid_rule(self, src, dst):
        return next((f.rule for f in self.forbids
                     if matches(f.src, src) and matches(f.dst, dst)), None)


def parse_line(rules, text, rule):
    m = re.fullmatch(r"layer\s+(\w+)\s*:\s*(.+)", text)
    if m:
        for pattern in m[2].split():
            if any(p == pattern for p, _ in rules.patterns):
                raise RulesError(f"{rule.cite}: pattern {pattern} is placed twice")
            rules.patterns.append((pattern, m[1]))
        rules.defined.setdefault(m[1], rule)
        return
    m = re.fullmatch(r"(\w+)\s+may\s+include\s*:\s*(.*)", text)
    if m:
        rules.edges[m[1]].update(m[2].split())
        rules.allow.setdefault(m[1], rule)
        return
    m = re.fullmatch(r"forbid\s+(\S+)\s*->\s*(\S+)\s*(:.*)?", text)
    if m:
        rules.forbids.append(Forbid(m[1], m[2], rule))
        return
    m = re.fullmatch(r"(exempt|compose)\s+(.+)", text)
    if m:
        getattr(rules, m[1]).extend((g, rule) for g in m[2].split())
        return
    raise RulesError(f"{rule.cite}: cannot parse this line")


def close_layers(rules):
    """Checks every named layer exists, computes reach, and refuses cycles."""
    for layer, others in list(rules.edges.items()):
        for name in others | {layer}:
            if name not in rules.defined:
                raise RulesError(f"{rules.name}: unknown layer {name!r} (in {layer} may include)")
    for layer in rules.defined:
        seen, todo = set(), list(rules.edges[layer])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(rules.edges[name])
        if layer in seen:
            raise RulesError(f"{rules.defined[layer].cite}: layer {layer} is in a cycle")
        rules.reach[layer] = seen | {layer}
    rules.patterns.sort(key=lambda pl: -len(pl[0].rstrip("*")))


def parse_rules(path):
    rules = Rules(os.path.basename(path))
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            text = raw.split("#", 1)[0].strip()
            if text:
                parse_line(rules, text, Rule(f"{rules.name}:{n} {text}"))
    close_layers(rules)
    return rules


def list_sources(root):
    """Tracked plus untracked-but-not-ignored sources; os.walk where git is unavailable."""
    globs = ["*" + ext for ext in SOURCE_EXTS]
    cmd = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"]
    try:
        out = subprocess.run(cmd + globs, cwd=root, capture_output=True, check=True).stdout
        files = out.decode("utf-8").split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = walk_sources(root)
    return sorted({p for p in files if p and os.path.isfile(os.path.join(root, p))})


def walk_sources(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "bazel-"))]
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        for name in filenames:
            if name.endswith(SOURCE_EXTS):
                yield name if rel == "." else f"{rel}/{name}"


def includes(filename):
    with open(filename, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if m:
                yield n, m[1]


def edge_problem(rules, path, layer, inc):
    """Returns (target label, rule cite) when `path` may not include `inc`, else None."""
    target = "proto/" + inc.rsplit("/", 1)[-1] if inc.endswith(".pb.h") else inc
    to = rules.layer_of(target)
    forbid = rules.forbid_rule(path, target)
    if forbid:
        return to or "?", forbid.cite
    exempt = rules.exempt_rule(target)
    if exempt:
        return "test-only", exempt.cite
    compose = rules.compose_rule(target)
    if compose:
        return "binary-only", compose.cite
    if to is None:
        return "?", f"{rules.name}: the included file is in no layer"
    if to not in rules.reach[layer]:
        rule = rules.allow.get(layer) or rules.defined[layer]
        return to, rule.cite
    return None


def check_forbids(rules, root, path, top_dirs, out, label="composes"):
    """A compose or exempt file's includes against the forbid lines only; returns the includes
    checked."""
    checked = 0
    for n, inc in includes(os.path.join(root, path)):
        if inc.split("/", 1)[0] not in top_dirs and not inc.endswith(".pb.h"):
            continue
        checked += 1
        target = "proto/" + inc.rsplit("/", 1)[-1] if inc.endswith(".pb.h") else inc
        forbid = rules.forbid_rule(path, target)
        if forbid:
            out.append(Violation(f'{path}: includes "{inc}"',
                                 f'{path}:{n}: includes "{inc}" ({label} -> '
                                 f'{rules.layer_of(target) or "?"}): {forbid.cite}'))
    return checked


def folder_edges(root, paths, top_dirs):
    """{(folder, included folder): first "FILE:LINE" that includes it} over `paths`."""
    edges = {}
    for path in paths:
        here = os.path.dirname(path)
        for n, inc in includes(os.path.join(root, path)):
            if inc.endswith(".pb.h") or inc.split("/", 1)[0] not in top_dirs:
                continue
            there = os.path.dirname(inc)
            if there != here:
                edges.setdefault((here, there), f"{path}:{n}")
    return edges


def check_folders(rules, root, paths, top_dirs, out):
    """Appends a violation per pair of folders that include each other."""
    edges = folder_edges(root, [p for p in paths if not rules.compose_rule(p)], top_dirs)
    for (a, b), where in sorted(edges.items()):
        back = edges.get((b, a))
        if a < b and back:
            out.append(Violation(f"folders {a} {b}",
                                 f"folders {a} and {b} include each other: {where} -> {b}, "
                                 f"{back} -> {a}"))


def check_file(rules, root, path, top_dirs, out):
    """Appends the violations of one file to out; returns the includes it checked."""
    layer = rules.layer_of(path)
    if layer is None:
        out.append(Violation(f"{path}: file is in no layer",
                             f"{path}:1: file is in no layer: place its folder in {rules.name}"))
        return 0
    checked = 0
    for n, inc in includes(os.path.join(root, path)):
        if inc.split("/", 1)[0] not in top_dirs and not inc.endswith(".pb.h"):
            continue  # not repo-rooted (a third-party header in quotes)
        checked += 1
        problem = edge_problem(rules, path, layer, inc)
        if problem:
            out.append(Violation(f'{path}: includes "{inc}"',
                                 f'{path}:{n}: includes "{inc}" ({layer} -> {problem[0]}): '
                                 f"{problem[1]}"))
    return checked


def run(root, rules_path, out_stream=sys.stdout):
    """Checks the tree under root; prints the report and returns the exit status."""
    try:
        rules = parse_rules(rules_path)
    except (OSError, RulesError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    sources = list_sources(root)
    top_dirs = {p.split("/", 1)[0] for p in sources if "/" in p}
    top_dirs |= {p.split("/", 1)[0] for p, _ in rules.patterns if "/" in p}
    checked_files = [p for p in sources if not rules.exempt_rule(p)]
    violations = []
    checked = sum(check_forbids(rules, root, p, top_dirs, violations) if rules.compose_rule(p)
                  else check_file(rules, root, p, top_dirs, violations) for p in checked_files)
    check_folders(rules, root, checked_files, top_dirs, violations)
    for p in sources:
        if rules.exempt_rule(p):
            check_forbids(rules, root, p, top_dirs, violations, label="test")
    for v in violations:
        print(v.text, file=out_stream)
    print(f"layering: {len(checked_files)} files, {checked} includes checked, "
          f"{len(violations)} violations", file=out_stream)
    return 1 if violations else 0


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)),
                        help="repository root (default: two folders above this script)")
    parser.add_argument("--rules", default=os.path.join(here, "layers.rules"),
                        help="rules file (default: layers.rules next to this script)")
    args = parser.parse_args(argv)
    return run(args.root, args.rules)


if __name__ == "__main__":
    sys.exit(main())
