#!/usr/bin/env python3
"""summary.json of a GPU run (scripts/multi-gpu-run.sh, scripts/gpu-check.sh): every step with
its command, its status and the test counts read from its logs, so that a reader need not read
the logs to know what passed.

    summary.py start    OUTDIR --script PATH --steps NAME,NAME,... [--commit C]
    summary.py add-step OUTDIR --name NAME --command TEXT (--rc N | --skipped | --not-run)
                        [--log PARSER:PATH]... [--record PATH]...
    summary.py finish   OUTDIR [--rerun CMD --chosen NAMES]   prints the table and the chosen
                        steps not run; exit 1 when a step failed
    summary.py pack     OUTDIR [--max-files 8]
    summary.py count    PARSER LOG... prints "passed failed skipped" (to try a parser on a log)

`start` writes OUTDIR/summary.json with every step "not run"; `add-step` replaces one step's
entry. The file is replaced atomically after each step, so a run stopped half way still leaves
a valid summary of what it did. `pack` puts every file of OUTDIR but summary.json into
OUTDIR/logs.tgz, then leaves at the top summary.json, logs.tgz and as many records as fit in
--max-files (JSON first, in step order; the GPU machines return at most 8 files, 2 folders
deep): a record that is not there is in logs.tgz under the same path.

The format:
  {"script": path, "commit": str, "date": ISO 8601 (UTC, when the run started),
   "machine": {"kind": $TPAR_MACHINE_KIND or "unknown", "gpus": int, "gpu": name, "driver": str},
   "steps": [{"name": str, "command": str, "status": "passed"|"failed"|"skipped"|"not run",
              "passed": int, "failed": int, "skipped": int, "records": [paths relative to OUTDIR]}]}

Status of a step run with --rc: "failed" when its exit status is not 0 or a log counts a
failure; otherwise "passed" when a log counts a pass, "skipped" when the logs count only skips,
and "failed" when logs were named but count nothing (a test step whose log holds no result has
not shown that anything works). A step named with no --log (a build) passes on exit status 0.
"skipped": the step was chosen but cannot run here (a missing prerequisite, said in the run's
output). "not run": the step was not chosen, the run stopped before it (its time budget ended,
or the build failed), or the end of the budget cut it short.

Parsers (each counts lines of a log; several --log options add up):
  gtest        GoogleTest's closing lines "[  PASSED  ] N tests.", "[  FAILED  ] N tests, listed
               below:", "[  SKIPPED ] N tests, listed below:" (several test programs add up)
  pytest       pytest's summary line "N passed, M failed, K skipped, E errors in T s" (errors
               count as failures; several lines add up)
  pytest-ranks the same under torchrun, where every rank runs every test and prints its own
               line: a test counts once, so passed = fewest passes of any rank, failed and
               skipped = most of any rank
  bench        `tpar bench` rows (nccl-tests' 13 columns first): a row passes when both #wrong
               columns are 0, fails when either is above 0, is skipped when both are N/A
               (unchecked); each "# skipped ..." line (a backend that could not run) is a skip
  fused        `tpar bench --fused` rows: a row passes when its last column (wrong) is 0
  symm         scripts/torch_symm_bench.py rows: "... us N wrong" passes at 0, fails above;
               "... skipped: why" is a skip
  checks       verdict lines: "PASS"/"FAIL" alone; "name: PASS (N checks ..., M failures ...)"
               (N - M passes, M failures) or "name: PASS|FAIL ..." (one); `tpar verify`'s
               "check ... -> ok" / "-> FAILED" and its "backend skipped: why" rows;
               `tpar doctor`'s self-test rows "  backend  PASS|FAIL  ..."
  sanitizer    compute-sanitizer's "ERROR SUMMARY: N errors": one pass at 0, one failure above
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tarfile

STATUSES = ("passed", "failed", "skipped", "not run")


# ---- parsers: each returns (passed, failed, skipped) for the text of one log ----------------

GTEST_LINES = (re.compile(r"^\[  PASSED  \] (\d+) tests?\.", re.M),
               re.compile(r"^\[  FAILED  \] (\d+) tests?, listed below:", re.M),
               re.compile(r"^\[  SKIPPED \] (\d+) tests?, listed below:", re.M))


def count_gtest(text):
    return tuple(sum(int(n) for n in pattern.findall(text)) for pattern in GTEST_LINES)


PYTEST_LINE = re.compile(r"^[=\s]*(\d+ \w+.*) in [\d.]+s\b.*$", re.M)
PYTEST_WORD = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")


def pytest_lines(text):
    """(passed, failed, skipped) of each pytest summary line."""
    rows = []
    for line in PYTEST_LINE.findall(text):
        c = {"passed": 0, "failed": 0, "skipped": 0}
        found = False
        for n, word in PYTEST_WORD.findall(line):
            found = True
            if word in ("passed", "xpassed"):
                c["passed"] += int(n)
            elif word in ("failed", "error", "errors"):
                c["failed"] += int(n)
            elif word in ("skipped", "xfailed"):
                c["skipped"] += int(n)
        if found:
            rows.append((c["passed"], c["failed"], c["skipped"]))
    return rows


def count_pytest(text):
    rows = pytest_lines(text)
    return tuple(sum(r[i] for r in rows) for i in range(3))


def count_pytest_ranks(text):
    rows = pytest_lines(text)
    if not rows:
        return 0, 0, 0
    return min(r[0] for r in rows), max(r[1] for r in rows), max(r[2] for r in rows)


def count_wrong_columns(text, columns):
    """A tpar bench table: each row (its first field a size) counts by the #wrong fields at
    `columns`: failed when one is above 0, passed when all are numbers, skipped when all are N/A
    (not checked); each "# skipped" line is a backend that could not run."""
    passed = failed = skipped = 0
    for line in text.splitlines():
        if line.startswith("# skipped "):
            skipped += 1
            continue
        fields = line.split()
        if line.startswith("#") or len(fields) <= max(columns) or not fields[0].isdigit():
            continue
        wrong = [fields[c] for c in columns]
        if any(w.isdigit() and int(w) > 0 for w in wrong):
            failed += 1
        elif all(w.isdigit() for w in wrong):
            passed += 1
        elif all(w == "N/A" for w in wrong):
            skipped += 1
    return passed, failed, skipped


def count_bench(text):
    """nccl-tests' columns: #wrong out of place and in place."""
    return count_wrong_columns(text, (8, 12))


