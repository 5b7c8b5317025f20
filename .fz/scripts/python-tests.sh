#!/usr/bin/env bash
# Builds the Python wheel (scripts/build-wheel.sh) and installs it the way a user does: into a
# virtual environment that holds only the wheel and the pinned test dependencies from PyPI, with
# no CUDA toolkit in reach; then runs the package's tests against that install.
#   scripts/python-tests.sh            (called by scripts/test.sh)
# Without a GPU the GPU tests are listed as skipped with their reason (-rs), never as passed;
# on a GPU machine with several GPUs, tests/python/test_distributed.py also needs torchrun:
#   torchrun --nproc-per-node 2 -m pytest -q -rs tests/python/test_distributed.py
# Environment: PYTHON (default python3), TPAR_PYENV (default build/pyenv), TPAR_PYENV_FRESH=1
# (remake it even when its dependencies are unchanged), TPAR_CUDA_ARCHS (default 90),
# TPAR_WHEEL_BUILD (default build/wheel: the wheel's build tree and tools, kept between runs),
# TPAR_TORCH (default torch==2.14.0, the version vLLM 0.33 pins: PyPI's Linux build, CUDA
# libraries included), TPAR_PYTEST_JUNIT (a path: pytest writes its JUnit report there, for
# scripts/test-summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."

py=$(command -v "${PYTHON:-python3}") || { echo "tpar: ${PYTHON:-python3} not found" >&2; exit 1; }
env=$(realpath -m "${TPAR_PYENV:-build/pyenv}")
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "tpar: the Python package needs Python 3.10 or newer ($py is $("$py" --version 2>&1))" >&2
  exit 1
fi
if [ -e "$env" ] && [ ! -f "$env/pyvenv.cfg" ]; then
  echo "tpar: $env exists and is not a virtual environment; not replacing it" >&2
  exit 1
fi
# The package is built once, as the wheel a user installs.
t0=$SECONDS
wheels=$(realpath -m "${TPAR_WHEEL_BUILD:-build/wheel}/dist")
rm -rf "$wheels"
TPAR_CUDA_ARCHS=${TPAR_CUDA_ARCHS:-90} TPAR_WHEEL_BUILD=${TPAR_WHEEL_BUILD:-build/wheel} \
  bash scripts/build-wheel.sh "$wheels"
wheel=("$wheels"/tpar-*.whl)
echo "== python: wheel built in $((SECONDS - t0)) s"

# From here on, what a user's machine has: no CUDA toolkit (nvcc) on PATH, no CUDA_HOME, no
# toolkit libraries on LD_LIBRARY_PATH. Only the driver may come from the system (none on a
# CPU-only machine). A directory of PATH that holds nvcc by other means (a wrapper in
# /usr/local/bin) is left off too.
user_path=()
IFS=: read -ra path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
  case $d in /usr/local/cuda*) continue ;; esac
  if [ -x "$d/nvcc" ]; then
    echo "== python: $d left off PATH for the install and the tests (it holds nvcc)"
    continue
  fi
  user_path+=("$d")
done
as_user=(env -u CUDA_HOME -u CUDA_PATH -u CUDA_ROOT -u CUDACXX -u LD_LIBRARY_PATH -u LIBRARY_PATH
         PATH="$(IFS=:; echo "${user_path[*]}")")
ld=$(tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}" | grep -Ev '^(/usr/local/cuda|$)' | paste -sd: - || true)
if [ -n "$ld" ]; then as_user+=(LD_LIBRARY_PATH="$ld"); fi
if nvcc=$("${as_user[@]}" bash -c 'command -v nvcc'); then
  echo "tpar: nvcc is still found ($nvcc): not a machine without the CUDA toolkit" >&2
  exit 1
fi

# The environment holds the pinned test dependencies and the wheel, nothing else. It is made
# afresh when missing, when the dependencies or Python differ from those it was made with, or
# with TPAR_PYENV_FRESH=1; otherwise it is kept (installing torch takes minutes), and only the
# wheel is installed again.
t0=$SECONDS
pip=("${as_user[@]}" "$env/bin/python" -m pip --disable-pip-version-check -q)
# Pinned, so that a new release upstream cannot change what CI runs; a download that fails
# (a dropped connection in the middle of torch's wheel) is tried again twice.
deps=("${TPAR_TORCH:-torch==2.14.0}" transformers==5.17.0 pytest==9.2.0 "numpy<3")
made_with="$("$py" --version 2>&1) ${deps[*]}"
if [ "${TPAR_PYENV_FRESH:-0}" = 0 ] && [ -f "$env/.tpar-made-with" ] &&
   [ "$(cat "$env/.tpar-made-with")" = "$made_with" ]; then
  echo "== python: keeping $env (same Python and dependencies; TPAR_PYENV_FRESH=1 remakes it)"
else
  rm -rf "$env"
  "${as_user[@]}" "$py" -m venv "$env" 2>/dev/null || {
    echo "tpar: installing python3-venv" >&2
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$env"
    "${as_user[@]}" "$py" -m venv "$env"
  }
  for attempt in 1 2 3; do
    if "${pip[@]}" install --retries 10 --timeout 60 "${deps[@]}"; then break; fi
    if [ "$attempt" = 3 ]; then
      echo "tpar: installing the Python test dependencies failed three times: ${deps[*]}" >&2
      exit 1
    fi
    echo "tpar: installing the Python test dependencies failed (attempt $attempt of 3); again in 30 s" >&2
    sleep 30
  done
  echo "$made_with" >"$env/.tpar-made-with"
  echo "== python: fresh environment with the dependencies in $((SECONDS - t0)) s"
fi
# The wheel alone, from its file: nothing is fetched and nothing is built.
t0=$SECONDS
"${pip[@]}" install --no-index --only-binary :all: --force-reinstall "${wheel[0]}"
echo "== python: wheel installed in $((SECONDS - t0)) s"
# From outside the source tree, so that the installed package is what gets imported.
cd tests/python
"${as_user[@]}" "$env/bin/python" -c \
  'import tpar; print("== python: tpar", tpar.__version__, "from", tpar.__file__)'
junit=()
if [ -n "${TPAR_PYTEST_JUNIT:-}" ]; then junit=(--junitxml "$TPAR_PYTEST_JUNIT"); fi
exec "${as_user[@]}" "$env/bin/python" -m pytest -q -rs -p no:cacheprovider "${junit[@]}" .
