"""The records rule (docs/RECORDS.md): the repository's pages follow it, and the checker
(scripts/check-records.py) catches each way of breaking it, on small made-up pages and records.

    python3 -m unittest discover -s tests/records -p '*_test.py'    (CTest: DocsNumbersMatchTheirRecords)
"""
import importlib.util
import io
import json
import os
import random
import shutil
import tarfile
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "check_records", os.path.join(ROOT, "scripts", "check-records.py"))
check_records = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_records)


def write_archive(path, members):
    """A .tgz at `path` holding {name: text} as regular files."""
    with tarfile.open(path, "w:gz") as t:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


class RepositoryFollowsTheRule(unittest.TestCase):
    def test_every_measured_number_of_readme_and_docs_is_in_its_record(self):
        problems = check_records.check(ROOT)
        self.assertEqual([], problems, "\n" + "\n".join(problems))


class Checker(unittest.TestCase):
    """Each case writes a page and records into a fresh tree and runs the checker over it."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tpar-records-")
        os.makedirs(os.path.join(self.root, "docs"))
        os.makedirs(os.path.join(self.root, "bench", "results"))
        # Fresh values per run, so that no case passes by a constant that happens to match.
        rng = random.Random()
        # A floor below 0.9 keeps time / floor at least a third above the time, so that a ratio
        # the record does not hold can never equal, at two decimals, a number it does hold.
        self.floor = round(rng.uniform(0.5, 0.9), 4)
        self.time = round(rng.uniform(3.0, 9.0), 4)
        self.share = round(rng.uniform(0.05, 0.5), 4)
        self.record("2026-01-02-h200-bench-abc1234.json",
                    json.dumps({"launch_floor_us": {"8": self.floor},
                                "rows": [{"us": self.time, "share": self.share}]}))

    def tearDown(self):
        shutil.rmtree(self.root)

    def record(self, name, text):
        with open(os.path.join(self.root, "bench", "results", name), "w") as f:
            f.write(text)

    def archive(self, name, members):
        write_archive(os.path.join(self.root, "bench", "results", name), members)

    def page(self, text, name="docs/PAGE.md"):
        with open(os.path.join(self.root, name), "w") as f:
            f.write(textwrap.dedent(text))
        return check_records.check(self.root, [name])

    def fenced(self, body, files="bench/results/2026-01-02-h200-bench-abc1234.json"):
        return self.page(f"<!-- record: {files} -->\n"
                         f"One H200, commit abc1234 (`2026-01-02-h200-bench-abc1234.json`):\n"
                         f"{body}\n<!-- /record -->\n")

    def assertProblem(self, problems, text):
        self.assertTrue(any(text in p for p in problems), f"no '{text}' in {problems}")

    def test_numbers_of_the_record_pass_at_their_printed_rounding(self):
        self.assertEqual([], self.fenced(f"floor {self.floor:.2f} us, time {self.time:.1f} us"))

    def test_a_number_that_is_not_in_the_record_fails(self):
        wrong = round(self.time + 0.37, 2)
        problems = self.fenced(f"time {wrong:.2f} us")
        self.assertProblem(problems, f"{wrong:.2f} is in none of 2026-01-02-h200-bench-abc1234.json")

    def test_a_percentage_may_be_a_stored_fraction(self):
        self.assertEqual([], self.fenced(f"a share of {100 * self.share:.1f}%"))
        self.assertProblem(self.fenced(f"a share of {100 * self.share + 3:.1f}%"), "is in none of")

    def test_a_ratio_may_be_derived_from_two_numbers_on_its_line(self):
        ratio = self.time / self.floor
        self.assertEqual([], self.fenced(f"| {self.time:.2f} | {self.floor:.2f} | {ratio:.2f}x |"))
        # The same ratio on a line without its operands: not derivable.
        self.assertProblem(self.fenced(f"{self.time:.2f} us\nits ratio {ratio:.2f}x"),
                           f"{ratio:.2f} is in none of")
        # A percentage derived as a/b - 1 from the line.
        over = 100 * (self.time / 2.0 - 1)
        self.assertEqual([], self.fenced(f"{self.time:.2f} us against a target of 2: {over:.1f}% over"))

    def test_measurements_outside_a_fence_fail_and_bounds_versions_and_words_do_not(self):
        problems = self.page("The call took 4.25 us and 12 GB/s, 3 tests passed, 14% faster.\n")
        for text in ("'4.25'", "'12'", "'3'", "'14'"):
            self.assertProblem(problems, text)
        self.assertEqual([], self.page("Targets: <= 3 us, ≤ 1.6x, at most 2.5 s. CUDA 13.0, "
                                       "CMake 3.24+, sm_90, 12K, x16, 2x the bytes, 1e-3.\n"))

    def test_the_allow_list_exempts_its_text_and_fails_when_stale(self):
        with open(os.path.join(self.root, "docs", "RECORDS.md"), "w") as f:
            f.write("## Allowed constants\n\n| page | text | why |\n| --- | --- | --- |\n"
                    "| docs/PAGE.md | ~53 GB/s per hop | the link's rating |\n")
        self.assertEqual([], self.page("PCIe moves ~53 GB/s per hop.\n"))
        self.assertProblem(self.page("PCIe moves ~54 GB/s per hop.\n"), "'54'")
        self.assertProblem(self.page("Nothing here.\n"), "is not an unfenced number")

    def test_the_text_must_name_each_file_its_commit_and_machine(self):
        problems = self.page("<!-- record: bench/results/2026-01-02-h200-bench-abc1234.json -->\n"
                             f"It took {self.time:.2f} us.\n<!-- /record -->\n")
        self.assertProblem(problems, "does not name 2026-01-02-h200-bench-abc1234.json")
        self.assertProblem(problems, "does not name the machine (H200)")
        # A pattern names it too.
        self.assertEqual([], self.page(
            "<!-- record: bench/results/2026-01-02-h200-bench-abc1234.json -->\n"
            f"One H200 (`...-bench-{{abc1234,def5678}}.json`): {self.time:.2f} us.\n"
            "<!-- /record -->\n"))
        self.archive("2026-01-02-h200-host-sync.tgz", {"2026-01-02-h200-host-sync.txt": "persist_us 2.27\n"})
        problems = self.page("<!-- record: bench/results/2026-01-02-h200-host-sync.tgz:"
                             "2026-01-02-h200-host-sync.txt -->\nOne H200 "
                             "(`2026-01-02-h200-host-sync.tgz:2026-01-02-h200-host-sync.txt`): 2.27 us.\n"
                             "<!-- /record -->\n")
        self.assertProblem(problems, "has no commit in its name")

    def test_missing_files_unclosed_and_nested_fences_fail(self):
        self.assertProblem(self.fenced("1.00 us", files="bench/results/none.json"), "does not exist")
        self.assertProblem(self.page("<!-- no-record -->\n<!-- not-measured: x -->\n"),
                           "fence inside")
        self.assertProblem(self.page("<!-- record: bench/results/a.json -->\ntext\n"),
                           "never closed")

    def test_a_no_record_block_must_say_so(self):
        self.assertProblem(self.page("<!-- no-record -->\nIt took 3.25 us.\n<!-- /no-record -->\n"),
                           "must say 'no record'")
        self.assertEqual([], self.page("<!-- no-record -->\nIt took 3.25 us (no record kept).\n"
                                       "<!-- /no-record -->\n"))

    def test_a_tgz_record_is_read_member_by_member(self):
        self.archive("2026-01-02-h200-runs-abc1234.tgz", {"runs/a.json": json.dumps({"us": 7.125})})
        self.assertEqual([], self.fenced("7.13 us (`2026-01-02-h200-runs-abc1234.tgz`)",
                                         files="bench/results/2026-01-02-h200-bench-abc1234.json, "
                                               "bench/results/2026-01-02-h200-runs-abc1234.tgz"))

    # ---- raw logs in one archive per run, cited as RUN.tgz:MEMBER ----

    RUN = "2026-01-02-h200-gpu-tests-abc1234"

    def logs(self):
        """The run's archive: two logs with numbers of their own."""
        self.archive(f"{self.RUN}.tgz", {f"{self.RUN}.log": f"persist_us {self.time}\n",
                                         f"{self.RUN}-rest.log": f"floor_us {self.floor}\n"})

    def member_page(self, body, member=None, named=None):
        member = member or f"{self.RUN}.log"
        named = named if named is not None else f"{self.RUN}.tgz:{member}"
        return self.page(f"<!-- record: bench/results/{self.RUN}.tgz:{member} -->\n"
                         f"One H200, commit abc1234 (`{named}`):\n{body}\n<!-- /record -->\n")

    def test_a_fence_citing_a_member_of_an_archive_passes_on_its_numbers(self):
        self.logs()
        self.assertEqual([], self.member_page(f"it took {self.time:.2f} us"))
        # The member's numbers only: the other log of the same archive does not count.
        problems = self.member_page(f"it took {self.floor:.3f} us")
        self.assertProblem(problems, f"{self.floor:.3f} is in none of {self.RUN}.tgz:{self.RUN}.log")
        # A member under "./" (an archive made with `tar -C DIR .`) is cited without it.
        self.archive("2026-01-02-h200-dot-abc1234.tgz", {"./a.log": f"{self.time}\n"})
        self.assertEqual([], self.page(
            "<!-- record: bench/results/2026-01-02-h200-dot-abc1234.tgz:a.log -->\n"
            f"One H200 (`2026-01-02-h200-dot-abc1234.tgz:a.log`): {self.time:.2f} us.\n"
            "<!-- /record -->\n"))

    def test_a_fence_citing_a_missing_member_or_archive_fails_naming_it(self):
        self.logs()
        problems = self.member_page(f"it took {self.time:.2f} us", member=f"{self.RUN}-none.log")
        self.assertProblem(problems, f"bench/results/{self.RUN}.tgz holds no member {self.RUN}-none.log")
        problems = self.page("<!-- record: bench/results/2026-01-02-h200-none-abc1234.tgz:x.log -->\n"
                             "One H200 (`2026-01-02-h200-none-abc1234.tgz:x.log`).\n<!-- /record -->\n")
        self.assertProblem(problems, "bench/results/2026-01-02-h200-none-abc1234.tgz does not exist")
        # A log cited by its own name, now in its run's archive: the problem says where it is.
        problems = self.page(f"<!-- record: bench/results/{self.RUN}.log -->\n"
                             f"One H200 (`{self.RUN}.log`): {self.time:.2f} us.\n<!-- /record -->\n")
        self.assertProblem(problems, f"bench/results/{self.RUN}.log does not exist: it is a member of "
                                     f"bench/results/{self.RUN}.tgz; cite it as "
                                     f"bench/results/{self.RUN}.tgz:{self.RUN}.log")

    def test_the_text_names_a_member_or_its_archive(self):
        self.logs()
        self.assertEqual([], self.member_page(f"{self.time:.2f} us", named=f"{self.RUN}.log"))
        self.assertEqual([], self.member_page(f"{self.time:.2f} us", named=f"{self.RUN}.tgz"))
        self.assertProblem(self.member_page(f"{self.time:.2f} us", named="the log"),
                           f"does not name {self.RUN}.tgz:{self.RUN}.log")

    def test_a_raw_log_outside_an_archive_fails(self):
        self.record(f"{self.RUN}.log", f"persist_us {self.time}\n")
        self.record("2026-01-02-h200-notes.txt", "text\n")
        problems = self.page("Nothing here.\n")
        self.assertProblem(problems, f"bench/results/{self.RUN}.log: a raw log outside an archive")
        self.assertProblem(problems, "bench/results/2026-01-02-h200-notes.txt: a raw log outside")
        os.remove(os.path.join(self.root, "bench", "results", f"{self.RUN}.log"))
        os.remove(os.path.join(self.root, "bench", "results", "2026-01-02-h200-notes.txt"))
        self.logs()
        self.assertEqual([], self.page("Nothing here.\n"))

    def test_json_records_name_logs_as_archive_members(self):
        self.logs()
        self.record("2026-01-02-h200-verify-abc1234.json",
                    json.dumps({"bench_output": f"{self.RUN}.tgz:{self.RUN}-rest.log",
                                "command": "tpar bench > out.log"}))
        self.assertEqual([], self.page("Nothing here.\n"))
        self.record("2026-01-02-h200-verify-abc1234.json",
                    json.dumps({"bench_output": f"{self.RUN}.tgz:{self.RUN}-gone.log",
                                "old": f"bench/results/{self.RUN}.log"}))
        problems = self.page("Nothing here.\n")
        self.assertProblem(problems, f"bench_output names {self.RUN}.tgz:{self.RUN}-gone.log, which is "
                                     f"missing: bench/results/{self.RUN}.tgz holds no member "
                                     f"{self.RUN}-gone.log")
        self.assertProblem(problems, f"old names bench/results/{self.RUN}.log, a raw log outside an "
                                     "archive")


