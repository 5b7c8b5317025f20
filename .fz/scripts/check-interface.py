#!/usr/bin/env python3
"""Checks that the `tpar` command (tools/) and the NCCL drop-in (nccl_shim/, its tests too) reach
the library through the C API (include/tpar/tpar.h) and one internal header, src/api/internal.h,
and include no other file of src/ (docs/DESIGN.md, "Layout").

    scripts/check-interface.py [--root DIR] [--print]

Prints one line per include of another file of src/ ("FILE:LINE: includes X, ...") and exits 1
when there is any; --print lists the files that include the interface. An include names src/
when its first folder is a folder of src/ ("base/env.h": the include path has src/ on it), or
when it leads into src/ by a path ("../../src/comm/comm.h"). The unit tests are
tests/records/interface_test.py."""
import argparse
import os
import re
import sys

INTERFACE = "api/internal.h"
CHECKED = ["tools", "nccl_shim"]
SOURCE = re.compile(r"\.(h|hpp|cc|cpp|c|cu|cuh|def|in)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')


def src_path_of(root, path, included):
    """The path under src/ that `included` (written in `path`) names, or None when it names
    no file of src/."""
    src = os.path.join(root, "src")
    norm = os.path.normpath(included)
    first = norm.split(os.sep)[0]
    if first not in (os.curdir, os.pardir) and os.path.isdir(os.path.join(src, first)):
        return norm.replace(os.sep, "/")
    # A path into src/: relative to the including file, or from the repository's root.
    for base in (os.path.dirname(path), root):
        full = os.path.normpath(os.path.join(base, included))
        rel = os.path.relpath(full, src)
        if not rel.startswith(os.pardir) and rel != os.curdir:
            return rel.replace(os.sep, "/")
    return None


def scan(root):
    """Every include of a file of src/ in the checked folders: (file, line, path under src/)."""
    found = []
    for top in CHECKED:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")))
            for name in sorted(files):
                if not SOURCE.search(name):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = src_path_of(root, path, m.group(1))
                        if target is not None:
                            found.append((os.path.relpath(path, root), lineno, target))
    return found


def check(root):
    return [f"{path}:{lineno}: includes src/{target}; tools/ and nccl_shim/ include "
            f"src/{INTERFACE} and nothing else of src/"
            for path, lineno, target in scan(root) if target != INTERFACE]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--print", action="store_true", help="list the files that include the interface")
    args = ap.parse_args()
    found = scan(args.root)
    users = sorted({path for path, _, target in found if target == INTERFACE})
    if args.print:
        for path in users:
            print(path)
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"interface: {len(users)} files of {' and '.join(d + '/' for d in CHECKED)} include "
          f"src/{INTERFACE}, none another file of src/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
