#!/usr/bin/env python3
"""Checks that CTest reports every outcome of a tpar test as it was (NOTE [skip exit code] in
tests/common/test_main.h), and that scripts/test-summary.py counts what did not run.

It registers the fake cases of fake_tests.cc exactly as tpar registers its own
(cmake/gtests.cmake, through tests/selftest/project), runs CTest over them and reads its JUnit
report: a skip must be "notrun", every failure "fail", even one that printed GoogleTest's skip
marker or showed a skipped child's output. Then the summary script must print those counts
and fail, and, over a pytest report with a skip, must not read as a full pass.

  check_ctest_honesty.py --cmake CMAKE --ctest CTEST --generator GEN --fake BINARY --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
SUMMARY = os.path.join(SOURCE, "scripts", "test-summary.py")

EXPECTED = {
    "Fake.Passes": "run",
    "Fake.Skips": "notrun",
    "Fake.PrintsTheSkipMarkerThenFails": "fail",
    "Fake.ParentFailsShowingItsSkippedChild": "fail",
    "Fake.FailsThenSkips": "fail",
    "DISABLED_FakeChild.Skips": "disabled",
}

PYTEST_REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="1" tests="3">
<testcase classname="test_a" name="test_passes" time="0.001"/>
<testcase classname="test_a" name="test_passes_too" time="0.001"/>
<testcase classname="test_a" name="test_needs_gpu" time="0.000">
<skipped type="pytest.skip" message="no CUDA GPU on this machine">no GPU</skipped></testcase>
</testsuite></testsuites>
"""


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def main():
    p = argparse.ArgumentParser()
    for flag in ("--cmake", "--ctest", "--generator", "--fake", "--work"):
        p.add_argument(flag, required=True)
    a = p.parse_args()
    problems = []

    shutil.rmtree(a.work, ignore_errors=True)
    build = os.path.join(a.work, "build")
    cfg = run([a.cmake, "-S", os.path.join(HERE, "project"), "-B", build, "-G", a.generator,
               "-DFAKE_TESTS=" + a.fake])
    if cfg.returncode != 0:
        print(cfg.stdout)
        print("FAIL: the self-test project did not configure")
        return 1
    junit = os.path.join(a.work, "ctest.xml")
    ctest = run([a.ctest, "--test-dir", build, "--output-junit", junit])
    print(ctest.stdout)
    if ctest.returncode == 0:
        problems.append("ctest exited 0 although three cases fail")
    if "100% tests passed" in ctest.stdout:
        problems.append("ctest printed '100% tests passed'")
    seen = {}
    if os.path.exists(junit):
        for case in ET.parse(junit).getroot().iter("testcase"):
            seen[case.get("name")] = case.get("status")
    else:
        problems.append("ctest wrote no JUnit report")
    for name, status in EXPECTED.items():
        if seen.get(name) != status:
            problems.append(f"{name}: CTest reported '{seen.get(name)}', expected '{status}'")

    summary = run([sys.executable, SUMMARY, "--ctest", junit])
    print(summary.stdout)
    want = "ran 4, passed 1, failed 3, skipped 1, disabled 1"
    if want not in summary.stdout:
        problems.append(f"the summary does not say '{want}'")
    if summary.returncode == 0 or "result: FAILED" not in summary.stdout:
        problems.append("the summary did not fail a run with failures")

    pytest = os.path.join(a.work, "pytest.xml")
    with open(pytest, "w") as f:
        f.write(PYTEST_REPORT)
    summary = run([sys.executable, SUMMARY, "--pytest", "python=" + pytest,
                   "--tier", "fuzz=77", "--tier", "package=off:TPAR_TEST_PACKAGE=0"])
    print(summary.stdout)
    for want in ("ran 2, passed 2, failed 0, skipped 1", "fuzz", "skipped", "not run",
                 "NOT everything ran: 1 tests skipped; 2 tiers skipped or not run"):
        if want not in summary.stdout:
            problems.append(f"the summary of a run with skips does not say '{want}'")
    if summary.returncode != 0:
        problems.append("the summary failed a run without failures")

    log = os.path.join(a.work, "python.log")
    with open(log, "w") as f:
        f.write("".join(f"line {i}\n" for i in range(100)) + "ERROR: the reason it failed\n")
    missing = run([sys.executable, SUMMARY, "--pytest", "python=" + os.path.join(a.work, "none.xml"),
                   "--log", "python=" + log])
    if missing.returncode == 0 or "no report" not in missing.stdout:
        problems.append("a missing report did not fail the summary")
    if "ERROR: the reason it failed" not in missing.stdout or "line 10\n" in missing.stdout:
        problems.append("a failed tier's summary does not end with the tail of its log")
    passing = run([sys.executable, SUMMARY, "--pytest", "python=" + pytest, "--log", "python=" + log])
    if "the reason it failed" in passing.stdout:
        problems.append("the summary repeats the log of a tier that passed")

    for problem in problems:
        print("FAIL:", problem)
    if not problems:
        print("ok: CTest and the summary report every outcome as it was")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
