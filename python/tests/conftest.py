"""Shared fixtures: a context that reads nothing from the environment, and sim devices.

The library is the one gpupart finds by itself (GPUPART_PYTHON_LIBRARY, else the repository's
build/ folder, else the system path), so these tests exercise the real lookup.

The caller's environment is pinned before any test runs, as the meson suites' is: what
tests/run-pinned removes (GPUPART_* but the tests' own GPUPART_TEST_*, the orchestrators'
shares, KUBERNETES_*, CUDA_VISIBLE_DEVICES) is removed here too, asked of run-pinned
itself so that the list is written once, and GPUPART_DRA_METADATA_DIR names an empty
folder of the session's own. GPUPART_PYTHON_* stays: it picks the library under test
and the library never reads it.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

import gpupart

MiB = 1 << 20

_RUN_PINNED = Path(__file__).resolve().parents[2] / "tests" / "run-pinned"


def _pinned_names() -> set:
    """The names of os.environ that tests/run-pinned lets through to a command."""
    show = "import json, os; print(json.dumps(sorted(os.environ)))"
    out = subprocess.run([str(_RUN_PINNED), sys.executable, "-c", show], check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout))


def pytest_configure(config: pytest.Config) -> None:
    kept = _pinned_names()
    for name in list(os.environ):
        if name not in kept and not name.startswith("GPUPART_PYTHON_"):
            del os.environ[name]
    dra = tempfile.mkdtemp(prefix="gpupart-pytest-dra-")
    os.environ["GPUPART_DRA_METADATA_DIR"] = dra
    config.add_cleanup(lambda: shutil.rmtree(dra, ignore_errors=True))


@pytest.fixture
def ctx() -> Iterator[gpupart.Context]:
    with gpupart.Context(ignore_env=True) as c:
        yield c


@pytest.fixture
def sim(ctx: gpupart.Context) -> Iterator[gpupart.Device]:
    """A 1 GiB host-backed sim device (so device addresses are real host memory)."""
    with ctx.open_device("sim", sim=gpupart.SimDesc(total_bytes=1 << 30, host_backed=True)) as dev:
        yield dev
