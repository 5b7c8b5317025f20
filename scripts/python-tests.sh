#!/usr/bin/env bash
# Builds and installs the Python package into a virtual environment, then runs its tests.
#   scripts/python-tests.sh            (called by scripts/test.sh)
# Without a GPU the GPU tests are listed as skipped with their reason (-rs), never as passed;
# on a GPU machine with several GPUs, tests/python/test_distributed.py also needs torchrun:
#   torchrun --nproc-per-node 2 -m pytest -q -rs tests/python/test_distributed.py
# Environment: PYTHON (default python3), TPAR_PYENV (default build/pyenv), TPAR_CUDA_ARCHS
# (default 90), TPAR_TORCH (default torch==2.11.0: PyPI's Linux build, CUDA libraries included),
# TPAR_PYTEST_JUNIT (a path: pytest writes its JUnit report there, for scripts/test-summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."

py=${PYTHON:-python3}
env=$(realpath -m "${TPAR_PYENV:-build/pyenv}")
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "tpar: the Python package needs Python 3.10 or newer ($py is $("$py" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$env/bin/python" ]; then
  "$py" -m venv "$env" 2>/dev/null || {
    echo "tpar: installing python3-venv" >&2
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    "$py" -m venv "$env"
  }
fi
pip=("$env/bin/python" -m pip --disable-pip-version-check -q)
t0=$SECONDS
# Pinned, so that a new release upstream cannot change what CI runs; a download that fails
# (a dropped connection in the middle of torch's wheel) is tried again twice.
deps=("${TPAR_TORCH:-torch==2.11.0}" transformers==5.17.0 pytest==9.2.0 "numpy<3"
      scikit-build-core==1.1.2 nanobind==3.1.0)
for attempt in 1 2 3; do
  if "${pip[@]}" install --retries 10 --timeout 60 "${deps[@]}"; then break; fi
  if [ "$attempt" = 3 ]; then
    echo "tpar: installing the Python test dependencies failed three times: ${deps[*]}" >&2
    exit 1
  fi
  echo "tpar: installing the Python test dependencies failed (attempt $attempt of 3); again in 30 s" >&2
  sleep 30
done
echo "== python: dependencies installed in $((SECONDS - t0)) s"
t0=$SECONDS
CMAKE_ARGS="-DTPAR_CUDA_ARCHS=${TPAR_CUDA_ARCHS:-90} ${CMAKE_ARGS:-}" \
  "${pip[@]}" install --no-build-isolation .
echo "== python: package built and installed in $((SECONDS - t0)) s"
# From outside the source tree, so that the installed package is what gets imported.
cd tests/python
"$env/bin/python" -c 'import tpar; print("== python: tpar", tpar.__version__, "from", tpar.__file__)'
junit=()
if [ -n "${TPAR_PYTEST_JUNIT:-}" ]; then junit=(--junitxml "$TPAR_PYTEST_JUNIT"); fi
exec "$env/bin/python" -m pytest -q -rs -p no:cacheprovider "${junit[@]}" .