def count_fused(text):
    """tpar bench --fused: one wrong column, the last of fifteen."""
    return count_wrong_columns(text, (14,))


def count_rows(text):
    """tpar bench --host-cost: one #wrong column, the tenth."""
    return count_wrong_columns(text, (9,))


def count_by_rules(text, rules):
    """Each line counts once, by the first rule whose pattern matches it: (pattern, outcome),
    the outcome "passed", "failed", "skipped", or a function of the match that returns
    (passed, failed, skipped)."""
    counts = [0, 0, 0]
    for line in text.splitlines():
        for pattern, outcome in rules:
            m = pattern.match(line.rstrip())
            if m:
                add = outcome(m) if callable(outcome) else [int(outcome == k) for k in STATUSES[:3]]
                counts = [c + int(a) for c, a in zip(counts, add)]
                break
    return tuple(counts)


def verdict(m):
    return (1, 0, 0) if m.group(1) == "PASS" else (0, 1, 0)


def checks_and_failures(m):
    checks, failures = int(m.group(2)), int(m.group(3))
    return max(0, checks - failures), failures or m.group(1) == "FAIL", 0


SYMM_RULES = [(re.compile(r"^\S+\s+\d+\s+[\d.]+ us\s+0 wrong$"), "passed"),
              (re.compile(r"^\S+\s+\d+\s+[\d.]+ us\s+\d+ wrong$"), "failed"),
              (re.compile(r"^\S+\s+\d+ skipped: "), "skipped")]
CHECK_RULES = [(re.compile(r"^\w+: (PASS|FAIL) \((\d+) checks\b.*?(\d+) failures?\b"),
                checks_and_failures),
               (re.compile(r"^(?:\w+: )?(PASS|FAIL)(?:$|\s)"), verdict),
               (re.compile(r"^check .* -> ok$"), "passed"),
               (re.compile(r"^check .* -> FAILED"), "failed"),
               (re.compile(r"^\s+\S+\s+(PASS|FAIL)\s"), verdict),
               (re.compile(r"^\S+\s+skipped: "), "skipped")]