class StateTable(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tpar-state-")
        os.makedirs(os.path.join(self.root, "bench", "results"))
        write_archive(os.path.join(self.root, "bench", "results", "2026-01-02-h200-gpu-tests-abc1234.tgz"),
                      {"2026-01-02-h200-gpu-tests-abc1234.log": "[  PASSED  ] 290 tests.\n"})
        self.summary = {
            "script": "scripts/gpu-check.sh", "commit": "abc1234def", "date": "2026-01-02T10:00:00Z",
            "machine": {"kind": "nvidia-h200", "gpus": 1, "gpu": "NVIDIA H200", "driver": "580"},
            "steps": [{"name": "gpu-tests", "command": "tpar_gpu_tests", "status": "failed",
                       "passed": 290, "failed": 2, "skipped": 6,
                       "records": ["bench/results/2026-01-02-h200-gpu-tests-abc1234.tgz:"
                                   "2026-01-02-h200-gpu-tests-abc1234.log"]}]}
        self.write_summary()

    def tearDown(self):
        shutil.rmtree(self.root)

    def write_summary(self, name="2026-01-02-h200-summary-abc1234.json"):
        with open(os.path.join(self.root, "bench", "results", name), "w") as f:
            json.dump(self.summary, f)

    def table(self, cell):
        with open(os.path.join(self.root, "README.md"), "w") as f:
            f.write("<!-- state-table -->\n| feature | state | last run |\n| --- | --- | --- |\n"
                    f"| graphs | works | {cell} |\n<!-- /state-table -->\n")
        return check_records.check(self.root, ["README.md"])

    def test_a_row_that_matches_its_summary_passes(self):
        self.assertEqual([], self.table(
            "`gpu-tests` of `2026-01-02-h200-summary-abc1234.json`: abc1234 on one H200, virtual "
            "ranks; 290 passed, 2 failed, 6 skipped"))

    def test_counts_commit_machine_and_failures_must_match(self):
        cell = ("`gpu-tests` of `2026-01-02-h200-summary-abc1234.json`: abc1234 on one H200, "
                "virtual ranks; 291 passed, 6 skipped")
        problems = self.table(cell)
        self.assertTrue(any("says 291 passed" in p for p in problems), problems)
        self.assertTrue(any("had 2 failed; the row must say so" in p for p in problems), problems)
        problems = self.table(cell.replace("abc1234 on one H200", "def0000 on two H200"))
        self.assertTrue(any("which the row does not name" in p for p in problems), problems)
        self.assertTrue(any("does not say the 1 H200" in p for p in problems), problems)
        problems = self.table("works on the H200")
        self.assertTrue(any("cites no summary" in p for p in problems), problems)
        self.assertEqual([], self.table("CI (no GPU): unit tests"))

    def test_a_measurement_in_the_state_table_fails(self):
        problems = self.table("CI; 12 KiB in 5.25 us")
        self.assertTrue(any("carries a measurement" in p for p in problems), problems)

    def test_summary_files_follow_the_format(self):
        self.summary["steps"][0]["status"] = "passed"  # with 2 failures
        self.summary["machine"]["gpus"] = 2
        log = "bench/results/2026-01-02-h200-gpu-tests-abc1234"
        self.summary["steps"][0]["records"] = ["bench/results/missing.log", f"{log}.tgz:missing.log",
                                               f"{log}.log"]
        self.write_summary()
        with open(os.path.join(self.root, log + ".log"), "w") as f:
            f.write("[  PASSED  ] 290 tests.\n")
        problems = check_records.check(self.root, ["README.md"]) if os.path.exists(
            os.path.join(self.root, "README.md")) else self.table("CI")
        for text in ("'passed' with 2 failures", "is not the h200 of its name",
                     "record bench/results/missing.log is not a file",
                     f"record {log}.tgz:missing.log is not a file under bench/results/ ({log}.tgz "
                     "holds no member missing.log)",
                     f"record {log}.log is a raw log outside an archive"):
            self.assertTrue(any(text in p for p in problems), (text, problems))
        self.write_summary("2026-01-03-h200-summary-abc1234.json")
        self.assertTrue(any("is not the 2026-01-03 of its name" in p
                            for p in check_records.check(self.root, ["README.md"])))


if __name__ == "__main__":
    unittest.main()
