#!/usr/bin/env python3
"""Checks the records rule of docs/RECORDS.md over README.md and docs/*.md: every number that
reports a measurement sits in a fenced block that cites the files under bench/results/ holding
it, and matches a number there within the rounding it is printed with; the state table of
docs/STATUS.md agrees with the summary files it cites; bench/results/ keeps its raw logs in one
archive per run (a log is cited as bench/results/RUN.tgz:MEMBER), and the JSON records name
only logs that are there.

    scripts/check-records.py [--root DIR] [FILE...]    (default: README.md docs/*.md)

Prints one line per problem ("FILE:LINE: what") and exits 1 when there is any; prints nothing
when there is none. The rules, the fences and the allow-list are documented in
docs/RECORDS.md; the unit tests are tests/records/records_test.py."""
import argparse
import bisect
import fnmatch
import glob
import itertools
import json
import math
import os
import re
import sys
import tarfile

KINDS = ("record", "no-record", "not-measured", "state-table")
FENCE_OPEN = re.compile(r"^\s*<!--\s*(record|no-record|not-measured|state-table)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE_CLOSE = re.compile(r"^\s*<!--\s*/(record|no-record|not-measured|state-table)\s*-->\s*$")
COMMENT = re.compile(r"<!--.*?-->")
LINK_TARGET = re.compile(r"\]\([^)]*\)")

# Units that make an integer a measurement (latency, bandwidth); seconds and milliseconds are
# left out: in these pages they are timeouts and bounds far more often than results.
UNITS = ("us", "µs", "GB/s", "MB/s", "TB/s")
# A decimal right after one of these words is a version ("CUDA 13.0"), not a measurement.
VERSION_WORDS = {"cuda", "nccl", "cmake", "python", "hwloc", "torch", "pytorch", "vllm", "sglang",
                 "nvcc", "version", "versions", "format", "driver", "tpar", "clang", "gcc",
                 "transformers", "release", "releases", "toolkit", "capability", "mpi", "ubuntu",
                 "debian", "nanobind", "scikit-build-core", "gtest", "googletest", "cli11"}
BOUNDS = ("<=", "≤", ">=", "≥", "<", ">")
BOUND_WORDS = {"most", "least"}  # "at most 2x", "at least 64"
NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
WORD_NUMBER = re.compile(rf"^[~≈]?[-+]?(?P<a>{NUMBER})(?:[-–](?P<b>{NUMBER}))?(?P<suffix>%|x|×)?$")
STRIP = "()[]{},;:`*\"'|.!?"
COUNT_AFTER = re.compile(r"^\s+(?:[A-Za-z][\w-]*\s+){0,2}?(?:passed|failed|skipped|runs|tests)\b")
COUNT_M_RUNS = re.compile(r"^\s+M\s+runs\b")
STEP = re.compile(r"`([a-z][a-z0-9-]*)`")
SUMMARY_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-([a-z0-9]+)-summary-([0-9a-f]{7,40})\.json$")
SUMMARY_MENTION = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+-summary-[0-9a-f]+\.json")
# A member of an archive: "bench/results/RUN.tgz:MEMBER" (docs/RECORDS.md, "Layout").
ARCHIVE_MEMBER = re.compile(r"^(?P<archive>.+?\.(?:tgz|tar\.gz)):(?P<member>.+)$")
RAW_LOG = (".log", ".txt")
RECORD_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-([a-z0-9]+)-.*?(?:-((?=[0-9a-f]*\d)[0-9a-f]{7,40})(?=-|$).*)?$")
MENTION = re.compile(r"(?:\.\.\.-|\d{4}-\d{2}-\d{2}-)[\w.{},*-]+")
STATUSES = ("passed", "failed", "skipped", "not run")
NUMBERS_IN_TEXT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class Token:
    """A number printed in a page, with how precisely it is printed."""

    def __init__(self, value, text, kind, line, col):
        self.value = value
        self.text = text
        self.kind = kind  # "decimal", "percent", "ratio", "unit", "count"
        self.line = line
        self.col = col
        self.half = half_unit(text)


def half_unit(text):
    """Half the last printed digit: the rounding a printed number allows."""
    text = text.replace(",", "")
    m = re.match(r"^(\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?$", text)
    if not m:
        return 0.5
    decimals = len(m.group(2) or "")
    exp = int(m.group(3) or 0)
    return 0.5 * 10 ** (exp - decimals)


def to_float(text):
    return float(text.replace(",", ""))


def visible(line):
    """The text a reader sees: no HTML comments, no link targets."""
    return LINK_TARGET.sub("]", COMMENT.sub("", line))


def words_of(line):
    """(word, start) for every whitespace-separated word."""
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+", line)]


def last_word(text):
    """The last plain word of `text` ("find_package(tpar" -> "tpar"), lower case."""
    found = re.findall(r"[A-Za-z][\w+-]*", text)
    return found[-1].lower() if found else ""


def tokens_of(line, lineno, before=""):
    """Measurement tokens of one visible line, and every number on it (for derived values).
    `before`: the previous line, whose last word precedes this line's first."""
    tokens, numbers = [], []
    # Inline code holds commands, settings and input values, not results (a bench excerpt is a
    # code block, which is read as text).
    line = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
    words = words_of(line)
    for i, (raw, start) in enumerate(words):
        word = raw.strip(STRIP)
        m = WORD_NUMBER.match(word)
        if not m:
            continue
        parts = [m.group("a")] + ([m.group("b")] if m.group("b") else [])
        suffix = m.group("suffix") or ""
        after = line[start + len(raw):]
        next_word = words[i + 1][0].strip(STRIP) if i + 1 < len(words) else ""
        prev_word = words[i - 1][0] if i > 0 else (before.split() or [""])[-1]
        prev_clean = last_word(prev_word)
        if not suffix and next_word == "%":
            suffix = "%"
        for text in parts:
            numbers.append((to_float(text), half_unit(text)))
        bare_prev = prev_word.strip(STRIP)
        if (bare_prev in BOUNDS or raw.lstrip(STRIP).startswith(BOUNDS)
                or bare_prev.endswith(("<=", ">=")) or prev_clean in BOUND_WORDS):
            continue  # a bound: a target or a threshold, not a result
        is_decimal = any("." in t for t in parts)
        if is_decimal and (prev_clean in VERSION_WORDS or after.startswith("+")):
            continue
        if suffix == "%":
            kind = "percent"
        elif suffix in ("x", "×"):
            if not is_decimal:
                continue  # "2x the bytes": a factor of a design, not a measurement
            kind = "ratio"
        elif is_decimal:
            kind = "decimal"
        elif next_word in UNITS:
            kind = "unit"
        elif COUNT_AFTER.match(after) or COUNT_M_RUNS.match(after):
            kind = "count"
        else:
            continue
        for text in parts:
            tokens.append(Token(to_float(text), text, kind, lineno, start))
    return tokens, numbers


# ---- pages: fences ------------------------------------------------------------------------


class Block:
    def __init__(self, kind, arg, first):
        self.kind = kind  # None outside any fence
        self.arg = arg
        self.first = first  # line number of the opening comment (or of the first line)
        self.lines = []  # (lineno, visible text)

    def text(self):
        return "\n".join(t for _, t in self.lines)


def blocks_of(path, text, problems):
    blocks = [Block(None, None, 1)]
    open_block = None
    in_comment = False
    in_code = False
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:  # code is shown as written: no fences, no hidden comments
            (open_block or blocks[-1]).lines.append((lineno, line))
            continue
        mo, mc = FENCE_OPEN.match(line), FENCE_CLOSE.match(line)
        if mo:
            if open_block:
                problems.append(f"{path}:{lineno}: '{mo.group(1)}' fence inside the "
                                f"'{open_block.kind}' fence of line {open_block.first}")
            open_block = Block(mo.group(1), (mo.group(2) or "").strip(), lineno)
            blocks.append(open_block)
            continue
        if mc:
            if not open_block or open_block.kind != mc.group(1):
                problems.append(f"{path}:{lineno}: closing '{mc.group(1)}' fence without its opening")
            open_block = None
            blocks.append(Block(None, None, lineno + 1))
            continue
        # Multi-line HTML comments are invisible too.
        shown = line
        if in_comment:
            if "-->" not in shown:
                continue
            shown = shown.split("-->", 1)[1]
            in_comment = False
        shown = visible(shown)
        if "<!--" in shown:
            shown, in_comment = shown.split("<!--", 1)[0], True
        (open_block or blocks[-1]).lines.append((lineno, shown))
    if open_block:
        problems.append(f"{path}:{open_block.first}: '{open_block.kind}' fence never closed")
    return blocks


# ---- records --------------------------------------------------------------------------------


def json_numbers(value, out):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            out.append(abs(float(value)))
    elif isinstance(value, dict):
        for v in value.values():
            json_numbers(v, out)
    elif isinstance(value, list):
        for v in value:
            json_numbers(v, out)


def numbers_of_file(name, data):
    out = []
    if name.endswith(".json"):
        json_numbers(json.loads(data.decode("utf-8")), out)
    else:
        for m in NUMBERS_IN_TEXT.finditer(data.decode("utf-8", "replace")):
            out.append(abs(float(m.group(0))))
    return out


def split_member(rel):
    """("bench/results/RUN.tgz", "MEMBER") for an archive member, (rel, None) for a file."""
    m = ARCHIVE_MEMBER.match(rel)
    return (m.group("archive"), m.group("member")) if m else (rel, None)


def member_key(name):
    """A member's name as cited: without a leading "./"."""
    while name.startswith("./"):
        name = name[2:]
    return name


class Records:
    """The numbers of the files under bench/results, read once each; a citation is a file
    (every member of an archive counts) or one member of an archive ("RUN.tgz:MEMBER")."""

    def __init__(self, root):
        self.root = root
        self.cache = {}
        self.archives = {}  # archive rel -> {member name: bytes}

    def members(self, archive):
        """{name: data} of the regular files of an archive (names without a leading "./")."""
        if archive not in self.archives:
            out = {}
            with tarfile.open(os.path.join(self.root, archive)) as t:
                for member in t.getmembers():
                    if member.isfile():
                        out[member_key(member.name)] = t.extractfile(member).read()
            self.archives[archive] = out
        return self.archives[archive]

    def missing(self, rel):
        """Why a citation does not resolve (a sentence naming what is missing), or None."""
        archive, member = split_member(rel)
        if not rel.startswith("bench/results/"):
            return f"{rel} is not under bench/results/"
        if not os.path.isfile(os.path.join(self.root, archive)):
            if member is None:
                holder = self.holder(os.path.basename(rel))
                if holder:
                    return (f"{rel} does not exist: it is a member of {holder}; cite it as "
                            f"{holder}:{os.path.basename(rel)}")
            return f"{archive} does not exist"
        if member is not None:
            if not archive.endswith((".tgz", ".tar.gz")):
                return f"{archive} is not an archive (.tgz): it has no member {member}"
            try:
                names = self.members(archive)
            except (OSError, tarfile.TarError) as e:
                return f"cannot read {archive}: {e}"
            if member_key(member) not in names:
                return f"{archive} holds no member {member}"
        return None

    def holder(self, name):
        """The archive of bench/results holding a member `name`, if any."""
        for path in sorted(glob.glob(os.path.join(self.root, "bench", "results", "*.tgz"))):
            archive = os.path.relpath(path, self.root).replace(os.sep, "/")
            try:
                if name in self.members(archive):
                    return archive
            except (OSError, tarfile.TarError):
                continue
        return None

    def numbers(self, rel):
        if rel not in self.cache:
            archive, member = split_member(rel)
            nums = []
            if member is not None:
                nums = numbers_of_file(member, self.members(archive)[member_key(member)])
            elif rel.endswith((".tgz", ".tar.gz")):
                for name, data in sorted(self.members(rel).items()):
                    if name.endswith((".json",) + RAW_LOG):
                        nums += numbers_of_file(name, data)
            else:
                with open(os.path.join(self.root, rel), "rb") as f:
                    nums = numbers_of_file(rel, f.read())
            self.cache[rel] = sorted(nums)
        return self.cache[rel]


def near(pool, value, tol):
    i = bisect.bisect_left(pool, value - tol)
    return i < len(pool) and pool[i] <= value + tol


def matches(token, pool, line_numbers):
    """Whether the printed number is in the records: directly, as a percentage of a stored
    fraction, or (a ratio or percentage) derived from two numbers printed on the same line."""
    slack = 1e-9 * max(1.0, token.value)
    if near(pool, token.value, token.half + slack):
        return True
    if token.kind == "percent" and near(pool, token.value / 100.0, (token.half + slack) / 100.0):
        return True
    if token.kind not in ("percent", "ratio"):
        return False
    others = [(v, h) for v, h in line_numbers if v > 0 and not (v == token.value and h == token.half)]
    for (a, ha), (b, hb) in itertools.permutations(others, 2):
        q = a / b
        rel = ha / a + hb / b
        candidates = [q] if token.kind == "ratio" else [100 * q, 100 * (q - 1), 100 * (1 - q)]
        for c in candidates:
            if abs(abs(c) - token.value) <= token.half + abs(c if token.kind == "ratio" else 100 * q) * rel + slack:
                return True
    return False


def expand_braces(pattern):
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(pattern[:m.start()] + alt + pattern[m.end():])
    return out


def mentions_file(text, rel):
    """A cited file is named in the text: by its name, its name without the extension, or a
    pattern of them ("...-python-*-3a878cf.json", "bench-host-72dde56.{json,txt}"). A cited
    member of an archive is named by its own name or by the archive's ("RUN.tgz:MEMBER" names
    both)."""
    archive, member = split_member(rel)
    names = [os.path.basename(archive)] + ([os.path.basename(member)] if member else [])
    names += [re.sub(r"\.(json|txt|log|png|tgz|tar\.gz)$", "", n) for n in names]
    for m in MENTION.finditer(text):
        raw = m.group(0).rstrip(".,;:)`")
        for pattern in expand_braces(raw):
            pattern = "*" + pattern[3:] if pattern.startswith("...") else pattern
            if any(fnmatch.fnmatchcase(n, pattern) for n in names):
                return True
    return False


def cited_name(rel):
    """How a problem names a cited file: "RUN.tgz:MEMBER" for a member, else the file name."""
    archive, member = split_member(rel)
    return os.path.basename(archive) + (f":{member}" if member else "")


def check_provenance(path, block, files, problems):
    text = block.text()
    for rel in files:
        base = cited_name(rel)
        where = f"{path}:{block.first}"
        if not mentions_file(text, rel):
            problems.append(f"{where}: the text of the block does not name {base}")
        # The date, machine and commit of a member are those of its archive: the run's name.
        run = os.path.basename(split_member(rel)[0])
        m = RECORD_NAME.match(re.sub(r"\.(json|txt|log|png|tgz|tar\.gz)$", "", run))
        machine = m.group(1) if m else ""
        if not (m and m.group(2)) and not re.search(r"commits? (?:[0-9a-f]{7,40}|not recorded)", text):
            problems.append(f"{where}: {base} has no commit in its name: the text must say "
                            "'commit <hash>' (or 'commit not recorded')")
        if re.fullmatch(r"[a-z]+\d+(?:x\d+)?", machine):
            model = re.sub(r"x\d+$", "", machine)
            if model.lower() not in text.lower():
                problems.append(f"{where}: the text does not name the machine ({model.upper()}) of {base}")
        elif "no gpu" not in text.lower():
            problems.append(f"{where}: {base} names no machine: the text must say 'no GPU' when none ran")


def check_record_block(path, block, records, problems):
    files = [f.strip() for f in block.arg.split(",") if f.strip()]
    if not files:
        problems.append(f"{path}:{block.first}: a record fence names no file")
        return
    pool = []
    for rel in files:
        why = records.missing(rel)
        if why:
            problems.append(f"{path}:{block.first}: {why}")
            continue
        try:
            pool += records.numbers(rel)
        except (ValueError, OSError, tarfile.TarError) as e:
            problems.append(f"{path}:{block.first}: cannot read {rel}: {e}")
    pool.sort()
    check_provenance(path, block, files, problems)
    before = ""
    for lineno, line in block.lines:
        tokens, numbers = tokens_of(line, lineno, before)
        before = line
        for t in tokens:
            if not matches(t, pool, numbers):
                problems.append(f"{path}:{lineno}: {t.text}{'%' if t.kind == 'percent' else ''} "
                                f"is in none of {', '.join(cited_name(f) for f in files)}")


# ---- allow-list -----------------------------------------------------------------------------


def allow_list(root, problems):
    """{page: [phrase, ...]} from the table under "## Allowed constants" in docs/RECORDS.md."""
    path = os.path.join(root, "docs", "RECORDS.md")
    out = {}
    if not os.path.exists(path):
        return out
    section = False
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for lineno, line in enumerate(lines, 1):
        if line.startswith("## "):
            section = line.strip() == "## Allowed constants"
            continue
        if not section or not line.startswith("|") or line.startswith("| page") or "---" in line:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0] or not cells[1] or not cells[2]:
            problems.append(f"docs/RECORDS.md:{lineno}: an allow-list row needs page, text and why")
            continue
        out.setdefault(cells[0].strip("`"), []).append((cells[1], lineno))
    return out


