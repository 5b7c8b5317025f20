#!/usr/bin/env python3
"""The closing lines of scripts/test.sh: how many tests ran, passed, failed, were skipped and
were disabled, per tier, read from the reports the tiers wrote (JUnit XML from CTest, GoogleTest
and pytest), so that a run that skipped the GPU tier never reads as "100% passed" alone.

  scripts/test-summary.py [--ctest JUNIT [--ctest-tests JSON]] [--gtest NAME=XML]...
                          [--pytest NAME=XML]... [--tier NAME=STATUS]... [--log NAME=FILE]...

--ctest: `ctest --output-junit`; --ctest-tests: `ctest --show-only=json-v1`, for the labels of
the skipped tests. --tier: a step without a report: STATUS is its exit status (0 passed, 77
skipped) or "off:REASON" (not run). A report that is missing counts as a failed tier.
--log: the output of the tier NAME; when that tier failed, its last lines are printed under it,
so that the reason stays in view where only the end of a run's output is kept.
Exit status: 0 when nothing failed, 1 otherwise."""
import argparse
import collections
import json
import os
import sys
import xml.etree.ElementTree as ET

LOG_TAIL_LINES = 40
SKIP_STATUS = 77  # NOTE [skip exit code] in tests/common/test_main.h


class Counts:
    def __init__(self):
        self.passed = self.failed = self.skipped = self.disabled = 0
        self.failed_names = []
        self.skipped_names = []

    @property
    def total(self):
        return self.passed + self.failed + self.skipped + self.disabled

    @property
    def ran(self):
        return self.passed + self.failed


def outcome(case):
    """'passed', 'failed', 'skipped' or 'disabled' for one <testcase> of CTest, GoogleTest or
    pytest JUnit output."""
    status = case.get("status", "")
    result = case.get("result", "")
    children = {child.tag for child in case}
    if status == "disabled" or result == "suppressed":
        return "disabled"
    if status == "fail" or "failure" in children or "error" in children:
        return "failed"
    if status == "notrun":
        # CTest writes "notrun" for a skip and for a test it could not start at all.
        out = case.findtext("system-out") or ""
        return "failed" if "Could not find executable" in out else "skipped"
    if "skipped" in children or result == "skipped":
        return "skipped"
    return "passed"


def read_junit(path):
    counts = Counts()
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        if case.get("classname") and case.get("classname") != name:
            name = case.get("classname") + "." + name
        kind = outcome(case)
        setattr(counts, kind, getattr(counts, kind) + 1)
        if kind == "failed":
            counts.failed_names.append(name)
        elif kind == "skipped":
            counts.skipped_names.append(case.get("name", "?"))
    return counts


def labels_of(path):
    """{test name: [labels]} from `ctest --show-only=json-v1`."""
    with open(path) as f:
        data = json.load(f)
    out = {}
    for test in data.get("tests", []):
        labels = []
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                labels = list(prop.get("value", []))
        out[test.get("name", "")] = labels
    return out


def count_line(name, c):
    line = (f"{name:<24} {c.total:5d} tests: ran {c.ran}, passed {c.passed}, failed {c.failed}, "
            f"skipped {c.skipped}")
    if c.disabled:
        line += f", disabled {c.disabled}"
    return line


def log_tail(logs, name):
    """The last lines of the tier's log (--log NAME=FILE), indented, or [] without one."""
    path = logs.get(name)
    if not path:
        return []
    if not os.path.exists(path):
        return [f"{'':<24}   (its log {path} was not written)"]
    with open(path, errors="replace") as f:
        tail = f.read().splitlines()[-LOG_TAIL_LINES:]
    return [f"{'':<24}   the last {len(tail)} lines of {path}:"] + [f"{'':<24}   | {t}" for t in tail]


def summarize(args):
    logs = dict(e.split("=", 1) for e in args.log)
    lines = ["== test summary: every tier, with what did not run"]
    failed = False
    skipped_tests = 0
    tiers_not_run = 0
    gpu_skipped = 0
    for kind, entries in (("ctest", [("ctest", args.ctest)] if args.ctest else []),
                          ("gtest", [e.split("=", 1) for e in args.gtest]),
                          ("pytest", [e.split("=", 1) for e in args.pytest])):
        for name, path in entries:
            if not path or not os.path.exists(path):
                lines.append(f"{name:<24} FAILED: no report ({path} was not written)")
                lines += log_tail(logs, name)
                failed = True
                continue
            c = read_junit(path)
            line = count_line(name, c)
            if kind == "ctest" and args.ctest_tests and c.skipped and os.path.exists(args.ctest_tests):
                labels = labels_of(args.ctest_tests)
                by_label = collections.Counter(
                    ",".join(labels.get(n, [])) or "no label" for n in c.skipped_names)
                gpu_skipped += sum(n for label, n in by_label.items() if "gpu" in label.split(","))
                line += " (skipped by label: " + ", ".join(
                    f"{label} {n}" for label, n in sorted(by_label.items())) + ")"
            lines.append(line)
            for n in c.failed_names[:20]:
                lines.append(f"{'':<24}   failed: {n}")
            if len(c.failed_names) > 20:
                lines.append(f"{'':<24}   ... and {len(c.failed_names) - 20} more")
            if c.failed > 0 or c.total == 0:
                lines += log_tail(logs, name)
            failed |= c.failed > 0 or c.total == 0
            skipped_tests += c.skipped
    for entry in args.tier:
        name, status = entry.split("=", 1)
        if status.startswith("off:"):
            lines.append(f"{name:<24} not run ({status[4:]})")
            tiers_not_run += 1
        elif status == "0":
            lines.append(f"{name:<24} passed")
        elif status == str(SKIP_STATUS):
            lines.append(f"{name:<24} skipped (see its output above)")
            tiers_not_run += 1
        else:
            lines.append(f"{name:<24} FAILED (exit status {status})")
            lines += log_tail(logs, name)
            failed = True
    if failed:
        lines.append("result: FAILED")
    elif skipped_tests or tiers_not_run:
        parts = []
        if skipped_tests:
            part = f"{skipped_tests} tests skipped"
            if gpu_skipped:
                part += (f" ({gpu_skipped} of them GPU tests: scripts/gpu-check.sh runs them on a "
                         "GPU machine)")
            parts.append(part)
        if tiers_not_run:
            parts.append(f"{tiers_not_run} tiers skipped or not run")
        lines.append("result: no failure, but NOT everything ran: " + "; ".join(parts))
    else:
        lines.append("result: passed, every test ran")
    return lines, failed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ctest")
    p.add_argument("--ctest-tests")
    p.add_argument("--gtest", action="append", default=[])
    p.add_argument("--pytest", action="append", default=[])
    p.add_argument("--tier", action="append", default=[])
    p.add_argument("--log", action="append", default=[])
    args = p.parse_args()
    for entry in args.gtest + args.pytest + args.tier + args.log:
        if "=" not in entry:
            p.error(f"'{entry}' is not NAME=VALUE")
    lines, failed = summarize(args)
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
