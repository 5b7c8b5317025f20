"""Folders of src/ are layers: no include runs from a lower floor back up, and folders of one
floor do not include each other (scripts/check-layers.py), on the repository and on made-up trees.

    python3 -m unittest discover -s tests/records -p '*_test.py'    (CTest: DocsNumbersMatchTheirRecords)
"""
import importlib.util
import os
import random
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "check_layers", os.path.join(ROOT, "scripts", "check-layers.py"))
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)


class RepositoryLayers(unittest.TestCase):
    def test_no_include_runs_back_up(self):
        self.assertEqual([], check_layers.check(ROOT))

    def test_the_scan_sees_the_includes_between_folders(self):
        pairs = {(own, target) for _, _, own, target, _ in check_layers.scan(ROOT)}
        # Each of these is a real dependency; a scan that misses them checks nothing.
        for pair in [("comm", "tuner"), ("tuner", "registry"), ("registry", "kernels"),
                     ("api", "comm"), ("topology", "base")]:
            self.assertIn(pair, pairs)

    def test_every_folder_of_src_is_on_a_floor(self):
        src = os.path.join(ROOT, "src")
        for name in os.listdir(src):
            if os.path.isdir(os.path.join(src, name)):
                self.assertIsNotNone(check_layers.floor_of(name), name)


class CheckerCatchesEachBreak(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tpar-layers-")
        for names in check_layers.FLOORS:
            for n in names:
                os.makedirs(os.path.join(self.root, "src", n))

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, folder, includes):
        name = "f%06d.cc" % random.randrange(10**6)
        path = os.path.join(self.root, "src", folder, name)
        with open(path, "w") as f:
            f.write("// made up\n" + "".join('#include "%s"\n' % i for i in includes))
        return os.path.join("src", folder, name)

    def test_downward_and_own_folder_includes_pass(self):
        lo, hi = sorted(random.sample(range(len(check_layers.FLOORS)), 2))
        low = random.choice(check_layers.FLOORS[lo])
        high = random.choice(check_layers.FLOORS[hi])
        self.write(high, [low + "/x.h", high + "/y.h", "tpar/tpar.h"])
        self.assertEqual([], check_layers.check(self.root))

    def test_an_include_back_up_is_named(self):
        lo, hi = sorted(random.sample(range(len(check_layers.FLOORS)), 2))
        low = random.choice(check_layers.FLOORS[lo])
        high = random.choice(check_layers.FLOORS[hi])
        path = self.write(low, ["%s/up.h" % high])
        problems = check_layers.check(self.root)
        self.assertEqual(1, len(problems), problems)
        self.assertTrue(problems[0].startswith(path + ":2:"), problems)
        self.assertIn("src/%s" % high, problems[0])

    def test_folders_of_one_floor_do_not_include_each_other(self):
        floor = next(f for f in check_layers.FLOORS if len(f) > 1)
        a, b = random.sample(floor, 2)
        self.write(a, ["%s/side.h" % b])
        self.assertEqual(1, len(check_layers.check(self.root)))

    def test_a_folder_on_no_floor_is_reported(self):
        os.makedirs(os.path.join(self.root, "src", "stray"))
        self.write("stray", ["base/error.h"])
        problems = check_layers.check(self.root)
        self.assertEqual(1, len(problems), problems)
        self.assertIn("on no floor", problems[0])


if __name__ == "__main__":
    unittest.main()