# ---- the state table ------------------------------------------------------------------------


def load_summary(root, name, problems, where):
    path = os.path.join(root, "bench", "results", name)
    if not os.path.isfile(path):
        problems.append(f"{where}: bench/results/{name} does not exist")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        problems.append(f"{where}: bench/results/{name}: {e}")
        return None


def check_summary_file(root, rel, problems, records=None):
    """The format of docs/RECORDS.md ("Summary files") for one committed summary."""
    name = os.path.basename(rel)
    m = SUMMARY_NAME.match(name)
    where = rel
    if not m:
        problems.append(f"{where}: not named DATE-MACHINE-summary-COMMIT.json")
        return
    s = load_summary(root, name, problems, where)
    if s is None:
        return
    for key, kind in (("script", str), ("commit", str), ("date", str), ("machine", dict),
                      ("steps", list)):
        if not isinstance(s.get(key), kind):
            problems.append(f"{where}: '{key}' is missing or not a {kind.__name__}")
            return
    if not s["commit"].startswith(m.group(3)) and not m.group(3).startswith(s["commit"]):
        problems.append(f"{where}: commit {s['commit']} is not the {m.group(3)} of its name")
    if not re.match(r"^\d{4}-\d{2}-\d{2}", s["date"]) or s["date"][:10] != m.group(1):
        problems.append(f"{where}: date {s['date']} is not the {m.group(1)} of its name")
    mach = s["machine"]
    for key, kind in (("kind", str), ("gpus", int), ("gpu", str), ("driver", str)):
        if not isinstance(mach.get(key), kind):
            problems.append(f"{where}: machine.{key} is missing or not a {kind.__name__}")
    model = re.match(r"([a-z]+\d+)(?:x(\d+))?$", m.group(2))
    if model and isinstance(mach.get("kind"), str) and isinstance(mach.get("gpus"), int):
        gpus = int(model.group(2) or 1)
        if mach["gpus"] != gpus or model.group(1) not in mach["kind"]:
            problems.append(f"{where}: machine {mach['kind']} with {mach['gpus']} GPUs is not "
                            f"the {m.group(2)} of its name")
    for i, step in enumerate(s["steps"]):
        at = f"{where}: steps[{i}]"
        for key, kind in (("name", str), ("command", str), ("status", str), ("passed", int),
                          ("failed", int), ("skipped", int), ("records", list)):
            if not isinstance(step.get(key), kind) or isinstance(step.get(key), bool):
                problems.append(f"{at}: '{key}' is missing or not a {kind.__name__}")
        if step.get("status") not in STATUSES:
            problems.append(f"{at}: status '{step.get('status')}' is not one of {', '.join(STATUSES)}")
        if step.get("status") == "passed" and step.get("failed"):
            problems.append(f"{at}: 'passed' with {step.get('failed')} failures")
        if step.get("failed") and step.get("status") != "failed":
            problems.append(f"{at}: {step.get('failed')} failures but status '{step.get('status')}'")
        for r in step.get("records", []) if isinstance(step.get("records"), list) else []:
            why = (records or Records(root)).missing(r) if isinstance(r, str) else "not a path"
            if why:
                problems.append(f"{at}: record {r} is not a file under bench/results/ ({why})")
            elif is_raw_log(split_member(r)[0]):
                problems.append(f"{at}: record {r} is a raw log outside an archive: name it as "
                                "bench/results/RUN.tgz:MEMBER")


