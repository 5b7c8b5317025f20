#!/usr/bin/env bash
# The NCCL drop-in against the engines people run (docs/nccl_shim.md, "Checked against the
# engines"), without a GPU: PyTorch 2.14 (vLLM 0.33.0 pins 2.14.0, SGLang 0.5.23 pins 2.14.1;
# both bring NCCL 2.30.7) and vLLM's and SGLang's own NCCL loaders. One line per check, PASS or
# FAIL, then the counts; exit status 1 when any check failed, each check's log in WORKDIR/logs.
#   1. torch imports: every nccl* symbol that the libraries of torch/lib import (undefined
#      dynamic symbols read with nm from the installed wheel: libtorch_cuda.so and
#      libtorch_python.so today) is exported by the shim.
#   2. torch under LD_PRELOAD: `import torch` works with the shim preloaded, every nccl*
#      function torch imports binds to the shim (dladdr of its global-scope address), and
#      torch.cuda.nccl.version() (a call through the shim, which works without a GPU) is the
#      version of the wheel's real NCCL, to which the shim says it forwards. Also: the venv's
#      torch is a version an engine pins (read from the engines' wheels).
#   3. vLLM, its own code from its wheel, with VLLM_NCCL_SO_PATH set to the shim: every
#      function of NCCLLibrary's list is exported, and so is every function the C source of its
#      symmetric-memory allocator calls (both read against the library's nm listing, printed
#      before anything loads it: the shim stops a process when it meets an NCCL with functions
#      it lacks, NOTE [unknown NCCL functions]); then PyNcclCommunicator, run as rank 0 of two up
#      to the broadcast of the unique id (where it would need its peer), keeps pynccl on (when
#      its NCCLLibrary fails, a function missing included, vLLM turns pynccl off without an
#      error), loads the library from the variable and reports the real NCCL's version.
#   4. SGLang: the same with SGLANG_NCCL_SO_PATH (both lists of its NCCLLibrary, including the
#      symmetric-memory one it binds only when ncclCommWindowRegister exists), and for the
#      diffusion runtime's own loader with SGLANG_DIFFUSION_NCCL_SO_PATH.
#   5. Negative control: a stub exporting every nccl* function of the real NCCL except
#      ncclCommResume fails checks 1 and 3, each naming that function.
# The engines' classes run for real (no reading of their source as text was needed): their
# wheels are installed with --no-deps into WORKDIR, next to the pinned packages their import
# chains need (below), on PYTHONPATH over the venv's torch. The engine checks run without
# LD_PRELOAD, so that each sees its own loader only (check 2 covers the preload). Another venv
# (e.g. torch 2.11 with NCCL 2.28.9) can be added for checks 1 and 2.
#   scripts/engine-check.sh [--python PY] [--shim LIB] [--work WORKDIR] [--extra-python PY]...
# Defaults: --python ${TPAR_PYENV:-build/pyenv}/bin/python (a venv with torch, as
# scripts/python-tests.sh makes it), --shim build/nccl_shim/libtpar_nccl.so, --work
# build/engine-wheels (the wheels, 360 MB, are downloaded there once and installed, 1.4 GB).
# Environment: TPAR_ENGINE_WHEELS (a directory that holds the two wheels already: no download),
# TPAR_ENGINE_CHECK_EXTRA_PYTHON (Pythons, space-separated, for checks 1 and 2 only), CC (for the
# control's stub, default cc).
set -uo pipefail
py="" shim="" work=""
read -r -a extra_pys <<<"${TPAR_ENGINE_CHECK_EXTRA_PYTHON:-}"
# Paths given are taken from the caller's directory; a venv's python stays the link it is, and
# a Python named without a directory is looked up in PATH.
abs() { case $1 in */*) realpath -ms "$1" ;; *) echo "$1" ;; esac; }
while [ $# -gt 0 ]; do
  case $1 in
    --python) py=$(abs "$2"); shift 2 ;;
    --shim) shim=$(realpath -m "$2"); shift 2 ;;
    --work) work=$(realpath -m "$2"); shift 2 ;;
    --extra-python) extra_pys+=("$(abs "$2")"); shift 2 ;;
    *) sed -n '/^#   scripts/p' "$0" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.." || exit 2
# The engines' versions and import dependencies, and the installers (pip_retry, install_into,
# wheel_of), shared with scripts/engine-fusion-check.sh.
. scripts/engine-wheels.sh
py=${py:-${TPAR_PYENV:-build/pyenv}/bin/python}
shim=${shim:-build/nccl_shim/libtpar_nccl.so}
work=${work:-build/engine-wheels}

# The function the negative control's stub leaves out: torch 2.14 imports it and vLLM requires
# it on CUDA.
control_missing=ncclCommResume

mkdir -p "$work" && work=$(cd "$work" && pwd)
logs=$work/logs
rm -rf "$logs" && mkdir -p "$logs"
[ -f "$shim" ] || { echo "engine-check: no shim at $shim (the target tpar_nccl builds it)" >&2
                    exit 2; }
shim=$(realpath "$shim")
t_start=$SECONDS

# The checks that need Python, run by the interpreter under test (written here, so that the
# script stays one file).
helper=$work/engine_check.py
cat >"$helper" <<'EOF'
"""Checks of scripts/engine-check.sh that run in Python; each prints PASS or FAIL lines."""
import ctypes
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys


def nccl_version_text(code):  # NCCL_VERSION(2, 30, 7) == 23007
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def probe():
    """Without importing torch: its version, its lib/, the wheel's NCCL and that NCCL's version."""
    torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
    nccl = os.path.realpath(os.path.join(torch_dir, "..", "nvidia", "nccl", "lib", "libnccl.so.2"))
    code = 0
    if os.path.exists(nccl):
        v = ctypes.c_int()
        if ctypes.CDLL(nccl).ncclGetVersion(ctypes.byref(v)) == 0:
            code = v.value
    else:
        nccl = "-"
    print(importlib.metadata.version("torch"), os.path.join(torch_dir, "lib"), nccl, code,
          sep="\n")


class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


def bound_file(name):
    """The file that defines `name` for a library loaded now (the global scope, as the dynamic
    loader binds torch's imports), or None."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "dladdr"):  # glibc before 2.34
        libc = ctypes.CDLL("libdl.so.2")
    info = DlInfo()
    if not libc.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) or not info.fname:
        return None
    return os.path.realpath(info.fname.decode())


def torch_check(shim, code, names_file):
    shim = os.path.realpath(shim)
    label = f"torch {importlib.metadata.version('torch')} under LD_PRELOAD"
    try:
        import torch
    except Exception as e:  # an undefined symbol shows here
        print(f"FAIL {label}: import torch: {e}")
        return 1
    problems = []
    loaded = {os.path.realpath(l.split()[-1]) for l in open("/proc/self/maps") if "/" in l}
    if shim not in loaded:
        problems.append("the shim is not loaded")
    names = open(names_file).read().split()
    elsewhere = {}
    for n in names:
        f = bound_file(n)
        if f != shim:
            elsewhere[n] = f or "nothing"
    if elsewhere:
        problems.append(f"{len(elsewhere)} of the {len(names)} nccl* functions torch imports do "
                        f"not bind to the shim: " +
                        " ".join(f"{n}->{f}" for n, f in sorted(elsewhere.items())))
    try:
        got = tuple(torch.cuda.nccl.version())[:3]
        want = tuple(int(x) for x in nccl_version_text(code).split("."))
        if got != want:
            problems.append(f"torch.cuda.nccl.version() is {got}, the real NCCL's is {want}")
    except Exception as e:
        problems.append(f"torch.cuda.nccl.version(): {e}")
        got = None
    real = "?"
    try:
        lib = ctypes.CDLL(shim)
        lib.tparShimNcclPath.restype = ctypes.c_char_p
        real = (lib.tparShimNcclPath() or b"nothing").decode()
    except AttributeError:
        problems.append("the library has no tparShimNcclPath: not the shim")
    if problems:
        print(f"FAIL {label}: " + "; ".join(problems))
        return 1
    print(f"PASS {label}: import torch works, all {len(names)} nccl* functions torch imports "
          f"bind to the shim, torch.cuda.nccl.version() {'.'.join(map(str, got))} is the real "
          f"NCCL's (the shim forwards to {real})")
    return 0


# (name, package of its device communicators, module of StatelessProcessGroup, variable, whether
# it has a symmetric-memory allocator with C source)
ENGINES = {
    "vllm": ("vLLM", "vllm", "vllm.distributed.device_communicators", "vllm.distributed.utils",
             "VLLM_NCCL_SO_PATH", True),
    "sglang": ("SGLang", "sglang", "sglang.srt.distributed.device_communicators",
               "sglang.srt.distributed.utils", "SGLANG_NCCL_SO_PATH", True),
    "sglang-diffusion": ("SGLang diffusion", "sglang",
                         "sglang.multimodal_gen.runtime.distributed.device_communicators",
                         "sglang.multimodal_gen.runtime.distributed.utils",
                         "SGLANG_DIFFUSION_NCCL_SO_PATH", False),
}


class ReachedPeer(Exception):
    pass


def engine_check(key, lib_path, code, exports_file):
    title, dist, package, utils, variable, allocator = ENGINES[key]
    name = f"{title} {importlib.metadata.version(dist)}"
    if os.environ.get(variable) != lib_path:
        print(f"FAIL {name}: {variable} is not set to the library under test")
        return 1
    wrapper = importlib.import_module(package + ".pynccl_wrapper")
    pynccl = importlib.import_module(package + ".pynccl")
    group_type = importlib.import_module(utils).StatelessProcessGroup
    # What the library exports, read from its file, and printed first: the shim may stop the
    # process as soon as it is loaded (NOTE [unknown NCCL functions]).
    exported = set(open(exports_file).read().split())
    rc = 0
    lists = [v for v in vars(wrapper.NCCLLibrary).values()
             if isinstance(v, list) and v and all(isinstance(f, wrapper.Function) for f in v)]
    names = [f.name for v in lists for f in v]
    missing = [n for n in names if n not in exported]
    if missing:
        print(f"FAIL {name} NCCLLibrary: the library lacks {len(missing)} of the {len(names)} "
              f"functions it looks up: {' '.join(missing)}", flush=True)
        rc = 1
    else:
        print(f"PASS {name} NCCLLibrary: the library exports all {len(names)} functions it "
              f"looks up", flush=True)
    if allocator:
        label = f"{name} symmetric-memory allocator (C source linked to libnccl.so.2)"
        source = importlib.import_module(package + ".pynccl_allocator").nccl_allocator_source
        called = sorted(set(re.findall(r"\b(nccl[A-Z]\w*)\s*\(", source)))
        absent = [n for n in called if n not in exported]
        if not called or absent:
            print(f"FAIL {label}: " + (f"the library lacks {' '.join(absent)}" if absent
                                       else "no NCCL function found in its source"), flush=True)
            rc = 1
        else:
            print(f"PASS {label}: the {len(called)} functions it calls are exported "
                  f"({' '.join(called)})", flush=True)

    # Rank 0 of two: the engine's own constructor, with the library from the variable, runs up
    # to the broadcast of the unique id, which needs the peer; pynccl is off when it returns.
    group = group_type.__new__(group_type)
    group.rank, group.world_size = 0, 2

    def broadcast_obj(obj, src):
        raise ReachedPeer()

    group.broadcast_obj = broadcast_obj
    comm = pynccl.PyNcclCommunicator.__new__(pynccl.PyNcclCommunicator)
    problems = []
    try:
        pynccl.PyNcclCommunicator.__init__(comm, group, device=0)
        try:
            wrapper.NCCLLibrary()
            why = "?"
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
        problems.append(f"{title} would switch pynccl off (its NCCLLibrary: {why})")
    except ReachedPeer:
        if not comm.available or comm.disabled:
            problems.append(f"{title} would switch pynccl off")
        if os.path.realpath(comm.nccl.lib._name) != os.path.realpath(lib_path):
            problems.append(f"it loaded {comm.nccl.lib._name}, not the library under test")
        reported = comm.nccl.ncclGetVersion()  # the engine's own text: "2.30.7"
        if reported != nccl_version_text(code):
            problems.append(f"it reports NCCL {reported}, the real NCCL is "
                            f"{nccl_version_text(code)}")
    label = f"{name} PyNcclCommunicator ({variable})"
    if problems:
        print(f"FAIL {label}: " + "; ".join(problems))
        return 1
    print(f"PASS {label}: keeps pynccl on, loads the library, reports NCCL "
          f"{nccl_version_text(code)} and makes a unique id")
    return rc


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "probe":
        probe()
    elif cmd == "torch":
        sys.exit(torch_check(args[0], int(args[1]), args[2]))
    elif cmd == "engine":
        sys.exit(engine_check(args[0], args[1], int(args[2]), args[3]))
EOF

passed=0 failed=0
count() {  # count WORDS...: prints a result line ("PASS ..." or "FAIL ...") and counts it
  echo "$*"
  case $1 in PASS*) passed=$((passed + 1)) ;; *) failed=$((failed + 1)) ;; esac
}
run() {  # run NAME COMMAND...: runs it with its output in logs/NAME.log, then counts its lines
  local name=$1 log=$logs/$1.log rc=0 lines why
  shift
  "$@" >"$log" 2>&1 || rc=$?
  lines=$(grep -E '^(PASS|FAIL) ' "$log")
  # A check that stopped (an exception, an abort: status other than 0 and 1, or 1 with no
  # result) adds a line with its last error message.
  if [ -z "$lines" ] && [ $rc = 0 ]; then rc=1; fi
  if [ -z "$lines" ] || { [ $rc != 0 ] && [ $rc != 1 ]; }; then
    why=$(grep -v "engine-check.sh: line [0-9]*:" "$log" | grep -E 'fatal|Error|error' | tail -n 1)
    [ -n "$why" ] || why=$(grep -v '^\s*$' "$log" | tail -n 1)
    lines+=${lines:+$'\n'}"FAIL $name: stopped, exit status $rc: ${why:0:400}"
  fi
  while IFS= read -r l; do count "$l"; done <<<"$lines"
  if [ $rc != 0 ]; then echo "     (log: $log)"; fi
}
exports() {  # exports LIB: the nccl* functions LIB defines
  nm -D --defined-only "$1" | awk '$2 ~ /^[TtWiu]$/ && $3 ~ /^p?nccl[A-Z]/ {print $3}' | sort -u
}

# Check 1: writes the names torch imports to OUT (check 2 binds each of them).
torch_imports() {  # torch_imports TORCH_VERSION TORCH_LIB_DIR LIB OUT
  local per_lib=() f n
  : >"$4"
  for f in "$2"/*.so*; do
    n=$(nm -D --undefined-only "$f" 2>/dev/null |
        awk '$2 ~ /^p?nccl[A-Z]/ {sub(/@.*/, "", $2); print $2}' | sort -u | tee -a "$4" | wc -l)
    [ "$n" = 0 ] || per_lib+=("$(basename "$f") $n")
  done
  sort -u -o "$4" "$4"
  local total missing
  total=$(wc -l <"$4")
  if [ "$total" = 0 ]; then
    echo "FAIL torch $1 imports: no nccl* symbol found in $2 (not a CUDA build of torch?)"
    return 1
  fi
  missing=$(comm -23 "$4" <(exports "$3"))
  if [ -n "$missing" ]; then
    echo "FAIL torch $1 imports: the library lacks $(wc -l <<<"$missing") of the $total nccl*" \
         "functions torch/lib imports: $(echo $missing)"
    return 1
  fi
  echo "PASS torch $1 imports: the shim exports all $total nccl* functions torch/lib imports" \
       "($(IFS=,; echo "${per_lib[*]}" | sed 's/,/, /g'))"
}

