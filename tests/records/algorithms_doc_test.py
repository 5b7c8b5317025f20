"""docs/ALGORITHMS.md's worked example, built from the page's own text: its four blocks are
applied to a copy of the sources, the schedule file is compiled (nvcc, one architecture), the
registry with it (c++), and the registry's checks run on the result
(tests/records/algorithms_doc_check.cc). Each of the three list edits left out, or the row
given twice, must fail the build with the static_assert that names it.

    python3 -m unittest discover -s tests/records -p '*_test.py'    (CTest: DocsNumbersMatchTheirRecords)

Needs a C++ compiler and the CUDA toolkit (nvcc, cuda_runtime_api.h, libcudart); without them
the tests are reported as skipped."""
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "ALGORITHMS.md")
EXAMPLE = re.compile(r"<!--\s*example:\s*(.*?)\s*-->\s*\n\s*```\w*\n(.*?)\n\s*```", re.S)


def cuda_home():
    for d in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if d and os.path.exists(os.path.join(d, "include", "cuda_runtime_api.h")):
            return d
    return None


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def examples():
    """{kind: code} of every example block of the page, dedented."""
    text = read(DOC)
    found = {}
    for kind, code in EXAMPLE.findall(text):
        lines = code.split("\n")
        found[kind] = textwrap.dedent("\n".join(lines)).strip("\n") + "\n"
    return found


def apply(root, blocks, skip=()):
    """Applies the example's blocks to the copy at `root`; returns the example's identities."""
    ids = {}
    for kind, code in blocks.items():
        if kind in skip:
            continue
        if kind.startswith("new file "):
            path = os.path.join(root, kind[len("new file "):])
            write(path, code)
            ids["cu"] = path
            m = re.search(r"extern const KernelSet (\w+)", code)
            ids["set"] = m.group(1)
        elif kind == "value of tparAlgo_t in include/tpar/tpar.h":
            path = os.path.join(root, "include", "tpar", "tpar.h")
            text = read(path)
            m = re.search(r"^(\s*)tparNumAlgos = (\d+)", text, re.M)
            value = re.match(r"\s*(\w+)\s*=\s*(\d+),", code)
            assert m and value, "tpar.h or the example's value has changed shape"
            ids["pub"] = value.group(1)
            ids["value"], ids["num"] = int(value.group(2)), int(m.group(2))
            text = text[:m.start()] + m.group(1) + code.strip() + "\n" + m.group(1) + \
                "tparNumAlgos = %d" % (int(m.group(2)) + 1) + text[m.end():]
            write(path, text)
        elif kind == "line of TPAR_KERNEL_ALGORITHMS in src/base/algorithm_list.h":
            path = os.path.join(root, "src", "base", "algorithm_list.h")
            lines = read(path).split("\n")
            i = next(k for k, l in enumerate(lines) if l.startswith("#define TPAR_KERNEL_ALGORITHMS("))
            while lines[i].rstrip().endswith("\\"):
                i += 1
            lines[i] = lines[i].rstrip() + " \\"
            lines.insert(i + 1, "  " + code.strip())
            write(path, "\n".join(lines))
            m = re.match(r"X\((\w+),\s*(\w+),\s*\"([^\"]+)\"", code.strip())
            ids["key"], ids["name"] = "k" + m.group(1), m.group(3)
        elif kind == "row of kTable in src/registry/algorithms.cc":
            path = os.path.join(root, "src", "registry", "algorithms.cc")
            text = read(path)
            start = text.index("constexpr Algorithm kTable[] = {")
            end = text.index("\n};", start)
            text = text[:end] + "\n" + code.rstrip() + text[end:]
            if "twice" in skip:
                end = text.index("\n};", start)
                text = text[:end] + "\n" + code.rstrip() + text[end:]
            write(path, text)
        else:
            raise AssertionError("unknown example block: " + kind)
    return ids


@unittest.skipIf(cuda_home() is None or shutil.which("c++") is None,
                 "needs a C++ compiler and the CUDA toolkit")
