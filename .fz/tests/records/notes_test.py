"""NOTE blocks: every one the repository cites is defined exactly once, no source comment dates
itself, and the checker (scripts/check-notes.py) catches each way of breaking that, on small
made-up trees.

    python3 -m unittest discover -s tests/records -p '*_test.py'    (CTest: DocsNumbersMatchTheirRecords)
"""
import importlib.util
import os
import random
import shutil
import string
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "check_notes", os.path.join(ROOT, "scripts", "check-notes.py"))
check_notes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_notes)


def fresh_name():
    """Two or three made-up words, new for every check."""
    return " ".join("".join(random.choice(string.ascii_lowercase) for _ in range(random.randint(3, 8)))
                    for _ in range(random.randint(2, 3)))


class RepositoryNotes(unittest.TestCase):
    def test_every_cited_note_is_defined_once(self):
        problems, defs, cites = check_notes.check(ROOT)
        self.assertEqual([], problems)
        self.assertGreater(len(defs), 20, "implausibly few notes found: is the scan broken?")
        self.assertIn("workspace layout", defs)


class CheckerCatchesEachBreak(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tpar-notes-")  # no git: every file is scanned
        self.name = fresh_name()

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def test_a_defined_and_cited_note_passes(self):
        self.write("src/a.h", f"// NOTE [{self.name}]\n// Why it is so.\nint a;\n")
        self.write("src/b.cc", f"int b;  // safe because of NOTE [{self.name}] in a.h\n")
        problems, defs, cites = check_notes.check(self.root)
        self.assertEqual([], problems)
        self.assertEqual([("src/b.cc", 1)], cites[self.name])

    def test_a_citation_without_a_definition_fails_naming_file_and_line(self):
        self.write("src/a.cc", f"int a;\nint b;\n// see NOTE [{self.name}]\n")
        problems, _, _ = check_notes.check(self.root)
        self.assertEqual(1, len(problems), problems)
        self.assertIn(f"src/a.cc:3: NOTE [{self.name}] is cited but defined nowhere", problems[0])

    def test_a_note_defined_twice_fails(self):
        self.write("src/a.h", f"// NOTE [{self.name}]\n// One text.\n")
        self.write("docs/b.md", f"NOTE [{self.name}]\n\nAnother text.\n")
        problems, _, _ = check_notes.check(self.root)
        self.assertEqual(1, len(problems), problems)
        self.assertIn("is defined 2 times", problems[0])

    def test_a_citation_with_its_reason_is_no_definition(self):
        self.write("src/a.cc", f"  // NOTE [{self.name}]: why it applies here.\n")
        problems, defs, _ = check_notes.check(self.root)
        self.assertNotIn(self.name, defs)
        self.assertEqual(1, len(problems), problems)

    def test_a_citation_broken_over_two_comment_lines_is_one(self):
        first, rest = self.name.split(" ", 1)
        self.write("src/a.h", f"// NOTE [{self.name}]\n// Text.\n")
        self.write("src/b.cc", f"// the grid is fixed (NOTE [{first}\n//   {rest}]), so\n")
        problems, _, cites = check_notes.check(self.root)
        self.assertEqual([], problems)
        self.assertEqual([("src/b.cc", 1)], cites[self.name])
        # The same break with a name nobody defined fails.
        self.write("src/c.cc", f"# NOTE [{first}x\n# {rest}]\n")
        problems, _, _ = check_notes.check(self.root)
        self.assertEqual(1, len(problems), problems)
        self.assertIn(f"NOTE [{first}x {rest}]", problems[0])

    def test_a_source_comment_that_dates_itself_fails(self):
        day = f"20{random.randint(10, 99)}-{random.randint(1, 12):02d}-{random.randint(1, 28):02d}"
        for text in (f"// measured {day}", "// see bench/results/x.txt", "# fast on an H200 here"):
            self.write("src/a.cc", f"int a;\n{text}\n")
            problems, _, _ = check_notes.check(self.root)
            self.assertEqual(1, len(problems), (text, problems))
            self.assertIn("src/a.cc:2: says when, not why", problems[0])
        # Docs may date things; sources outside the checked folders too.
        self.write("src/a.cc", "int a;\n")
        self.write("docs/PERFORMANCE.md", f"Measured {day} on an H200.\n")
        self.assertEqual([], check_notes.check(self.root)[0])


if __name__ == "__main__":
    unittest.main()
