"""docs/python.md run as a reader runs it: its install lines (in a scratch folder, with a
copy of the package) and every Python example, each in a fresh interpreter, checked for
what the document says they print. The C declarations it shows are compared with the
library's own. Examples whose framework (PyTorch, CuPy, pyopencl with an OpenCL device)
is missing are skipped, saying which.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpupart

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "python.md").read_text()


def blocks(lang):
    return re.findall(r"^```" + lang + r"\n(.*?)^```", DOC, re.S | re.M)


def clean_env(**extra):
    """The environment without GPUPART_* (a reader's shell), keeping the library override
    that points the examples at the library under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPART_")}
    env["GPUPART_PYTHON_LIBRARY"] = gpupart.library_path()
    env.update(extra)
    return env


def test_every_example_is_covered():
    assert len(blocks("sh")) == 1 and len(blocks("python")) == 4 and len(blocks("c")) == 1, \
        "a block was added to or removed from docs/python.md: give it its check here"


def test_the_install_lines_as_written(tmp_path):
    lines = [l for l in blocks("sh")[0].splitlines() if l.strip()]
    # The first line installs the Debian packages and builds the library under test: done.
    assert lines[0].startswith("./scripts/deps python && ./scripts/run "), lines
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3 (the line names Debian's Python)")
    if subprocess.run(["/usr/bin/python3", "-c", "import ensurepip, venv"], capture_output=True).returncode:
        pytest.skip("/usr/bin/python3 has no venv module (Debian: python3-venv)")
    shutil.copytree(REPO / "python", tmp_path / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "_paths.py"))
    # The library under test is recorded at install time (docs: GPUPART_PYTHON_BUILD_DIR);
    # PIP_NO_INDEX: the lines must work offline, as the document says.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPART_", "PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(GPUPART_PYTHON_BUILD_DIR=str(Path(gpupart.library_path()).resolve().parent), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines[1:])], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    version, path = p.stdout.split()[-2:]
    assert version == gpupart.version() and Path(path).resolve() == Path(gpupart.library_path()).resolve(), p.stdout
    site = subprocess.run([str(tmp_path / ".venv/bin/python"), "-c", "import gpupart; print(gpupart.__file__)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ".venv" in site.stdout, site.stdout + site.stderr  # the installed copy, not the source tree
    numpy = subprocess.run([str(tmp_path / ".venv/bin/python"), "-c", "import numpy"], capture_output=True)
    assert numpy.returncode == 0 or not Path("/usr/lib/python3/dist-packages/numpy").exists(), \
        "the venv does not see Debian's numpy"


def _needs(block):
    """Skips the test when the example's framework is missing here."""
    for module in ("torch", "cupy"):
        if re.search(rf"^import .*\b{module}\b", block, re.M):
            pytest.importorskip(module)
            skip_without_cuda(module)
    if "pyopencl" in block:
        cl = pytest.importorskip("pyopencl")
        try:
            devices = [d for p in cl.get_platforms() for d in p.get_devices()]
        except cl.Error:
            devices = []
        if not devices:
            pytest.skip("no OpenCL device")


def skip_without_cuda(module):
    if module == "torch":
        import torch
        if not torch.cuda.is_available():
            pytest.skip("PyTorch sees no CUDA device")
    else:
        import cupy
        try:
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # cupy raises its own CUDA errors
            pytest.skip(f"CuPy sees no CUDA device: {e}")


# What each example prints, by the name of the section it is in.
EXPECTED = {
    "The core API": r"^\[.*\]\n\d+ 0 \d+\n\{.*'in_use': 0.*\} \d+\n$",
    "pyopencl": r"^\[1\. 3\. 5\. 7\.\]\n$",
    "PyTorch": r"^\d+ \d+\n$",
    "CuPy": r"^\d+\n$",
}


def _section(block):
    before = DOC[:DOC.index(block)]
    return re.findall(r"^## (.+)$", before, re.M)[-1]


@pytest.mark.parametrize("block", blocks("python"), ids=lambda b: _section(b))
def test_python_example_runs_as_written(block, tmp_path):
    _needs(block)
    env = clean_env(PYOPENCL_CTX="0", PYOPENCL_COMPILER_OUTPUT="0")  # no prompt for a device
    p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    want = EXPECTED[_section(block)]
    assert re.search(want, p.stdout, re.S), f"printed {p.stdout!r}, the document promises {want}"


def test_the_c_declarations_are_the_libraries_own():
    source = (REPO / "python" / "gpupart" / "_torch_alloc.c").read_text()
    for line in blocks("c")[0].splitlines():
        if not line.strip():
            continue
        decl = line.rstrip(";").replace("cudaStream_t", "gpupart_torch_stream")
        assert f"TORCH_API {decl} {{" in source, f"docs/python.md declares {line!r}, not what the library defines"