# ---- the layout of bench/results --------------------------------------------------------------


def is_raw_log(rel):
    return rel.endswith(RAW_LOG)


def check_layout(root, records, problems):
    """Raw logs live in archives, one per run; JSON records stay plain files and name a log as
    an archive member ("RUN.tgz:MEMBER", or "bench/results/RUN.tgz:MEMBER"), which must exist."""
    results = os.path.join(root, "bench", "results")
    for path in sorted(glob.glob(os.path.join(results, "*"))):
        name = os.path.basename(path)
        if os.path.isfile(path) and is_raw_log(name):
            run = re.sub(r"\.(log|txt)$", "", name)
            problems.append(f"bench/results/{name}: a raw log outside an archive: pack it into "
                            f"its run's (scripts/pack-logs.sh --rm {run} bench/results/{name})")
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except ValueError as e:
            problems.append(f"{rel}: {e}")
            continue
        summary = bool(SUMMARY_NAME.match(os.path.basename(path)))
        for where, value in json_strings(data, ""):
            if summary and re.match(r"^\.steps\[\d+\]\.records\[", where):
                continue  # check_summary_file checks these
            named = value if value.startswith("bench/results/") else "bench/results/" + value
            archive, member = split_member(named)
            if member is None and not (is_raw_log(value) and re.fullmatch(r"[\w./-]+", value)
                                       and RECORD_NAME.match(os.path.basename(value))):
                continue  # not a file name (a command, a sentence), or not a raw log
            if member is None:
                problems.append(f"{rel}: {where[1:]} names {value}, a raw log outside an "
                                "archive: name it as RUN.tgz:MEMBER")
                continue
            why = records.missing(named)
            if why:
                problems.append(f"{rel}: {where[1:]} names {value}, which is missing: {why}")