class WorkedExampleBuilds(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tpar-example-")
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(self.dir, "src"))
        shutil.copytree(os.path.join(ROOT, "include"), os.path.join(self.dir, "include"))
        self.blocks = examples()
        self.cuda = cuda_home()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def cxx(self, *args):
        cmd = ["c++", "-std=c++17", "-I", os.path.join(self.dir, "include"),
               "-I", os.path.join(self.dir, "src"), "-I", os.path.join(self.cuda, "include")]
        return subprocess.run(cmd + list(args), capture_output=True, text=True)

    def test_the_page_has_the_four_blocks(self):
        self.assertEqual(4, len(self.blocks), sorted(self.blocks))

    def test_the_example_builds_and_passes_the_registry_checks(self):
        ids = apply(self.dir, self.blocks)
        self.assertEqual(ids["num"], ids["value"], "the example's value must be the next free one")
        nvcc = os.path.join(self.cuda, "bin", "nvcc")
        if not os.path.exists(nvcc):
            self.skipTest("no nvcc")
        cu_obj = os.path.join(self.dir, "example.o")
        r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_80", "--expt-relaxed-constexpr",
                            "-I", os.path.join(self.dir, "include"), "-I", os.path.join(self.dir, "src"),
                            "-c", ids["cu"], "-o", cu_obj], capture_output=True, text=True)
        self.assertEqual(0, r.returncode, r.stderr[-3000:])
        # The other algorithms' kernel sets, as weak stand-ins: the example's own is the real one.
        stub = os.path.join(self.dir, "stub.cc")
        # Every datatype's four group-size variants (kernels/launch.h, KernelSet).
        FAKE = "{{" + ", ".join(["{&fake, &fake, &fake, &fake}"] * 3) + "}}"
        with open(stub, "w") as f:
            f.write('#include "kernels/launch.h"\nnamespace tpar { namespace kernels {\n'
                    'static char fake;\n'
                    '#define S(K, p, n, a, set) extern const KernelSet set __attribute__((weak)) = %s;\n'
                    '#define F(K, p, n, set) extern const KernelSet set __attribute__((weak)) = %s;\n'
                    '#define W(K, p, n, w, set) extern const KernelSet set __attribute__((weak)) = %s;\n'
                    '#define H(p, set) extern const KernelSet set __attribute__((weak)) = %s;\n'
                    'TPAR_KERNEL_ALGORITHMS(S)\nTPAR_FUSED_ALGORITHMS(F)\nTPAR_WIRE_ALGORITHMS(W)\n'
                    'TPAR_HOST_KERNEL_SETS(H)\n'
                    # The fused call's norm kernel (composite path), not a line of the list.
                    'extern const KernelSet addRmsNormKernels __attribute__((weak)) = %s;\n}}\n'
                    % (FAKE, FAKE, FAKE, FAKE, FAKE))
        exe = os.path.join(self.dir, "check")
        r = self.cxx("-DEXAMPLE_KEY=" + ids["key"], "-DEXAMPLE_PUB=" + ids["pub"],
                     '-DEXAMPLE_NAME="%s"' % ids["name"], "-DEXAMPLE_SET=" + ids["set"],
                     os.path.join(HERE, "algorithms_doc_check.cc"),
                     os.path.join(self.dir, "src", "registry", "algorithms.cc"),
                     os.path.join(self.dir, "src", "registry", "launcher.cc"), stub, cu_obj,
                     "-o", exe, "-L", os.path.join(self.cuda, "lib64"), "-lcudart")
        self.assertEqual(0, r.returncode, r.stderr[-3000:])
        r = subprocess.run([exe], capture_output=True, text=True)
        self.assertEqual(0, r.returncode, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"^ok %d rows" % (ids["num"] - 1))

    def registry_build_fails(self, skip, message):
        apply(self.dir, self.blocks, skip=skip)
        r = self.cxx("-fsyntax-only", os.path.join(self.dir, "src", "registry", "algorithms.cc"))
        self.assertNotEqual(0, r.returncode, "built without " + str(skip))
        self.assertIn(message, r.stderr)

    def test_a_line_without_its_row_fails_the_build(self):
        self.registry_build_fails({"row of kTable in src/registry/algorithms.cc"},
                                  "needs exactly one registry row")

    def test_a_row_given_twice_fails_the_build(self):
        self.registry_build_fails({"twice"}, "needs exactly one registry row")

    def test_a_public_value_without_its_line_fails_the_build(self):
        self.registry_build_fails({"line of TPAR_KERNEL_ALGORITHMS in src/base/algorithm_list.h",
                                   "row of kTable in src/registry/algorithms.cc"},
                                  "needs exactly one line")

    def test_a_line_without_its_public_value_fails_the_build(self):
        self.registry_build_fails({"value of tparAlgo_t in include/tpar/tpar.h"},
                                  "tparAlgoTwoShotLLPull")


if __name__ == "__main__":
    unittest.main()