torch_checks() {  # torch_checks PYTHON: checks 1 and 2 for the torch of PYTHON
  local p=$1 info tag
  if ! info=$("$p" "$helper" probe 2>"$logs/probe.log"); then
    count "FAIL torch of $p: cannot find it ($(tail -n 1 "$logs/probe.log"))"
    return
  fi
  mapfile -t info <<<"$info"  # version, lib dir, real NCCL, its version code
  tag=torch-${info[0]}
  if [ "${info[3]}" = 0 ]; then
    count "FAIL torch ${info[0]}: no NCCL of its wheel at ${info[1]}/../../nvidia/nccl/lib"
    return
  fi
  echo "     torch ${info[0]} ($p), its NCCL ${info[2]}"
  # NCCL's API: each nccl<X> it exports with its alias pnccl<X> (NOTE [unknown NCCL functions]).
  real_only=$(comm -23 <(exports "${info[2]}" | sed -n 's/^pnccl/nccl/p') <(exports "$shim"))
  [ -z "$real_only" ] || echo "     note: that NCCL's API has $(wc -l <<<"$real_only")" \
    "function(s) the shim does not export: $(echo $real_only)"
  run "$tag-imports" torch_imports "${info[0]}" "${info[1]}" "$shim" "$work/$tag-imports.txt"
  run "$tag-preload" env LD_PRELOAD="$shim" TPAR_DEBUG=info \
    "$p" "$helper" torch "$shim" "${info[3]}" "$work/$tag-imports.txt"
  nccl_code=${info[3]} nccl_lib=${info[2]} torch_lib=${info[1]} torch_version=${info[0]}
}