def json_strings(value, where):
    """(path, string) of every string of a JSON value ("" the root, ".a[2].b" below it)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from json_strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_strings(v, f"{where}[{i}]")


def number_word(n):
    words = {1: "one", 2: "two", 3: "three", 4: "four", 8: "eight"}
    return [str(n)] + ([words[n]] if n in words else [])


def check_state_table(path, block, root, problems):
    for lineno, line in block.lines:
        if not line.startswith("|") or re.match(r"^\|\s*-", line) or "| feature" in line:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        last = cells[-1]
        where = f"{path}:{lineno}"
        tokens, _ = tokens_of(line, lineno)
        for t in tokens:
            if t.kind != "count":
                problems.append(f"{where}: the state table carries a measurement ({t.text}); "
                                "state it in a recorded section and point there")
        name_spans = [(m.start(), m.end(), m.group(0)) for m in SUMMARY_MENTION.finditer(last)]
        if not name_spans:
            if not re.search(r"\bCI\b|not run|never run", last):
                problems.append(f"{where}: the last column cites no summary file and says neither "
                                "'CI' nor 'not run'")
            continue
        loaded = {n: load_summary(root, n, problems, where) for _, _, n in name_spans}
        # A step mention belongs to the first summary named after it (the name closes a group
        # of steps); the group's text, from its first step mention to the first mention of the
        # next summary, must name the commit and the machine. Each mention owns the counts up
        # to the next mention.
        mentions = [(m.start(), m.group(1)) for m in STEP.finditer(last)]
        if not mentions:
            problems.append(f"{where}: no `step` of the cited summaries is named")

        def span_of(pos):
            after = [span for span in name_spans if span[0] >= pos]
            return after[0] if after else name_spans[-1]

        owners = [span_of(start) for start, _ in mentions]
        for k, (start, step_name) in enumerate(mentions):
            end = mentions[k + 1][0] if k + 1 < len(mentions) else len(last)
            segment = last[start:end]
            span = owners[k]
            # The group: from the first mention of this summary to the first of the next one.
            first = next(mentions[i][0] for i in range(len(mentions)) if owners[i] == span)
            nxt = [mentions[i][0] for i in range(len(mentions))
                   if mentions[i][0] > first and owners[i] != span]
            group = last[first:(nxt[0] if nxt else len(last))]
            n, s = span[2], loaded.get(span[2])
            if s is None:
                continue
            st = next((x for x in s.get("steps", []) if x.get("name") == step_name), None)
            if st is None:
                problems.append(f"{where}: step `{step_name}` is not in {n}")
                continue
            if s["commit"][:7] not in group.replace(n, ""):
                problems.append(f"{where}: {n} ran commit {s['commit'][:7]}, which the row does not name")
            mach = s.get("machine", {})
            gpu_model = re.sub(r"^NVIDIA\s+", "", mach.get("gpu", ""))
            if not any(re.search(rf"\b{w}\s+{re.escape(gpu_model)}", group, re.I)
                       for w in number_word(mach.get("gpus", 0))):
                problems.append(f"{where}: the row does not say the {mach.get('gpus')} "
                                f"{gpu_model} of {n}")
            if not re.search(r"\b(virtual|real) ranks\b", group):
                problems.append(f"{where}: the row does not say 'virtual ranks' or 'real ranks' "
                                f"for {n}")
            for word in ("passed", "failed", "skipped"):
                said = re.findall(rf"(\d[\d,]*)\s+(?:[A-Za-z]+\s+){{0,2}}?{word}\b", segment)
                for number in said:
                    if int(number.replace(",", "")) != st.get(word):
                        problems.append(f"{where}: `{step_name}` says {number} {word}; {n} has "
                                        f"{st.get(word)}")
                if word != "passed" and st.get(word) and not said:
                    problems.append(f"{where}: `{step_name}` had {st.get(word)} {word}; the row "
                                    "must say so")
            if st.get("status") == "not run" and "not run" not in segment:
                problems.append(f"{where}: `{step_name}` was not run; the row must say so")


# ---- a page ---------------------------------------------------------------------------------


def check_page(root, rel, records, allowed, problems):
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    used = set()
    for block in blocks_of(rel, text, problems):
        if block.kind == "record":
            check_record_block(rel, block, records, problems)
        elif block.kind == "no-record":
            if "no record" not in block.text().lower():
                problems.append(f"{rel}:{block.first}: a no-record block must say 'no record' "
                                "where readers see it")
        elif block.kind == "not-measured":
            if not block.arg:
                problems.append(f"{rel}:{block.first}: a not-measured fence must say why")
        elif block.kind == "state-table":
            check_state_table(rel, block, root, problems)
        else:
            before = ""
            for lineno, line in block.lines:
                tokens, _ = tokens_of(line, lineno, before)
                before = line
                for t in tokens:
                    phrase = next((p for p in allowed.get(rel, [])
                                   if p[0] in lines[lineno - 1]
                                   and lines[lineno - 1].find(p[0]) <= t.col
                                   < lines[lineno - 1].find(p[0]) + len(p[0])), None)
                    if phrase:
                        used.add(phrase)
                        continue
                    problems.append(f"{rel}:{lineno}: '{t.text}' looks like a measurement and is "
                                    "in no record fence (docs/RECORDS.md)")
    for phrase, lineno in allowed.get(rel, []):
        if (phrase, lineno) not in used:
            problems.append(f"docs/RECORDS.md:{lineno}: the allowed text '{phrase}' is not an "
                            f"unfenced number of {rel} (any more)")


def default_pages(root):
    pages = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    return [p for p in pages if os.path.exists(os.path.join(root, p))]


def check(root, pages=None):
    problems = []
    records = Records(root)
    allowed = allow_list(root, problems)
    every_page = not pages
    pages = pages or default_pages(root)
    for rel in pages:
        check_page(root, rel, records, allowed, problems)
    for rel in sorted(glob.glob(os.path.join(root, "bench", "results", "*-summary-*.json"))):
        check_summary_file(root, os.path.relpath(rel, root), problems, records)
    check_layout(root, records, problems)
    for page in allowed:
        if every_page and page not in pages:
            problems.append(f"docs/RECORDS.md: the allow-list names {page}, which is not checked")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("pages", nargs="*")
    a = p.parse_args()
    problems = check(a.root, a.pages or None)
    try:
        for problem in problems:
            print(problem)
    except BrokenPipeError:  # a reader that stopped early (| head)
        return 1
    if problems:
        print(f"{len(problems)} problems (docs/RECORDS.md says what the rule is)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
