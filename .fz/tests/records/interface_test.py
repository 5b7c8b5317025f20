"""The `tpar` command and the NCCL drop-in include one header of src/, api/internal.h
(scripts/check-interface.py), on the repository and on made-up trees.

    python3 -m unittest discover -s tests/records -p '*_test.py'    (CTest: DocsNumbersMatchTheirRecords)
"""
import contextlib
import importlib.util
import io
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "check_interface", os.path.join(ROOT, "scripts", "check-interface.py"))
check_interface = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_interface)


class RepositoryInterface(unittest.TestCase):
    def test_tools_and_shim_include_nothing_of_src_but_the_interface(self):
        self.assertEqual([], check_interface.check(ROOT))

    def test_the_scan_sees_the_includes_of_the_interface(self):
        # A scan that finds nothing checks nothing: both the command and the shim use it.
        users = {path for path, _, target in check_interface.scan(ROOT)
                 if target == check_interface.INTERFACE}
        self.assertIn(os.path.join("tools", "tpar", "tune", "tune.h"), users)
        self.assertIn(os.path.join("nccl_shim", "shim_entry.cc"), users)
        self.assertTrue(os.path.isfile(os.path.join(ROOT, "src", check_interface.INTERFACE)))


class CheckerCatchesEachBreak(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tpar-interface-")
        for d in ["src/base", "src/api", "src/comm", "include/tpar", "tools/tpar/common",
                  "nccl_shim/tests", "tests/common"]:
            os.makedirs(os.path.join(self.root, d))

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, rel, includes):
        with open(os.path.join(self.root, rel), "w") as f:
            f.write("// made up\n" + "".join(line + "\n" for line in includes))
        return rel

    def problems(self):
        return check_interface.check(self.root)

    def test_the_interface_and_headers_outside_src_pass(self):
        self.write("tools/tpar/common/a.cc", [
            '#include "api/internal.h"', '#include "tpar/tpar.h"',
            '#include "tools/tpar/common/a.h"', "#include <sys/stat.h>",
            "#include <nlohmann/json.hpp>"])
        self.write("nccl_shim/b.cc", ['#include "route.h"', '#include <nccl.h>'])
        self.write("nccl_shim/tests/c.cc", ['#include "common/fifo_dir.h"',
                                            '#include "api/internal.h"  // fnv1a'])
        self.assertEqual([], self.problems())
        self.assertEqual(2, len(check_interface.scan(self.root)))

    def test_another_header_of_src_is_named_with_file_and_line(self):
        rel = self.write("tools/tpar/common/a.cc", ['#include "api/internal.h"',
                                                    '#include "base/env.h"'])
        got = self.problems()
        self.assertEqual(1, len(got), got)
        self.assertTrue(got[0].startswith(rel + ":3: includes src/base/env.h"), got[0])

    def test_every_kind_of_source_and_include_is_caught(self):
        cases = {
            "tools/tpar/common/k.cu": '#include "comm/comm.h"',
            "tools/tpar/common/k.h": '  #  include "base/log.h"',
            "nccl_shim/k.cc": "#include <comm/nccl_route.h>",
            "nccl_shim/tests/k.cc": '#include "api/api_log.h"',  # the interface's folder
            "nccl_shim/k2.cc": '#include "../src/base/hash.h"',
            "tools/tpar/common/k2.cc": '#include "src/comm/comm.h"',
        }
        for rel, line in cases.items():
            self.write(rel, [line])
        got = self.problems()
        self.assertEqual(len(cases), len(got), got)
        for rel in cases:
            self.assertTrue(any(p.startswith(rel + ":2:") for p in got), (rel, got))

    def test_files_outside_tools_and_the_shim_are_not_checked(self):
        self.write("tests/common/t.cc", ['#include "comm/comm.h"'])
        self.write("src/api/internal.h", ['#include "base/env.h"'])
        self.assertEqual([], self.problems())

    def test_main_exits_1_on_a_break_and_0_without(self):
        argv = sys.argv
        try:
            sys.argv = ["check-interface.py", "--root", self.root]
            self.write("nccl_shim/a.cc", ['#include "api/internal.h"'])
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(0, check_interface.main())
            self.write("nccl_shim/b.cc", ['#include "base/env.h"'])
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(1, check_interface.main())
            self.assertIn("nccl_shim/b.cc:2: includes src/base/env.h", out.getvalue())
        finally:
            sys.argv = argv


if __name__ == "__main__":
    unittest.main()
