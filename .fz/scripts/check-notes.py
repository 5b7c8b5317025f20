#!/usr/bin/env python3
"""Checks the NOTE blocks of the source and docs: every NOTE [name] that a file cites is defined
exactly once, and no definition is duplicated. Also that the code's comments say why, not when:
no date, no result file of bench/results and no "on an H200" in the sources (src/, include/,
tools/, nccl_shim/, python/); timings, dates and commits belong in docs/PERFORMANCE.md.

A definition is a comment line (or a Markdown line) that holds `NOTE [name]` alone, with the
note's text on the lines below; everything else that names `NOTE [name]` is a citation
("NOTE [name]: why it applies here" included), and a citation may run over a line break inside
a comment ("NOTE [epochs and" / "parity]").

    scripts/check-notes.py [--root DIR]     (default: the repository this script is in)

Looks at the files git tracks (every file under DIR when it is no git checkout), bench/results
excepted. Prints each problem with file and line, and exits 1 when there is one.
"""
import argparse
import os
import re
import subprocess
import sys

# What opens a comment line in the files that carry notes: C/C++/CUDA, shell/CMake/Python,
# the middle of a block comment, and Markdown text (nothing).
COMMENT = r"(?://+|#+|\*|/\*+)?"
DEFINITION = re.compile(r"^\s*" + COMMENT + r"\s*NOTE \[([^\]\n]+)\]\s*$")
CITATION = re.compile(r"NOTE \[([^\]]+)\]")
LEAD = re.compile(r"^\s*" + COMMENT + r"\s?")
SKIP_DIRS = ("bench/results/",)
# The checker and its tests name made-up notes on purpose.
SKIP_FILES = ("scripts/check-notes.py", "tests/records/notes_test.py")
SOURCE_DIRS = ("src/", "include/", "tools/", "nccl_shim/", "python/")
# What dates a comment: a date, a dated result file, a run on a named machine.
WHEN = re.compile(r"\b20\d\d-\d\d-\d\d\b|bench/results/|\bon (?:an?|the|two|\d+) H[12]00s?\b")
SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".c", ".py", ".sh", ".cmake", ".md",
            ".txt", ".def", ".map", ".toml", ".in")


def is_checkout(root):
    """Whether `root` is the top of a git checkout (not a tree inside another one)."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return os.path.realpath(top) == os.path.realpath(root)


def tracked_files(root):
    if is_checkout(root):
        out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                             text=True).stdout.split("\n")
        files = [f for f in out if f]
    else:  # an exported tree: every file, build folders and hidden ones left out
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            for n in names:
                files.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(f for f in files if f.endswith(SUFFIXES) and not f.startswith(SKIP_DIRS)
                  and f not in SKIP_FILES)


def scan(root, files):
    """(definitions, citations): name -> [(file, line)]."""
    defs, cites = {}, {}
    for rel in files:
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        # Each line without its comment marker, joined, so that a citation broken over two
        # comment lines is still one; `starts` maps offsets back to line numbers.
        joined, starts = [], []
        pos = 0
        for i, line in enumerate(lines, 1):
            m = DEFINITION.match(line)
            if m:
                defs.setdefault(" ".join(m.group(1).split()), []).append((rel, i))
                text = ""  # the definition names itself: not a citation
            else:
                text = LEAD.sub("", line, count=1)
            starts.append(pos)
            joined.append(text)
            pos += len(text) + 1
        blob = " ".join(joined)
        for m in CITATION.finditer(blob):
            name = " ".join(m.group(1).split())
            line = max(i for i, s in enumerate(starts, 1) if s <= m.start())
            cites.setdefault(name, []).append((rel, line))
    return defs, cites


def dated_lines(root, files):
    """(file, line, text) of each source line that dates itself (WHEN)."""
    out = []
    for rel in files:
        if not rel.startswith(SOURCE_DIRS):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if WHEN.search(line):
                        out.append((rel, i, line.strip()))
        except (OSError, UnicodeDecodeError):
            continue
    return out


def check(root):
    files = tracked_files(root)
    defs, cites = scan(root, files)
    problems = [f"{rel}:{i}: says when, not why (dates, runs and result files go to "
                f"docs/PERFORMANCE.md): {text}" for rel, i, text in dated_lines(root, files)]
    for name, where in sorted(cites.items()):
        if name not in defs:
            rel, line = where[0]
            more = f" (and {len(where) - 1} more)" if len(where) > 1 else ""
            problems.append(f"{rel}:{line}: NOTE [{name}] is cited but defined nowhere{more}")
    for name, where in sorted(defs.items()):
        if len(where) > 1:
            at = ", ".join(f"{r}:{l}" for r, l in where)
            problems.append(f"NOTE [{name}] is defined {len(where)} times: {at}")
    return problems, defs, cites


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args()
    problems, defs, cites = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) with NOTE blocks")
        return 1
    print(f"notes: {len(defs)} defined, {len(cites)} cited, every citation defined once; "
          "no source comment dates itself")
    return 0


if __name__ == "__main__":
    sys.exit(main())
