#!/usr/bin/env python3
"""The GPU run scripts without a GPU: scripts/summary.py's log parsers and file handling,
scripts/multi-gpu-run.sh's arguments and dry runs, and whole runs of multi-gpu-run.sh and
gpu-check.sh on stand-in programs (nvidia-smi, cmake, ninja, the test programs, tpar and a
python with torch), which print what the real ones print, and scripts/compare-variants.sh on a
stand-in cmake whose `tpar bench` reports a time its source tree names.

    python3 tests/scripts/run_scripts_test.py      (standard library only; CTest runs it)
"""
import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import summary  # noqa: E402

STEPS = ["build", "gpu-tests", "shim-tests", "doctor", "python-tests", "tp-model", "verify-8",
         "verify-64", "torch-symm", "bench", "bench-host", "bench-procs", "islands",
         "islands-forced", "shim-torch", "host-cost", "tune", "fused", "verify-fused",
         "tp-model-fused", "wire"]
STEP_KEYS = {"name", "command", "status", "passed", "failed", "skipped", "records"}

# `tpar bench` output in its current layout: nccl-tests' 13 columns, then backend and algo.
BENCH_LOG = textwrap.dedent("""\
    # tpar bench: 4 ranks
    #                                                             out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong  backend                   algo
           12288          6144  bfloat16     sum      -1     4.97    2.47    4.33       0     5.10    2.41    4.22       0  tpar                   oneshot
           12288          6144  bfloat16     sum      -1     9.97    1.23    2.16       0     9.10    1.35    2.36       3  tpar:twoshot           twoshot
           12288          6144  bfloat16     sum      -1    14.97    0.82    1.44     N/A    15.10    0.81    1.42     N/A  nccl                   -
    # skipped nccl:shm: NCCL refuses this
    # Out of bounds values : 3 FAILED
    # FAILED: 3 wrong elements
    """)


def recorded_log(archive, member):
    """A committed log, a member of its run's archive (docs/RECORDS.md), copied to a file."""
    out = os.path.join(tempfile.mkdtemp(prefix="tpar-recorded-"), member)
    with tarfile.open(os.path.join(RESULTS, archive)) as t, open(out, "wb") as f:
        f.write(t.extractfile(member).read())
    return out


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def run(args, env=None, cwd=ROOT):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


class Parsers(unittest.TestCase):
    def test_gtest_counts_closing_lines_not_the_listed_tests(self):
        log = textwrap.dedent("""\
            [  FAILED  ] Suite.A (3 ms)
            [==========] 5 tests from 1 test suite ran. (10 ms total)
            [  PASSED  ] 2 tests.
            [  SKIPPED ] 1 test, listed below:
            [  SKIPPED ] Suite.B
            [  FAILED  ] 2 tests, listed below:
            [  FAILED  ] Suite.A
            [  FAILED  ] Suite.C
            [  PASSED  ] 1 test.
            """)
        self.assertEqual(summary.count_gtest(log), (3, 2, 1))

    def test_gtest_on_recorded_logs(self):
        self.assertEqual(summary.count_log("gtest", recorded_log(
            "2026-11-30-h200x2-gpu-tests-ccb0e85.tgz", "2026-11-30-h200x2-gpu-tests-ccb0e85.log")), (77, 219, 0))
        self.assertEqual(summary.count_log("gtest", recorded_log(
            "2026-11-30-h200x2-shim-gpu-tests-ccb0e85.tgz", "2026-11-30-h200x2-shim-gpu-tests-ccb0e85.log")), (5, 0, 0))

    def test_pytest_lines_add_up_and_ranks_count_each_test_once(self):
        log = ("==== 40 passed, 2 skipped, 14 warnings in 17.55s ====\n"
               "38 passed, 1 failed, 1 error, 2 skipped in 18.13s\n")
        self.assertEqual(summary.count_pytest(log), (78, 2, 4))
        self.assertEqual(summary.count_pytest_ranks(log), (38, 2, 2))
        self.assertEqual(summary.count_log("pytest-ranks", recorded_log(
            "2026-11-30-h200x2-python-pytest-3a878cf.tgz", "2026-11-30-h200x2-python-pytest-dist-3a878cf.log")), (40, 0, 0))

    def test_bench_rows_by_wrong_columns_and_skipped_backends(self):
        self.assertEqual(summary.count_bench(BENCH_LOG), (1, 1, 2))

    def test_fused_rows_by_their_last_column(self):
        head = ("# ranks hidden tokens ar(us) norm(us) ar+norm fused fp8 nvfp4 nccl+norm "
                "fused/ar fused/a+n fp8/ar nvfp4/ar wrong\n")
        log = (head +
               "  8 4096 1 5.08 2.51 8.05 7.75 9.23 10.14 - 1.526 0.963 1.817 1.996 0\n"
               "  8 4096 8 6.45 2.71 9.88 8.54 9.93 - - 1.323 0.865 1.538 - 3\n"
               "# wrote out.json\n")
        self.assertEqual(summary.count_fused(log), (1, 1, 0))

    def test_symm_rows(self):
        log = ("torch-symm:one_shot         1024       5.00 us 0 wrong\n"
               "torch-symm:two_shot         1024       7.00 us 12 wrong\n"
               "torch-symm:two_shot         2048 skipped: size not supported\n")
        self.assertEqual(summary.count_symm(log), (1, 1, 1))

    def test_checks_read_every_verdict_form(self):
        log = textwrap.dedent("""\
            torch_shim_check: PASS (108 checks on 2 ranks, 0 failures on all ranks)
            torch_shim_check: FAIL (10 checks on 2 ranks, 3 failures on all ranks)
            pynccl_shim_check: FAIL (shim forwarding to libnccl.so.2, 2 ranks, 1 failures)
            PASS
            check tpar: final hidden state of all 8 ranks bitwise identical; 0 non-finite values -> ok
            check tpar:hier: final hidden state of all 8 ranks differ; 0 non-finite values -> FAILED (tpar promises equal bits)
            nccl           skipped: NCCL refuses two ranks on one GPU (duplicate GPU 0)
              tpar:oneshot  PASS  20 all-reduces checked element by element
              tpar:twoshot  FAIL  3 wrong
            PASSING remarks are not verdicts
            """)
        self.assertEqual(summary.count_checks(log), (108 + 7 + 1 + 1 + 1, 3 + 1 + 1 + 1, 1))

    def test_sanitizer_reports(self):
        log = "========= ERROR SUMMARY: 0 errors\n========= ERROR SUMMARY: 2 errors\n"
        self.assertEqual(summary.count_sanitizer(log), (1, 1, 0))

    def test_missing_log_counts_nothing(self):
        self.assertEqual(summary.count_log("gtest", "/nonexistent/log"), (0, 0, 0))