def count_symm(text):
    return count_by_rules(text, SYMM_RULES)


def count_checks(text):
    return count_by_rules(text, CHECK_RULES)


def count_sanitizer(text):
    errors = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) errors?", text)]
    return sum(1 for e in errors if e == 0), sum(1 for e in errors if e > 0), 0


PARSERS = {"gtest": count_gtest, "pytest": count_pytest, "pytest-ranks": count_pytest_ranks,
           "rows": count_rows,
           "bench": count_bench, "fused": count_fused, "symm": count_symm, "checks": count_checks,
           "sanitizer": count_sanitizer}


def count_log(parser, path):
    """(passed, failed, skipped) of one log; a missing log counts nothing."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return 0, 0, 0
    return PARSERS[parser](text)


# ---- the file ---------------------------------------------------------------------------------

def summary_path(outdir):
    return os.path.join(outdir, "summary.json")


def load(outdir):
    with open(summary_path(outdir)) as f:
        return json.load(f)


def save(outdir, summary):
    tmp = summary_path(outdir) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(tmp, summary_path(outdir))


def machine():
    """What nvidia-smi says about the GPUs; zero GPUs where it is missing or fails."""
    info = {"kind": os.environ.get("TPAR_MACHINE_KIND") or "unknown", "gpus": 0, "gpu": "none",
            "driver": "none"}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return info
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    if rows:
        info["gpus"] = len(rows)
        info["gpu"] = ", ".join(sorted({r[0] for r in rows}))
        info["driver"] = rows[0][-1]
    return info


def empty_step(name):
    return {"name": name, "command": "", "status": "not run", "passed": 0, "failed": 0,
            "skipped": 0, "records": []}


def cmd_start(args):
    names = [n for n in args.steps.split(",") if n]
    if len(set(names)) != len(names):
        raise SystemExit(f"summary.py: a step is named twice in --steps {args.steps}")
    os.makedirs(args.outdir, exist_ok=True)
    commit = args.commit or os.environ.get("TPAR_COMMIT") or "unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    save(args.outdir, {"script": args.script, "commit": commit, "date": date,
                       "machine": machine(), "steps": [empty_step(n) for n in names]})
    return 0


def step_status(rc, counts, parsed):
    passed, failed, skipped = counts
    if rc != 0 or failed > 0:
        return "failed"
    if not parsed or passed > 0:
        return "passed"
    return "skipped" if skipped > 0 else "failed"


def cmd_add_step(args):
    summary = load(args.outdir)
    step = empty_step(args.name)
    step["command"] = args.command
    if args.rc is not None:
        counts = [0, 0, 0]
        for spec in args.log:
            parser, _, path = spec.partition(":")
            if parser not in PARSERS or not path:
                raise SystemExit(f"summary.py: --log {spec}: want PARSER:PATH, PARSER one of "
                                 + ", ".join(PARSERS))
            path = path if os.path.isabs(path) else os.path.join(args.outdir, path)
            for i, n in enumerate(count_log(parser, path)):
                counts[i] += n
        step["passed"], step["failed"], step["skipped"] = counts
        step["status"] = step_status(args.rc, counts, bool(args.log))
    else:
        step["status"] = "skipped" if args.skipped else "not run"
    outdir = os.path.realpath(args.outdir)
    for rec in args.record:
        path = os.path.realpath(rec if os.path.isabs(rec) else os.path.join(outdir, rec))
        if os.path.isfile(path) and path.startswith(outdir + os.sep):
            step["records"].append(os.path.relpath(path, outdir))
    steps = summary["steps"]
    for i, s in enumerate(steps):
        if s["name"] == args.name:
            steps[i] = step
            break
    else:
        steps.append(step)
    save(args.outdir, summary)
    print(f"{args.name}: {step['status']} ({step['passed']} passed, {step['failed']} failed, "
          f"{step['skipped']} skipped)")
    return 0


def cmd_finish(args):
    summary = load(args.outdir)
    m = summary["machine"]
    print(f"summary of {summary['script']} at {summary['commit']} ({summary['date']}; "
          f"{m['kind']}: {m['gpus']} x {m['gpu']}, driver {m['driver']})")
    print(f"  {'step':16s} {'status':8s} {'passed':>7s} {'failed':>7s} {'skipped':>8s}  records")
    for s in summary["steps"]:
        print(f"  {s['name']:16s} {s['status']:8s} {s['passed']:7d} {s['failed']:7d} "
              f"{s['skipped']:8d}  {' '.join(s['records'])}")
    failed = [s["name"] for s in summary["steps"] if s["status"] == "failed"]
    chosen = set(args.chosen.replace(",", " ").split())
    left = [s["name"] for s in summary["steps"]
            if s["status"] == "not run" and (not chosen or s["name"] in chosen)]
    if failed:
        print("failed: " + ",".join(failed))
    if left and args.rerun:
        print(f"not run: {','.join(left)} (to run them: {args.rerun} {','.join(left)})")
    return 1 if failed else 0


def cmd_pack(args):
    outdir = os.path.realpath(args.outdir)
    summary = load(outdir)
    own = {"summary.json", "logs.tgz", "logs.tgz.tmp"}
    files = []
    for root, _, names in os.walk(outdir):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), outdir)
            if rel not in own:
                files.append(rel)
    files.sort()
    tmp = os.path.join(outdir, "logs.tgz.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in files:
            tar.add(os.path.join(outdir, rel), arcname=rel)
    os.replace(tmp, os.path.join(outdir, "logs.tgz"))
    records = [r for s in summary["steps"] for r in s["records"]]
    records = ([r for r in records if r.endswith(".json")] +
               [r for r in records if not r.endswith(".json")])
    kept = []
    for rec in records:
        fits = rec.count(os.sep) <= 2 and re.fullmatch(r"[A-Za-z0-9._/-]+", rec)
        if rec in files and rec not in kept and fits and len(kept) < args.max_files - 2:
            kept.append(rec)
    for rel in files:
        if rel not in kept:
            os.remove(os.path.join(outdir, rel))
    for root, dirs, _ in os.walk(outdir, topdown=False):
        for d in dirs:
            path = os.path.join(root, d)
            if not os.listdir(path):
                os.rmdir(path)
    print(f"{outdir}: summary.json, logs.tgz ({len(files)} files)"
          + "".join(", " + k for k in kept))
    return 0


def cmd_count(args):
    counts = [0, 0, 0]
    for path in args.logs:
        for i, n in enumerate(count_log(args.parser, path)):
            counts[i] += n
    print(*counts)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="summary.py", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("start", help="write OUTDIR/summary.json with every step not run")
    p.add_argument("outdir")
    p.add_argument("--script", required=True, help="the script, as a path from the repository")
    p.add_argument("--steps", required=True, help="every step of the script, comma-separated")
    p.add_argument("--commit", default="", help="default: $TPAR_COMMIT, else unknown")
    p.set_defaults(run=cmd_start)
    p = sub.add_parser("add-step", help="record one step")
    p.add_argument("outdir")
    p.add_argument("--name", required=True)
    p.add_argument("--command", default="")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--rc", type=int, help="the step ran: its exit status")
    how.add_argument("--skipped", action="store_true", help="chosen, but cannot run here")
    how.add_argument("--not-run", action="store_true", help="not chosen, or no time left")
    p.add_argument("--log", action="append", default=[], metavar="PARSER:PATH",
                   help="a log to count (" + ", ".join(PARSERS) + "); PATH relative to OUTDIR")
    p.add_argument("--record", action="append", default=[], metavar="PATH",
                   help="a file the step wrote (kept where it exists inside OUTDIR)")
    p.set_defaults(run=cmd_add_step)
    p = sub.add_parser("finish", help="print the summary; exit 1 when a step failed")
    p.add_argument("outdir")
    p.add_argument("--rerun", default="", help="command prefix printed for the steps not run")
    p.add_argument("--chosen", default="", help="the steps asked for (default all): only those "
                   "are named when not run")
    p.set_defaults(run=cmd_finish)
    p = sub.add_parser("pack", help="pack OUTDIR into logs.tgz; keep the summary and records")
    p.add_argument("outdir")
    p.add_argument("--max-files", type=int, default=8)
    p.set_defaults(run=cmd_pack)
    p = sub.add_parser("count", help="print what a parser counts in logs")
    p.add_argument("parser", choices=sorted(PARSERS))
    p.add_argument("logs", nargs="+")
    p.set_defaults(run=cmd_count)
    args = ap.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