engine() {  # engine KEY DIR VARIABLE LIB: checks 3 and 4 for one loader, LIB in VARIABLE
  local exported=$work/exports-$(basename "$4").txt
  exports "$4" >"$exported"
  env -u LD_PRELOAD PYTHONPATH="$2:$work/deps" "$3=$4" \
    "$py" "$helper" engine "$1" "$4" "$nccl_code" "$exported"
}

# 1, 2: the torch of the engines' venv.
command -v "$py" >/dev/null ||
  { echo "engine-check: no Python at $py (scripts/python-tests.sh makes the venv; or set" \
         "TPAR_PYENV or --python)" >&2; exit 2; }
nccl_code=0
torch_checks "$py"

# 3, 4: the engines, installed into WORKDIR.
t0=$SECONDS
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
engines_ok=1
for e in vllm:$vllm_version sglang:$sglang_version; do
  name=${e%%:*} version=${e#*:}
  if ! whl=$(wheel_of "$name" "$version") || [ -z "$whl" ] ||
     ! install_into "$work/$name-$version" "$(basename "$whl") $pyver" "$whl" \
       >"$logs/install-$name.log" 2>&1; then
    count "FAIL $name $version: could not download or install its wheel" \
          "(log: $logs/install-$name.log)"
    engines_ok=0
  fi
done
if ! install_into "$work/deps" "${deps[*]} $pyver" "${deps[@]}" >"$logs/install-deps.log" 2>&1
then
  count "FAIL the engines' import dependencies: could not install them" \
        "(log: $logs/install-deps.log)"
  engines_ok=0
fi
echo "     engines' wheels and dependencies ready in $((SECONDS - t0)) s ($work)"
if [ $engines_ok = 1 ] && [ "$nccl_code" != 0 ]; then
  pins=() pinned=0
  for e in vllm:$vllm_version sglang:$sglang_version; do
    pin=$(grep -m 1 '^Requires-Dist: torch==' \
            "$work/${e%%:*}-${e#*:}/${e%%:*}-${e#*:}.dist-info/METADATA" | sed 's/.*==//')
    pins+=("${e%%:*} ${e#*:} pins torch $pin")
    [ "$pin" != "${torch_version%%+*}" ] || pinned=1
  done
  pins_text=$(IFS=,; echo "${pins[*]}" | sed 's/,/, /g')
  if [ $pinned = 1 ]; then
    count "PASS torch $torch_version of the venv is a version an engine pins ($pins_text)"
  else
    count "FAIL torch $torch_version of the venv is not a version an engine pins ($pins_text)"
  fi
  run vllm engine vllm "$work/vllm-$vllm_version" VLLM_NCCL_SO_PATH "$shim"
  run sglang engine sglang "$work/sglang-$sglang_version" SGLANG_NCCL_SO_PATH "$shim"
  run sglang-diffusion engine sglang-diffusion "$work/sglang-$sglang_version" \
    SGLANG_DIFFUSION_NCCL_SO_PATH "$shim"

  # 5: the same checks must fail for a library that lacks one function, and name it.
  stub=$work/stub/libnccl-without-$control_missing.so
  mkdir -p "$work/stub"
  exports "$nccl_lib" | grep -vx "p\?$control_missing" |
    sed 's/.*/int &(void) { return 0; }/' >"$work/stub/stub.c"
  if ! ${CC:-cc} -shared -fPIC -o "$stub" "$work/stub/stub.c" 2>"$logs/stub.log"; then
    count "FAIL negative control: cannot build the stub ($logs/stub.log)"
  else
    torch_imports "$torch_version" "$torch_lib" "$stub" "$work/stub/imports.txt" \
      >"$logs/control-imports.log" 2>&1
    engine vllm "$work/vllm-$vllm_version" VLLM_NCCL_SO_PATH "$stub" \
      >"$logs/control-vllm.log" 2>&1
    bad=""
    for c in imports vllm; do
      grep -q "^FAIL .*$control_missing" "$logs/control-$c.log" || bad+=" $c"
    done
    what="negative control: a library without $control_missing"
    if [ -z "$bad" ]; then
      count "PASS $what fails the torch-imports and vLLM checks, each naming it"
    else
      count "FAIL $what passes, or fails without naming it, the check(s):$bad (logs:" \
            "$logs/control-*.log)"
    fi
  fi
elif [ "$nccl_code" = 0 ]; then
  count "FAIL engines: skipped, the torch of $py has no NCCL to compare with"
fi

# Other torches (e.g. 2.11 with NCCL 2.28): checks 1 and 2 only.
for p in "${extra_pys[@]}"; do torch_checks "$p"; done

echo "engine-check: $passed passed, $failed failed ($((SECONDS - t_start)) s; shim $shim)"
[ $failed = 0 ]
