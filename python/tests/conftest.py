"""Shared fixtures: a context that reads nothing from the environment, and sim devices.

The library is the one gpupart finds by itself (GPUPART_PYTHON_LIBRARY, else the repository's
build/ folder, else the system path), so these tests exercise the real lookup.
"""

from typing import Iterator

import pytest

import gpupart

MiB = 1 << 20


@pytest.fixture
def ctx() -> Iterator[gpupart.Context]:
    with gpupart.Context(ignore_env=True) as c:
        yield c


@pytest.fixture
def sim(ctx: gpupart.Context) -> Iterator[gpupart.Device]:
    """A 1 GiB host-backed sim device (so device addresses are real host memory)."""
    with ctx.open_device("sim", sim=gpupart.SimDesc(total_bytes=1 << 30, host_backed=True)) as dev:
        yield dev
