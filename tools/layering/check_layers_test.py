#!/usr/bin/env python3
"""Tests of check_layers.py on a tiny fake tree. Run: python3 tools/layering/check_layers_test.py"""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

RULES = """\
# test rules
exempt *_test.cc
compose *_main.cc
layer base: lib/base/
layer core: lib/core/
core may include: base
layer app: app/
app may include: core
forbid app/ -> lib/base/secret.h : nobody outside base reads it
"""


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.rules = os.path.join(self.root, "layers.rules")
        with open(self.rules, "w") as f:
            f.write(RULES)
        self.write("lib/base/base.h", "#pragma once\n")
        self.write("lib/base/secret.h", "#pragma once\n")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def check(self):
        out = io.StringIO()
        rc = check_layers.run(self.root, self.rules, out)
        lines = out.getvalue().splitlines()
        return rc, lines[:-1], lines[-1]

    def test_allowed_includes_pass(self):
        self.write("lib/core/core.h", '#include "lib/base/base.h"\n#include <vector>\n')
        self.write("app/main.cc", '#include "app/x.h"\n#include "lib/core/core.h"\n'
                                  '#include "lib/base/base.h"\n#include "gtest/gtest.h"\n')
        self.write("app/x.h", "")
        rc, violations, summary = self.check()
        self.assertEqual(violations, [])
        self.assertEqual(rc, 0)
        # 5 files; the transitively allowed base include counts, the third-party one not.
        self.assertEqual(summary, "layering: 5 files, 4 includes checked, 0 violations")

    def test_forbidden_edge_reports_file_line_and_rule(self):
        self.write("app/a.cc", '// comment\n#include "lib/base/secret.h"\n')
        rc, violations, summary = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(violations, [
            'app/a.cc:2: includes "lib/base/secret.h" (app -> base): '
            "layers.rules:9 forbid app/ -> lib/base/secret.h : nobody outside base reads it"])
        self.assertTrue(summary.endswith(", 1 violations"), summary)

    def test_upward_include_is_reported(self):
        self.write("app/app.h", "")
        self.write("lib/core/core.cc", '#include "lib/core/core.h"\n#include "app/app.h"\n')
        self.write("lib/core/core.h", "")
        rc, violations, _ = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(violations, [
            'lib/core/core.cc:2: includes "app/app.h" (core -> app): '
            "layers.rules:6 core may include: base"])

    def test_test_file_is_exempt_but_not_includable(self):
        self.write("lib/base/base_test.cc", '#include "app/app.h"\n')
        self.write("app/app.h", "")
        rc, violations, summary = self.check()
        self.assertEqual((rc, violations), (0, []))
        self.assertTrue(summary.startswith("layering: 3 files,"))
        self.write("app/app.cc", '#include "lib/base/base_test.cc"\n')
        rc, violations, _ = self.check()
        self.assertEqual(violations, [
            'app/app.cc:1: includes "lib/base/base_test.cc" (app -> test-only): '
            "layers.rules:2 exempt *_test.cc"])

    def test_test_file_is_held_to_the_forbid_lines(self):
        self.write("app/app_test.cc", '#include "lib/base/secret.h"\n#include "app/app.h"\n')
        self.write("app/app.h", "")
        rc, violations, _ = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(violations, [
            'app/app_test.cc:1: includes "lib/base/secret.h" (test -> base): '
            "layers.rules:9 forbid app/ -> lib/base/secret.h : nobody outside base reads it"])

    def test_main_composes_across_layers_but_not_past_a_forbid(self):
        self.write("lib/core/core.h", "")
        self.write("lib/core/tool_main.cc", '#include "app/app.h"\n')
        self.write("app/app.h", "")
        rc, violations, _ = self.check()
        self.assertEqual((rc, violations), (0, []))
        self.write("app/app_main.cc", '#include "lib/base/secret.h"\n')
        rc, violations, _ = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(violations, [
            'app/app_main.cc:1: includes "lib/base/secret.h" (composes -> base): '
            "layers.rules:9 forbid app/ -> lib/base/secret.h : nobody outside base reads it"])
        self.write("app/app.cc", '#include "lib/core/tool_main.cc"\n')
        rc, violations, _ = self.check()
        self.assertIn('app/app.cc:1: includes "lib/core/tool_main.cc" (app -> binary-only): '
                      "layers.rules:3 compose *_main.cc", violations)

    def test_folders_that_include_each_other_are_reported(self):
        # lib/core/low.h sits in base's layer, so each edge alone is allowed.
        with open(self.rules, "a") as f:
            f.write("layer low: lib/core/low.h\nbase may include: low\n")
        self.write("lib/core/low.h", "")
        self.write("lib/core/core.h", '#include "lib/base/base.h"\n')
        self.write("lib/base/uses_low.h", '#include "lib/core/low.h"\n')
        rc, violations, _ = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(violations, [
            "folders lib/base and lib/core include each other: lib/base/uses_low.h:1 -> "
            "lib/core, lib/core/core.h:1 -> lib/base"])
        self.write("lib/core/core.h", "")  # one direction left: fine
        rc, violations, _ = self.check()
        self.assertEqual((rc, violations), (0, []))

    def test_unknown_package_is_reported(self):
        self.write("newpkg/thing.cc", '#include "lib/base/base.h"\n')
        self.write("app/app.cc", '#include "newpkg/thing.h"\n')
        rc, violations, _ = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(sorted(violations), [
            'app/app.cc:1: includes "newpkg/thing.h" (app -> ?): '
            "layers.rules: the included file is in no layer",
            "newpkg/thing.cc:1: file is in no layer: place its folder in layers.rules"])

    def test_proto_headers_and_bad_rules(self):
        with open(self.rules, "a") as f:
            f.write("layer proto: proto/\nbase may include: proto\n")
        self.write("lib/base/b.cc", '#include "proto/plan.pb.h"\n')
        self.write("lib/core/c.cc", '#include "lib/core/gen/x.pb.h"\n')
        self.assertEqual(self.check()[:2], (0, []))
        with open(self.rules, "a") as f:
            f.write("base may include: app\n")  # app -> core -> base -> app
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(check_layers.run(self.root, self.rules, io.StringIO()), 2)
        self.assertIn("layer base is in a cycle", err.getvalue())


if __name__ == "__main__":
    unittest.main()
