#!/usr/bin/env python3
"""Checks that the folders of src/ are layers (docs/DESIGN.md, "Modules and layers"): a file
includes files of its own folder and of folders on lower floors only, never one above it.

    scripts/check-layers.py [--root DIR] [--print]

Prints one line per include that runs back up ("FILE:LINE: includes X, floor N above floor M")
and exits 1 when there is any; --print shows the floors and every folder-to-folder include with
its count. The unit tests are tests/records/layers_test.py."""
import argparse
import os
import re
import sys

# Floor of each folder of src/, from the ground up. Folders on one floor do not include each
# other (checked too): they are independent modules at the same height.
FLOORS = [
    ["base"],
    ["kernels", "bootstrap", "topology"],
    ["registry", "transport"],
    ["tuner"],
    ["comm"],
    ["api"],
]
SOURCE = re.compile(r"\.(h|hpp|cc|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def floor_of(folder):
    for i, names in enumerate(FLOORS):
        if folder in names:
            return i
    return None


def scan(root):
    """Every quoted include of a file under src/ that names another folder of src/:
    (file, line, own folder, included folder, included path)."""
    src = os.path.join(root, "src")
    found = []
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not SOURCE.search(name):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            own = rel.split(os.sep)[0]
            if own == rel:  # a file directly in src/ belongs to no layer
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = m.group(1).split("/")[0]
                    if os.path.isdir(os.path.join(src, target)):
                        found.append((os.path.relpath(path, root), lineno, own, target, m.group(1)))
    return found


def check(root):
    problems = []
    for path, lineno, own, target, inc in scan(root):
        a, b = floor_of(own), floor_of(target)
        if a is None:
            problems.append(f"{path}:{lineno}: folder src/{own} is on no floor (scripts/check-layers.py FLOORS)")
        elif b is None:
            problems.append(f"{path}:{lineno}: includes {inc}, whose folder src/{target} is on no floor")
        elif b > a:
            problems.append(f"{path}:{lineno}: includes {inc}, floor {b} (src/{target}) above floor {a} (src/{own})")
        elif b == a and target != own:
            problems.append(f"{path}:{lineno}: includes {inc}: src/{target} and src/{own} share floor {a} and must not include each other")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--print", action="store_true", help="show the floors and the includes between folders")
    args = ap.parse_args()
    if args.print:
        counts = {}
        for _, _, own, target, _ in scan(args.root):
            if own != target:
                counts[(own, target)] = counts.get((own, target), 0) + 1
        for i in reversed(range(len(FLOORS))):
            print(f"floor {i}: " + ", ".join(f"src/{n}" for n in FLOORS[i]))
        for (own, target), n in sorted(counts.items()):
            print(f"  src/{own} -> src/{target}: {n}")
    problems = check(args.root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