class SummaryFile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name
        os.environ["TPAR_MACHINE_KIND"] = "test-kind"
        self.main("start", self.out, "--script", "scripts/x.sh", "--steps", "a,b,c",
                  "--commit", "abc123")

    def tearDown(self):
        self.tmp.cleanup()

    @staticmethod
    def main(*args):
        with contextlib.redirect_stdout(io.StringIO()):
            return summary.main(list(args))

    def load(self):
        with open(os.path.join(self.out, "summary.json")) as f:
            return json.load(f)

    def add(self, *args):
        self.main("add-step", self.out, *args)
        return {s["name"]: s for s in self.load()["steps"]}

    def test_start_writes_the_format_with_every_step_not_run(self):
        s = self.load()
        self.assertEqual(set(s), {"script", "commit", "date", "machine", "steps"})
        self.assertEqual((s["script"], s["commit"]), ("scripts/x.sh", "abc123"))
        self.assertRegex(s["date"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(set(s["machine"]), {"kind", "gpus", "gpu", "driver"})
        self.assertEqual(s["machine"]["kind"], "test-kind")
        self.assertIsInstance(s["machine"]["gpus"], int)
        self.assertEqual([x["name"] for x in s["steps"]], ["a", "b", "c"])
        for x in s["steps"]:
            self.assertEqual(set(x), STEP_KEYS)
            self.assertEqual(x["status"], "not run")

    def test_status_follows_exit_status_and_counts(self):
        log = os.path.join(self.out, "t.log")
        write(log, "[  PASSED  ] 4 tests.\n[  SKIPPED ] 1 test, listed below:\n")
        steps = self.add("--name", "a", "--command", "t", "--rc", "0", "--log", "gtest:t.log")
        self.assertEqual([steps["a"][k] for k in ("status", "passed", "failed", "skipped")],
                         ["passed", 4, 0, 1])
        steps = self.add("--name", "a", "--command", "t", "--rc", "124", "--log", "gtest:t.log")
        self.assertEqual(steps["a"]["status"], "failed")  # a timeout fails whatever was counted
        write(log, "[  SKIPPED ] 3 tests, listed below:\n")
        steps = self.add("--name", "b", "--rc", "0", "--log", f"gtest:{log}")
        self.assertEqual(steps["b"]["status"], "skipped")  # a skip is never a pass
        write(log, "nothing that looks like a result\n")
        steps = self.add("--name", "b", "--rc", "0", "--log", "gtest:t.log")
        self.assertEqual(steps["b"]["status"], "failed")  # a log that shows nothing
        steps = self.add("--name", "c", "--rc", "0")
        self.assertEqual(steps["c"]["status"], "passed")  # no log named: the exit status
        steps = self.add("--name", "c", "--skipped")
        self.assertEqual(steps["c"]["status"], "skipped")
        self.assertEqual([s["name"] for s in self.load()["steps"]], ["a", "b", "c"])

    def test_records_are_relative_and_only_existing_files_inside_outdir(self):
        write(os.path.join(self.out, "r.json"), "{}")
        write(os.path.join(self.out, "sub", "s.json"), "{}")
        steps = self.add("--name", "a", "--rc", "0", "--record", "r.json", "--record",
                         os.path.join(self.out, "sub", "s.json"), "--record", "missing.json",
                         "--record", "/etc/hostname", "--record", "../x.json")
        self.assertEqual(steps["a"]["records"], ["r.json", "sub/s.json"])

    def test_finish_fails_when_a_step_failed(self):
        self.assertEqual(self.main("finish", self.out), 0)
        self.add("--name", "b", "--rc", "1")
        self.assertEqual(self.main("finish", self.out), 1)

    def test_pack_keeps_summary_tarball_and_records_within_the_file_limit(self):
        records = []
        for i in range(8):
            write(os.path.join(self.out, f"r{i}.json"), "{}")
            records += ["--record", f"r{i}.json"]
        write(os.path.join(self.out, "plot.png"), "png")
        write(os.path.join(self.out, "logs", "a.log"), "log")
        write(os.path.join(self.out, "shim", "deep", "x.txt"), "deep")
        self.add("--name", "a", "--rc", "0", "--record", "plot.png", *records)
        self.main("pack", self.out)
        left = sorted(os.path.relpath(os.path.join(r, n), self.out)
                      for r, _, names in os.walk(self.out) for n in names)
        self.assertEqual(left, ["logs.tgz", "r0.json", "r1.json", "r2.json", "r3.json",
                                "r4.json", "r5.json", "summary.json"])
        with tarfile.open(os.path.join(self.out, "logs.tgz")) as tar:
            names = set(tar.getnames())
        self.assertTrue({"logs/a.log", "shim/deep/x.txt", "plot.png", "r7.json"} <= names)
        self.assertNotIn("summary.json", names)


STUB_TPAR = r"""#!/bin/bash
json=""; prev=""
for a in "$@"; do
  case "$prev" in --json|--output) json=$a ;; esac
  prev=$a
done
[[ " $* " == *" --host-cost "* ]] && set -- host-cost
[[ "$1" == bench && " $* " == *" --fused "* ]] && set -- bench-fused
case "$1" in
  bench-fused) echo "  4 4096 1 5.08 2.51 8.05 7.75 9.23 10.14 12.00 1.526 0.963 1.817 1.996 0" ;;
  host-cost) echo "       12288  tpar              oneshot     4       3.34      3.10       2.96      2.80       0.38       0"
                       echo "       12288  nccl              -           4       5.34      5.10       2.96      2.80       2.38      N/A  not checked" ;;
  bench) cat "$STUB_DIR/bench.txt" ;;
  doctor) echo "  tpar:oneshot  PASS  20 all-reduces checked element by element" ;;
  verify) echo "check tpar: final hidden state of all 4 ranks bitwise identical; 0 non-finite values -> ok" ;;
  tune) echo "tuned" ;;
esac
[ -z "$json" ] || echo '{"rows": []}' >"$json"
"""

STUB_PYTHON = r"""#!/bin/bash
# python3 with torch, as far as the scripts use it
args="$*"; json=""; png=""; prev=""
for a in "$@"; do
  case "$prev" in --json) json=$a ;; -o) png=$a ;; esac
  prev=$a
done
case "$args" in
  "-c "*) exit 0 ;;
  *"-m pip "*) exit "${STUB_PIP_RC:-0}" ;;
  *"-m pytest"*) echo "3 passed, 1 skipped in 1.00s"; echo "3 passed, 1 skipped in 1.10s" ;;
  *"tpar.check model"*) echo "PASS" ;;
  *torch_symm_bench.py*) echo "torch-symm:one_shot 1024 5.00 us 0 wrong"
                         echo "torch-symm:two_shot 1024 skipped: not here" ;;
  *torch_shim_check.py*--disabled*) echo "torch_shim_check: PASS (5 checks on 4 ranks, 0 failures on all ranks)" ;;
  *torch_shim_check.py*) echo "torch_shim_check: PASS (10 checks on 4 ranks, 0 failures on all ranks)" ;;
  *pynccl_shim_check.py*) echo "pynccl_shim_check: PASS (shim forwarding to x, 4 ranks, 0 failures)" ;;
esac
[ -z "$json" ] || echo '{}' >"$json"
[ -z "$png" ] || echo png >"$png"
"""

STUB_NVIDIA_SMI = r"""#!/bin/bash
for ((i = 0; i < ${STUB_GPUS:-4}; i++)); do
  case "$*" in
    -L) echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)" ;;
    *compute_cap*) echo 9.0 ;;
    *name,driver_version*) echo "NVIDIA H200, 580.159.04" ;;
  esac
done
"""

STUB_SANITIZER = r"""#!/bin/bash
# compute-sanitizer: its options, then the program it runs
while [ $# -gt 0 ]; do
  case "$1" in
    --version) echo "stand-in"; exit 0 ;;
    --log-file) echo "========= ERROR SUMMARY: ${STUB_SANITIZER_ERRORS:-0} errors" >"$2"; shift 2 ;;
    --tool|--leak-check|--error-exitcode) shift 2 ;;
    *) exec "$@" ;;
  esac
done
"""

GTEST_OK = "#!/bin/sh\necho '[  PASSED  ] 5 tests.'\necho '[  SKIPPED ] 1 test, listed below:'\n"


class StandIns:
    """A PATH with nvidia-smi, cmake and ninja, a build directory of programs that print what
    the real ones print, and a python with torch."""

    def __init__(self, root, gpus=4, wrong=0):
        self.root = root
        x = 0o755
        write(os.path.join(root, "bin", "nvidia-smi"), STUB_NVIDIA_SMI, x)
        write(os.path.join(root, "bin", "cmake"), "#!/bin/sh\nexit 0\n", x)
        write(os.path.join(root, "bin", "ninja"), "#!/bin/sh\nexit ${STUB_NINJA_RC:-0}\n", x)
        write(os.path.join(root, "bin", "python"), STUB_PYTHON, x)
        write(os.path.join(root, "bin", "compute-sanitizer"), STUB_SANITIZER, x)
        b = os.path.join(root, "build")
        write(os.path.join(b, "tools", "tpar", "tpar"), STUB_TPAR, x)
        for prog in ("tests/tpar_gpu_tests", "tests/tpar_unit_tests",
                     "nccl_shim/tests/tpar_shim_gpu_tests"):
            write(os.path.join(b, prog), GTEST_OK, x)
        write(os.path.join(b, "examples", "tpar_example_allreduce"), "#!/bin/sh\necho ok\n", x)
        write(os.path.join(b, "nccl_shim", "libtpar_nccl.so"), "")
        log = BENCH_LOG.replace("       3  tpar:twoshot", f"{wrong:8d}  tpar:twoshot")
        write(os.path.join(root, "bench.txt"), log)
        self.env = dict(os.environ, PATH=os.path.join(root, "bin") + ":" + os.environ["PATH"],
                        STUB_GPUS=str(gpus), STUB_DIR=root, TPAR_BUILD_DIR=b,
                        PYTHON=os.path.join(root, "bin", "python"), TPAR_COMMIT="0123456789ab",
                        TPAR_MACHINE_KIND="stand-in")
        self.env.pop("CUDA_VISIBLE_DEVICES", None)


class Steps(unittest.TestCase):
    """scripts/steps.sh on its own: time limits, the budget, the command text."""

    def steps(self, body):
        with tempfile.TemporaryDirectory() as out:
            script = textwrap.dedent(f"""\
                source {ROOT}/scripts/steps.sh
                out={out} dry=0 run_end=0
                python3 {ROOT}/scripts/summary.py start $out --script s --steps a,b,c >/dev/null
                """) + textwrap.dedent(body)
            r = run(["bash", "-c", script])
            with open(os.path.join(out, "summary.json")) as f:
                return r, {x["name"]: x for x in json.load(f)["steps"]}

    def test_a_step_past_its_own_limit_fails_and_one_cut_by_the_budget_is_not_run(self):
        r, steps = self.steps("""\
            step_begin a 1 1 && step_cmd sleep 30; step_end
            run_end=$((SECONDS + steps_keep_s + 1))
            step_begin b 20 1 && step_cmd sleep 30; step_end
            step_begin c 20 5 && step_cmd true; step_end
            """)
        self.assertEqual(steps["a"]["status"], "failed", r.stdout)
        self.assertIn("stopped after 1 s: sleep 30", r.stdout)
        self.assertEqual(steps["b"]["status"], "not run", r.stdout)
        self.assertIn("b: not run: the run's time ended before the step did", r.stdout)
        self.assertEqual(steps["c"]["status"], "not run", r.stdout)
        self.assertRegex(r.stdout, r"== c: not run: \d s left, it takes about 5 s")

    def test_the_command_text_quotes_what_the_shell_needs(self):
        r, steps = self.steps("""\
            step_begin a 10 && step_cmd A='x y' printf '%s\\n' "it's" -e "$out/f" ''; step_end
            step_begin b 10 && step_cmd --chdir=/ true; step_end
            """)
        self.assertEqual(steps["a"]["command"], "A='x y' printf '%s\\n' 'it'\\''s' -e OUTDIR/f ''")
        self.assertEqual(steps["b"]["command"], "env --chdir=/ true")
        self.assertEqual((steps["a"]["status"], steps["b"]["status"]), ("passed", "passed"))


class MultiGpuRun(unittest.TestCase):
    script = os.path.join(ROOT, "scripts", "multi-gpu-run.sh")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def mgr(self, *args, env=None):
        return run(["bash", self.script, *args], env=env)

    def test_help_lists_every_step_and_the_lease(self):
        r = self.mgr("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for i, name in enumerate(STEPS):
            self.assertRegex(r.stdout, rf"\n  {i} +{re.escape(name)} ")
        self.assertEqual(len(re.findall(r"multi-gpu-run.sh \$OUT --steps ", r.stdout)), 7)

    def test_bad_arguments_are_named_and_nothing_runs(self):
        for args, text in ((["--steps", "nosuch"], "unknown step 'nosuch'"),
                           (["--steps", "3-99"], "no steps 3-99"),
                           (["--steps", "5-3"], "no steps 5-3"),
                           (["--ranks", "1"], "--ranks 1"), (["--ranks", "x"], "--ranks x"),
                           (["--budget", "soon"], "--budget soon"),
                           (["--bogus"], "unknown option --bogus")):
            r = self.mgr(self.out, *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(text, r.stderr, args)
        r = self.mgr("--dry-run")
        self.assertEqual(r.returncode, 2)
        self.assertIn("OUTDIR missing", r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_too_few_gpus_fail_fast_and_clearly(self):
        env = StandIns(self.tmp.name, gpus=0).env
        r = self.mgr(self.out, env=env)
        self.assertEqual((r.returncode, r.stderr.strip()),
                         (3, "multi-gpu-run: needs 2 or more GPUs, found 0"))
        env["STUB_GPUS"] = "2"
        r = self.mgr(self.out, "--ranks", "4", env=env)
        self.assertEqual((r.returncode, r.stderr.strip()),
                         (3, "multi-gpu-run: needs 4 GPUs, found 2"))
        self.assertFalse(os.path.exists(self.out))

    def test_lease_commands_cover_every_step_once_within_the_budget(self):
        help_text = self.mgr("--help").stdout
        leases = re.findall(r"--steps (\S+)\n", help_text)
        seen = []
        for lease in leases:
            r = self.mgr(self.out, "--dry-run", "--steps", lease)
            self.assertEqual(r.returncode, 0, r.stderr)
            names = re.findall(r"^== (\S+) ", r.stdout, re.M)
            self.assertEqual(names[0], "build")
            seen += names[1:]
            about = int(re.search(r"# about (\d+) s in all", r.stdout).group(1))
            self.assertLessEqual(about, 560 - 25, lease)  # the default budget, less the packing
        self.assertEqual(sorted(seen), sorted(STEPS[1:]))
        self.assertFalse(os.path.exists(self.out))

    def test_dry_run_uses_the_rank_count_everywhere(self):
        r = self.mgr(self.out, "--dry-run", "--ranks", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        commands = [line for line in r.stdout.splitlines() if line.startswith("   ")]
        # The fused model check runs at TP 2 and 4 whatever N is (up to N).
        tp_sizes = [c for c in commands if "tpar.check model --fused" in c]
        # Each TP size twice: as chosen, then on the host transport with every call in the format.
        self.assertEqual(["--nproc-per-node 2" in c for c in tp_sizes], [True, True, False, False])
        self.assertEqual(["--nproc-per-node 4" in c for c in tp_sizes], [False, False, True, True])
        self.assertEqual(["TPAR_TRANSPORT=host TPAR_WIRE_MIN_BYTES=0" in c for c in tp_sizes],
                         [False, True, False, True])
        for line in commands:
            if line not in tp_sizes:
                self.assertNotRegex(line, r"--ranks [^4]|--nproc-per-node [^4]|NPROC=[^4]")
        self.assertEqual(sum("--ranks 4" in c for c in commands), 18)
        self.assertEqual(sum("--nproc-per-node 4" in c for c in commands), 5)
        self.assertRegex(r.stdout, r"TPAR_TOPO_FILE=tests/fixtures/topology/\S+\.xml \S+ bench")
        for line in commands:
            self.assertNotIn(self.out, line)  # shown as OUTDIR
        fixture = re.search(r"TPAR_TOPO_FILE=(\S+)", r.stdout).group(1)
        self.assertTrue(os.path.isfile(os.path.join(ROOT, fixture)))

    def summary(self):
        with open(os.path.join(self.out, "summary.json")) as f:
            return json.load(f)

    def test_whole_run_on_stand_ins_writes_the_summary_and_packs_the_logs(self):
        stand = StandIns(self.tmp.name, wrong=3)
        r = self.mgr(self.out, "--ranks", "4", "--budget", "0", env=stand.env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # the bench log has 3 wrong
        s = self.summary()
        self.assertEqual((s["script"], s["commit"]), ("scripts/multi-gpu-run.sh", "0123456789ab"))
        self.assertEqual(s["machine"], {"kind": "stand-in", "gpus": 4, "gpu": "NVIDIA H200",
                                        "driver": "580.159.04"})
        steps = {x["name"]: x for x in s["steps"]}
        self.assertEqual(list(steps), STEPS)
        got = {n: (x["status"], x["passed"], x["failed"], x["skipped"]) for n, x in steps.items()}
        self.assertEqual(got, {
            "build": ("passed", 0, 0, 0), "gpu-tests": ("passed", 5, 0, 1),
            "shim-tests": ("passed", 5, 0, 1), "doctor": ("passed", 1, 0, 0),
            "python-tests": ("passed", 3, 0, 1), "tp-model": ("passed", 1, 0, 0),
            "verify-8": ("passed", 1, 0, 0), "verify-64": ("passed", 1, 0, 0),
            "torch-symm": ("passed", 1, 0, 1), "bench": ("failed", 1, 1, 2),
            "bench-host": ("failed", 1, 1, 2), "bench-procs": ("failed", 1, 1, 2),
            "islands": ("failed", 1, 1, 2), "islands-forced": ("failed", 1, 1, 2),
            "shim-torch": ("passed", 16, 0, 0), "host-cost": ("passed", 1, 0, 1),
            "tune": ("passed", 0, 0, 0), "fused": ("passed", 1, 0, 0),
            "verify-fused": ("passed", 3, 0, 0), "tp-model-fused": ("passed", 4, 0, 0),
            "wire": ("failed", 2, 2, 4)})
        self.assertIn("--ranks 4", steps["bench"]["command"])
        self.assertIn("OUTDIR/bench.json", steps["bench"]["command"])
        self.assertIn("STEPS='2 3 4 5 7' NPROC=4", steps["shim-torch"]["command"])
        self.assertEqual(steps["bench"]["records"], ["bench.json", "bench.png"])
        top = sorted(os.listdir(self.out))
        self.assertLessEqual(len(top), 8)
        self.assertIn("logs.tgz", top)
        for x in s["steps"]:
            self.assertEqual(set(x), STEP_KEYS)
        with tarfile.open(os.path.join(self.out, "logs.tgz")) as tar:
            names = set(tar.getnames())
        for x in s["steps"]:
            for rec in x["records"]:
                self.assertTrue(rec in names or os.path.isfile(os.path.join(self.out, rec)), rec)
        self.assertIn("logs/gpu-tests.log", names)
        self.assertIn("failed: bench,bench-host,bench-procs,islands,islands-forced,wire", r.stdout)
        self.assertIn("CUDA_VISIBLE_DEVICES=0,1,2,3", steps["tp-model-fused"]["command"])

    def test_budget_leaves_steps_not_run_and_names_them(self):
        stand = StandIns(self.tmp.name, wrong=0)
        r = self.mgr(self.out, "--steps", "1-2", "--budget", "100", env=stand.env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        status = {x["name"]: x["status"] for x in self.summary()["steps"]}
        self.assertEqual(status["build"], "passed")
        self.assertEqual(status["gpu-tests"], "not run")  # about 300 s: more than is left
        self.assertEqual(status["shim-tests"], "passed")
        self.assertEqual(status["doctor"], "not run")  # not chosen
        self.assertIn("not run: gpu-tests (to run them: scripts/multi-gpu-run.sh OUTDIR --steps "
                      "gpu-tests)", r.stdout)

    def test_a_failed_build_stops_the_run_a_failed_install_only_its_step(self):
        env = StandIns(self.tmp.name).env
        env["STUB_NINJA_RC"] = "1"
        r = self.mgr(self.out, "--steps", "doctor,tp-model", env=env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no build (it failed, or did not fit in the budget); no other step can run",
                      r.stdout)
        status = {x["name"]: x["status"] for x in self.summary()["steps"]}
        self.assertEqual((status["build"], status["doctor"], status["tp-model"]),
                         ("failed", "not run", "not run"))
        env.update(STUB_NINJA_RC="0", STUB_PIP_RC="1")
        r = self.mgr(self.out, "--steps", "doctor", env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)  # no Python step: no install
        r = self.mgr(self.out, "--steps", "doctor,tp-model", env=env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        status = {x["name"]: x["status"] for x in self.summary()["steps"]}
        self.assertEqual((status["build"], status["doctor"]), ("failed", "passed"))

    def test_forced_islands_need_four_or_eight_ranks(self):
        stand = StandIns(self.tmp.name, gpus=2, wrong=0)
        r = self.mgr(self.out, "--steps", "islands-forced", env=stand.env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        status = {x["name"]: x["status"] for x in self.summary()["steps"]}
        self.assertEqual(status["islands-forced"], "skipped")
        self.assertIn("a forced split needs 4 or 8 ranks", r.stdout)


class GpuCheck(unittest.TestCase):
    def test_default_run_on_stand_ins_writes_the_summary(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            stand = StandIns(tmp, gpus=1, wrong=0)
            r = run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), out], env=stand.env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(os.path.join(out, "summary.json")) as f:
                s = json.load(f)
            self.assertEqual(s["script"], "scripts/gpu-check.sh")
            status = {x["name"]: x["status"] for x in s["steps"]}
            self.assertEqual(status, {
                "build": "passed", "unit-tests": "passed", "gpu-tests": "passed",
                "sanitize-memcheck": "not run", "sanitize-racecheck": "not run",
                "sanitize-synccheck": "not run", "soak": "not run", "example": "passed",
                "bench": "passed", "bench-host": "passed", "doctor": "passed", "tune": "passed",
                "bench-tuned": "passed", "verify-8": "passed", "verify-64": "passed",
                # Asked for by --python and --fused only.
                "python": "not run", "fused-paths": "not run", "bench-fused": "not run",
                "bench-fused-host": "not run", "verify-fused-1": "not run",
                "verify-fused-8": "not run", "verify-fused-64": "not run"})
            self.assertLessEqual(len(os.listdir(out)), 8)
            self.assertIn("logs.tgz", os.listdir(out))

    def test_sanitizer_and_soak_steps_count_tests_and_reports(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            env = StandIns(tmp, gpus=1).env
            env["STUB_SANITIZER_ERRORS"] = "2"
            r = run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), out, "--no-tests",
                     "--no-bench", "--sanitize", "--soak"], env=env)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            with open(os.path.join(out, "summary.json")) as f:
                steps = {x["name"]: x for x in json.load(f)["steps"]}
            for tool in ("memcheck", "racecheck", "synccheck"):
                x = steps["sanitize-" + tool]
                # two test runs of 5 passed and 1 skipped, one report with 2 errors
                self.assertEqual((x["status"], x["passed"], x["failed"], x["skipped"]),
                                 ("failed", 10, 1, 2), tool)
                self.assertIn("--tool " + tool, x["command"])
            self.assertEqual(steps["soak"]["status"], "passed")
            self.assertEqual(steps["unit-tests"]["status"], "not run")
            self.assertEqual(steps["bench"]["status"], "not run")


# The configure step of the stand-in cmakes below: `-S SRC -B BUILD` remembers SRC in BUILD/src.
STUB_CMAKE_CONFIGURE = textwrap.dedent("""\
    while [ $# -gt 0 ]; do
      case $1 in -S) s=$2; shift ;; -B) b=$2; shift ;; esac
      shift
    done
    mkdir -p "$b" && echo "$s" > "$b/src"
    """)

# A cmake for scripts/compare-variants.sh: `-S SRC -B BUILD` remembers SRC; `--build BUILD`
# makes BUILD/tools/tpar/tpar, a `tpar bench` that writes two rows (4 and 8 KiB) whose time is
# the number in SRC/marker.txt (so a patch that changes the marker shows in the table) and logs
# its tree.
STUB_VARIANT_CMAKE = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = --build ]; then
      b=$2
      src=$(cat "$b/src")
      mkdir -p "$b/tools/tpar"
      printf '%s\\n' '#!/bin/sh' \\
        "us=\\$(cat '$src/marker.txt')" \\
        "echo \\"$(basename "$b") \\$*\\" >> \\"\\$STUB_LOG\\"" \\
        'while [ $# -gt 0 ]; do [ "$1" = --json ] && j=$2; shift; done' \\
        'echo "{\\"rows\\": [{\\"ranks\\": 2, \\"backend\\": \\"tpar\\", \\"bytes\\": 4096, \\"us_out_of_place\\": $us, \\"us_in_place\\": $us}, {\\"ranks\\": 2, \\"backend\\": \\"tpar\\", \\"bytes\\": 8192, \\"us_out_of_place\\": $us, \\"us_in_place\\": $us}]}" > "$j"' \\
        > "$b/tools/tpar/tpar"
      chmod +x "$b/tools/tpar/tpar"
      [ "$(basename "$b")" = "exp-build-${STUB_FAIL_TAG:-none}" ] && exit 1
      exit 0
    fi
    """) + STUB_CMAKE_CONFIGURE

MARKER_PATCH = textwrap.dedent("""\
    diff --git a/marker.txt b/marker.txt
    --- a/marker.txt
    +++ b/marker.txt
    @@ -1 +1 @@
    -10
    +20
    """)


class CompareVariants(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        t = self.tmp.name
        write(os.path.join(t, "bin", "cmake"), STUB_VARIANT_CMAKE, 0o755)
        self.tree = os.path.join(t, "tree")
        write(os.path.join(self.tree, "marker.txt"), "10\n")
        write(os.path.join(t, "marker.patch"), MARKER_PATCH)
        self.env = dict(os.environ, PATH=os.path.join(t, "bin") + ":" + os.environ["PATH"],
                        WORK=os.path.join(t, "work"), STUB_LOG=os.path.join(t, "runs.log"),
                        ROUNDS="2")

    def tearDown(self):
        self.tmp.cleanup()

    def compare(self, trees, *configs):
        t = self.tmp.name
        return run(["bash", os.path.join(ROOT, "scripts", "compare-variants.sh"),
                    os.path.join(t, "out"), trees] + list(configs), env=self.env)

    def run_order(self):
        """The trees' tags in the order the runs went (the stub CLI's log)."""
        with open(os.path.join(self.tmp.name, "runs.log")) as f:
            return [line.split()[0].replace("exp-build-", "") for line in f]

    def test_a_patched_copy_is_timed_beside_the_tree_in_alternating_order(self):
        t = self.tmp.name
        tree = self.tree
        r = self.compare(f"base={tree} var={tree}+{t}/marker.patch", "c|A=1|--ranks 2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"c +2 tpar +4096 +base= +10\.00 \[10\.00-10\.00\]  "
                                   r"var= +20\.00 \[20\.00-20\.00\]")
        with open(os.path.join(tree, "marker.txt")) as f:
            self.assertEqual(f.read(), "10\n", "the tree itself is never patched")
        self.assertEqual(self.run_order(), ["base", "var", "var", "base"])

    def test_three_trees_take_each_position_once_in_three_rounds(self):
        t = self.tmp.name
        tree = self.tree
        self.env["ROUNDS"] = "3"
        r = self.compare(f"a={tree} b={tree}+{t}/marker.patch c={tree}", "c|A=1|--ranks 2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.run_order(), ["a", "b", "c", "b", "c", "a", "c", "a", "b"])
        # With 3 rounds the run says what they resolve (the stand-in's times never vary).
        self.assertIn("what 3 rounds resolve here", r.stdout)
        self.assertRegex(r.stdout, r"rounds  3: largest distance from 1\.0 over 2 rows .* median 0\.0 %")

    def test_a_failed_build_fails_the_run_and_leaves_the_others_in_the_table(self):
        t = self.tmp.name
        tree = self.tree
        self.env["STUB_FAIL_TAG"] = "var"
        r = self.compare(f"base={tree} var={tree}+{t}/marker.patch", "c|A=1|--ranks 2")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("build var failed", r.stdout)
        self.assertIn("base=   10.00", r.stdout)

    def test_bad_arguments_are_named_and_nothing_is_built(self):
        t = self.tmp.name
        tree = self.tree
        for trees, want in ((f"base{tree}", "want tag=DIR"), (f"base={t}/nowhere", "no folder"),
                            (f"base={tree}+{t}/none.patch", "no patch")):
            r = self.compare(trees, "c|A=1|--ranks 2")
            self.assertEqual(r.returncode, 2, trees)
            self.assertIn(want, r.stderr)
        r = run(["bash", os.path.join(ROOT, "scripts", "compare-variants.sh"), "out"], env=self.env)
        self.assertEqual(r.returncode, 2)
        self.assertFalse(os.path.exists(os.path.join(t, "work")))


# A cmake whose build writes a tpar CLI that prints one row per rank count, backend and size it is
# asked for, in the time its source tree's marker.txt names; the runs are counted (STUB_COUNT)
# and the runs named in STUB_SPIKE (1-based, comma-separated) take a fifth longer.
STUB_COMMITS_CMAKE = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = --build ]; then
      b=$2
      mkdir -p "$b/tools/tpar"
      cat > "$b/tools/tpar/tpar" <<STUB
    #!/usr/bin/env python3
    import json, os, sys
    a = sys.argv[1:]
    def opt(name):
        return a[a.index(name) + 1]
    def parse(s):
        return int(s[:-1]) * (1024 if s[-1] == "K" else 1048576) if s[-1] in "KM" else int(s)
    with open(os.environ["STUB_COUNT"], "a+") as f:
        f.seek(0)
        n = len(f.read().split()) + 1
        f.write(f"{n}\\\\n")
    spikes = os.environ.get("STUB_SPIKE", "").split(",")
    us = float(open("$(cat "$b/src")/marker.txt").read()) * (1.2 if str(n) in spikes else 1.0)
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(" ".join(a) + "\\\\n")
    rows = [{"ranks": int(r), "backend": be, "bytes": parse(s), "virtual": True,
             "us_out_of_place": us, "us_in_place": us}
            for r in opt("--ranks").split(",") for be in opt("--backends").split(",")
            for s in opt("--sizes").split(",")]
    json.dump({"rows": rows}, open(opt("--json"), "w"))
    STUB
      chmod +x "$b/tools/tpar/tpar"
      exit 0
    fi
    """) + STUB_CMAKE_CONFIGURE


class CompareCommits(unittest.TestCase):
    """scripts/compare-commits.sh on two source folders and a stand-in CLI: the sweep flags rows
    above the limit; with CONFIRM the flagged rows run again and fail only if they stay above."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        t = self.tmp.name
        write(os.path.join(t, "bin", "cmake"), STUB_COMMITS_CMAKE, 0o755)
        self.env = dict(os.environ, PATH=os.path.join(t, "bin") + ":" + os.environ["PATH"],
                        STUB_LOG=os.path.join(t, "runs.log"), STUB_COUNT=os.path.join(t, "n"),
                        ROUNDS="2", ISLANDS="0", SIZES="4K,32K", BACKENDS="tpar,tpar:twoshot")

    @staticmethod
    def read(path):
        with open(path) as f:
            return f.read()

    def trees(self, old_us, new_us):
        t = self.tmp.name
        for name, us in (("old", old_us), ("new", new_us)):
            write(os.path.join(t, name, "marker.txt"), f"{us}\n")
        return os.path.join(t, "old"), os.path.join(t, "new")

    def compare(self, old, new, **env):
        out = os.path.join(self.tmp.name, "out")
        r = run(["bash", os.path.join(ROOT, "scripts", "compare-commits.sh"), old, new, out],
                env=dict(self.env, **env))
        return r, out

    def test_a_row_slowed_once_by_chance_fails_the_sweep_and_is_cleared_by_the_confirmation(self):
        old, new = self.trees(10, 10)
        # The sweep's runs go config by config (auto, then host), old new new old each; run 2 is
        # auto's first run of the new tree: every auto row of it a fifth slower.
        r, out = self.compare(old, new, STUB_SPIKE="2")
        self.assertEqual(r.returncode, 1, "without CONFIRM the flagged rows fail")
        self.assertEqual(len(self.read(os.path.join(out, "compare.txt.fails")).split()), 3 * 2 * 2)
        self.assertFalse(os.path.exists(os.path.join(out, "confirm")))
        os.remove(self.env["STUB_COUNT"])
        r, out = self.compare(old, new, STUB_SPIKE="2", CONFIRM="4")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        confirm = self.read(os.path.join(out, "confirm.txt"))
        self.assertIn("12 rows, 0 FAIL", confirm)
        # Only the flagged config ran again: its 3 rank counts x 2 backends, 4 runs each.
        again = self.read(self.env["STUB_LOG"]).splitlines()[-24:]
        self.assertTrue(all("--transport auto" in l for l in again), again)
        self.assertEqual(len(os.listdir(os.path.join(out, "confirm"))), 6)

    def test_a_slower_tree_fails_the_confirmation_too(self):
        old, new = self.trees(10, 10.5)
        r, out = self.compare(old, new, CONFIRM="2", ROUNDS="3")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("what 3 runs per commit resolve here", r.stdout)
        self.assertIn("24 rows, 24 FAIL", self.read(os.path.join(out, "compare.txt")))
        self.assertIn("24 rows, 24 FAIL", self.read(os.path.join(out, "confirm.txt")))

    def test_a_bad_confirm_count_is_named_before_anything_is_built(self):
        old, new = self.trees(10, 10)
        for bad in ("some", "1", "-2"):
            r, out = self.compare(old, new, CONFIRM=bad)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn(f"CONFIRM must be 0 or a whole number of runs of 2 or more, not '{bad}'",
                          r.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "build-old")))


class PeerScripts(unittest.TestCase):
    """scripts/peer-compare.py pairs a peer's rows with tpar's of the same memory, ranks and
    bytes; scripts/peer-flashinfer.sh restores the peer's header from a mirror (never from the
    network) and refuses to build without it."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, data):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def test_pairs_by_memory_ranks_and_bytes_with_the_ratio_of_the_inputs(self):
        import random
        rng = random.Random()
        peer_rows, tpar_rows, want = [], [], {}
        for memory, transport in (("host", "host"), ("device", "p2p")):
            for ranks in (2, 4, 8):
                for size in (12288, 1 << 20):
                    p, t = rng.uniform(1, 500), rng.uniform(1, 500)
                    peer_rows.append({"backend": "flashinfer:pcie_ipc", "memory": memory,
                                      "ranks": ranks, "bytes": size, "us": p,
                                      "best": {"variant": "staged"}})
                    tpar_rows.append({"backend": "tpar", "dtype": "bfloat16", "op": "sum",
                                      "transport": transport, "ranks": ranks, "bytes": size,
                                      "us_out_of_place": t, "chosen": "oneshot"})
                    want[(memory, ranks, size)] = t / p
        # Rows that must not pair: another backend, another dtype, a size the peer lacks.
        tpar_rows.append({"backend": "tpar:oneshot", "dtype": "bfloat16", "op": "sum",
                          "transport": "host", "ranks": 2, "bytes": 12288, "us_out_of_place": 1.0})
        tpar_rows.append({"backend": "tpar", "dtype": "float16", "op": "sum", "transport": "host",
                          "ranks": 2, "bytes": 12288, "us_out_of_place": 1.0})
        tpar_rows.append({"backend": "tpar", "dtype": "bfloat16", "op": "sum", "transport": "host",
                          "ranks": 2, "bytes": 4096, "us_out_of_place": 1.0})
        peer = self.write("peer.json", {"rows": peer_rows})
        tpar = self.write("tpar.json", {"rows": tpar_rows})
        out = os.path.join(self.tmp.name, "out.json")
        r = run([sys.executable, os.path.join(ROOT, "scripts", "peer-compare.py"), peer,
                 "--tpar", tpar, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        pairs = json.load(open(out))["pairs"]
        self.assertEqual(len(want), len(pairs))
        for x in pairs:
            self.assertAlmostEqual(want[(x["memory"], x["ranks"], x["bytes"])],
                                   x["tpar_over_peer"], places=3)
        # Nothing to pair: a clear failure, no file.
        none = self.write("none.json", {"rows": []})
        out2 = os.path.join(self.tmp.name, "out2.json")
        r = run([sys.executable, os.path.join(ROOT, "scripts", "peer-compare.py"), peer,
                 "--tpar", none, "-o", out2])
        self.assertEqual(r.returncode, 1)
        self.assertIn("no row of the peer", r.stderr)
        self.assertFalse(os.path.exists(out2))

    def test_restore_copies_the_header_of_the_commit_and_run_needs_it(self):
        t = self.tmp.name
        # A repository with this tree's script and .gitignore (the working tree's, committed
        # or not).
        tree = os.path.join(t, "tree")
        os.makedirs(os.path.join(tree, "scripts"))
        for name in ("scripts/peer-flashinfer.sh", ".gitignore"):
            with open(os.path.join(ROOT, name)) as src, open(os.path.join(tree, name), "w") as dst:
                dst.write(src.read())
        tgit = ["git", "-C", tree, "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(["git", "init", "-q", tree], check=True)
        subprocess.run(tgit + ["add", "."], check=True)
        subprocess.run(tgit + ["commit", "-q", "-m", "t"], check=True)
        mirror = os.path.join(t, "mirror")
        header = "include/flashinfer/comm/pcie_ipc_all_reduce.cuh"
        os.makedirs(os.path.join(mirror, os.path.dirname(header)))
        text = "// header %d\n" % os.getpid()
        with open(os.path.join(mirror, header), "w") as f:
            f.write(text)
        git = ["git", "-C", mirror, "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(["git", "init", "-q", mirror], check=True)
        subprocess.run(git + ["add", "."], check=True)
        subprocess.run(git + ["commit", "-q", "-m", "h"], check=True)
        head = subprocess.run(["git", "-C", mirror, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        script = os.path.join(tree, "scripts", "peer-flashinfer.sh")
        r = run(["bash", script, "run", os.path.join(t, "b"), os.path.join(t, "o.json")])
        self.assertEqual(r.returncode, 2)
        self.assertIn("restore MIRROR", r.stderr)
        r = run(["bash", script, "restore", mirror, "0123456789abcdef"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no commit 0123456789abcdef", r.stderr)
        r = run(["bash", script, "restore", mirror, head])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(tree, ".peers", "flashinfer", header)) as f:
            self.assertEqual(text, f.read())
        with open(os.path.join(tree, ".peers", "flashinfer", "COMMIT")) as f:
            self.assertEqual(head, f.read().strip())
        status = subprocess.run(["git", "-C", tree, "status", "--porcelain"], capture_output=True,
                                text=True, check=True).stdout
        self.assertEqual("", status, "the restored header must be ignored by git")
        # With the header: a bad option of `table` is named before anything is built.
        r = run(["bash", script, "table", os.path.join(t, "b"), os.path.join(t, "o"),
                 "--ranks", "2", "--bogus", "1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("not '--bogus'", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(t, "b")))
        # --memory names device, host or both; anything else is refused before a build.
        r = run(["bash", script, "table", os.path.join(t, "b"), os.path.join(t, "o"),
                 "--memory", "gpu"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("not 'gpu'", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(t, "b")))
        self.assertFalse(os.path.exists(os.path.join(t, "o")))


class RoundsNoise(unittest.TestCase):
    """scripts/rounds-noise.py recovers the scatter of a run's rows and the effect shared by a
    communicator's rows, from compare-variants output drawn with known ones (fresh each run)."""

    def setUp(self):
        import random
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.rng = random.Random()

    def draw(self, name, sd_group, sd_row, rounds, tgz=False):
        """A compare-variants folder (or an archive of it): 3 trees, 2 backends, 2 rank counts,
        5 sizes, one effect per communicator and round shared by its rows."""
        import math
        out = os.path.join(self.tmp.name, name)
        os.makedirs(out)
        sizes = [12288, 65536, 114688, 393216, 1048576]
        for tag in ("base", "x", "y"):
            for r in range(rounds):
                rows = []
                for backend in ("tpar", "tpar:twoshot"):
                    for ranks in (4, 8):
                        g = self.rng.gauss(0, sd_group)
                        for i, b in enumerate(sizes):
                            v = (10.0 + 7 * i) * ranks * math.exp(g + self.rng.gauss(0, sd_row))
                            rows.append({"backend": backend, "ranks": ranks, "bytes": b,
                                         "us_out_of_place": v, "us_in_place": v * 1.01})
                write(os.path.join(out, f"host-{tag}-{r}.json"), json.dumps({"rows": rows}))
        if not tgz:
            return out
        with tarfile.open(out + ".tgz", "w:gz") as tf:
            tf.add(out, arcname="run/var")
        return out + ".tgz"

    def noise(self, source, *args):
        r = run([sys.executable, os.path.join(ROOT, "scripts", "rounds-noise.py"), source,
                 "--samples", "300"] + list(args))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        row = float(re.search(r"group's mean: ([\d.]+) %", r.stdout).group(1)) / 100
        group = float(re.search(r"own effect: ([\d.]+) %", r.stdout).group(1)) / 100
        p95 = {int(m.group(1)): float(m.group(2)) for m in
               re.finditer(r"rounds +(\d+): .*95th percentile ([\d.]+) %", r.stdout)}
        return row, group, p95, r.stdout

    def test_a_shared_effect_is_found_and_separated_from_the_rows_scatter(self):
        sd_group = self.rng.uniform(0.015, 0.03)
        sd_row = self.rng.uniform(0.003, 0.006)
        src = self.draw("a", sd_group, sd_row, 6, tgz=True)
        row, group, p95, out = self.noise(src, "--rounds", "3,12", "--under", "run/var/")
        self.assertIn("rows 20,", out)
        # Both scatters are taken about medians of the rounds, which absorb a part.
        self.assertTrue(0.6 * sd_row <= row <= 1.2 * sd_row, (sd_row, out))
        self.assertTrue(0.6 * sd_group <= group <= 1.3 * sd_group, (sd_group, out))
        self.assertGreater(p95[3], p95[12], out)

    def test_rows_without_a_shared_effect_show_none(self):
        import math
        sd_row = self.rng.uniform(0.005, 0.015)
        row, group, _, out = self.noise(self.draw("b", 0.0, sd_row, 6), "--rounds", "3")
        self.assertTrue(0.6 * sd_row <= row <= 1.2 * sd_row, (sd_row, out))
        # With no effect the group means scatter as their rows' scatter predicts, and the
        # effect is the excess over that prediction only.
        m = re.search(r"group means: ([\d.]+) %, without an effect of the group: ([\d.]+) %", out)
        means, predicted = float(m.group(1)) / 100, float(m.group(2)) / 100
        self.assertTrue(0.7 <= means / predicted <= 1.4, out)
        half = 0.5e-4  # the printed per cents are rounded to two places
        lo = math.sqrt(max((means - half) ** 2 - (predicted + half) ** 2, 0))
        hi = math.sqrt(max((means + half) ** 2 - (predicted - half) ** 2, 0))
        self.assertTrue(lo - half <= group <= hi + half, (lo, hi, out))
        self.assertLess(group, 0.5 * sd_row, out)

    def test_too_few_rounds_and_bad_arguments_are_named(self):
        src = self.draw("c", 0.01, 0.01, 2)
        script = os.path.join(ROOT, "scripts", "rounds-noise.py")
        r = run([sys.executable, script, src])
        self.assertEqual(r.returncode, 2)
        self.assertIn("2 rounds, at least 3 needed", r.stderr)
        for args, want in ((["--rounds", "3,x"], "--rounds"), (["--samples", "0"], "positive")):
            r = run([sys.executable, script, src] + args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(want, r.stderr)
        tgz = self.draw("d", 0.01, 0.01, 3, tgz=True)
        r = run([sys.executable, script, tgz, "--under", "elsewhere/"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no CONFIG-TAG-R.json runs", r.stderr)
        r = run([sys.executable, script, os.path.join(self.tmp.name, "nowhere")])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such folder or archive", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
