"""gpupart.torch and gpupart.cupy.

The PyTorch entry points (libgpupart_torch) are exercised from Python on a gpupart CUDA
device over the CUDA driver test double, which the build makes with the CUDA backend
(build/tests/libcuda_double.so, or $GPUPART_TEST_CUDA_DOUBLE). With real PyTorch or
CuPy and a GPU the last tests run them for real; they skip where those are absent.
"""

import ctypes
import os
import sys
import types
from pathlib import Path

import pytest

import gpupart
from gpupart import _lib
from conftest import MiB

TORCH_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
TORCH_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)


def _double() -> str:
    env = os.environ.get("GPUPART_TEST_CUDA_DOUBLE")
    path = Path(env) if env else Path(gpupart.library_path()).parent / "tests" / "libcuda_double.so"
    return str(path) if path.exists() else ""


@pytest.fixture
def cuda_part():
    if not _lib.has("gpupart_cuda_ptr"):
        pytest.skip("libgpupart was built without its CUDA backend")
    double = _double()
    if not double:
        pytest.skip("the CUDA driver test double was not built")
    with gpupart.Context(ignore_env=True, config_text=f"[gpupart]\ncuda_library = {double}\n") as ctx:
        dev = ctx.open_device("cuda")
        part = dev.partition("frameworks", limit=64 * MiB)
        yield part
        import gpupart.torch as gt

        if 0 in gt._bound:
            gt.bind(0, None)
        dev.close()


@pytest.fixture
def shim(cuda_part):
    import gpupart.torch as gt

    try:
        path = gt.library_path()
    except OSError as e:
        pytest.skip(str(e))
    return path


def _entry_points(path):
    """The two functions as PyTorch's CUDAPluggableAllocator takes them: by path and name."""
    lib = ctypes.CDLL(path)
    return TORCH_ALLOC(("gpupart_torch_alloc", lib)), TORCH_FREE(("gpupart_torch_free", lib))


def test_bound_partition_serves_pytorchs_entry_points(cuda_part, shim):
    import gpupart.torch as gt

    gt.bind(0, cuda_part)
    alloc, free = _entry_points(shim)
    ptr = alloc(5 * MiB, 0, None)
    assert ptr, gpupart.last_error()
    assert gt.memory_allocated() == 5 * MiB and gt.live_allocations() == 1
    assert gt.memory_reserved() >= 5 * MiB
    free(ptr, 5 * MiB, 0, None)
    assert gt.memory_allocated() == 0 and gt.max_memory_allocated() == 5 * MiB
    assert gt.stats().total_frees == 1


def test_refused_allocation_is_null_and_last_error_says_why(cuda_part, shim):
    import gpupart.torch as gt

    gt.bind(0, cuda_part)
    alloc, _ = _entry_points(shim)
    assert not alloc(128 * MiB, 0, None)
    assert "frameworks" in gpupart.last_error()
    assert gt.stats().failed_allocations == 1


def test_bind_refuses_a_partition_of_another_backend(ctx):
    import gpupart.torch as gt

    with ctx.open_device("sim") as dev:
        with pytest.raises(gpupart.InvalidArgument, match="must be a CUDA one"):
            gt.bind(0, dev.partition(limit=4 * MiB))


def test_use_hands_pytorch_the_shim_by_path_and_symbol_names(cuda_part, shim, monkeypatch):
    """use() with a stand-in for the two torch.cuda.memory calls it makes: the stand-in
    resolves the entry points the way PyTorch does (dlopen the path, look up the names)."""
    import gpupart.torch as gt

    installed = []

    class PluggableAllocator:
        def __init__(self, path, alloc_name, free_name):
            lib = ctypes.CDLL(path)
            self.alloc = TORCH_ALLOC((alloc_name, lib))
            self.free = TORCH_FREE((free_name, lib))

    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(
        CUDAPluggableAllocator=PluggableAllocator, change_current_allocator=installed.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert gt.use(cuda_part, abort_on_failure=False) is cuda_part and gt.partition() is cuda_part
    (allocator,) = installed
    ptr = allocator.alloc(MiB, 0, None)
    assert ptr and gt.memory_allocated() == MiB
    allocator.free(ptr, MiB, 0, None)
    assert gt.live_allocations() == 0


def test_stats_without_a_bound_partition_is_invalid_argument():
    import gpupart.torch as gt

    with pytest.raises(gpupart.InvalidArgument, match="no partition is bound to device 7"):
        gt.stats(7)


def _cuda_framework(name):
    mod = pytest.importorskip(name)
    if name == "torch" and not mod.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    if name == "cupy":
        try:
            mod.cuda.runtime.getDeviceCount()
        except Exception as e:  # cupy raises its own CUDARuntimeError without a driver
            pytest.skip(f"CuPy sees no CUDA device: {e}")
    return mod


def test_pytorch_tensors_live_in_the_partition():
    torch = _cuda_framework("torch")
    import subprocess

    # A fresh process: PyTorch takes a new allocator only before its first CUDA allocation.
    code = ("import torch, gpupart.torch as gt; gt.use(fraction=0.25); "
            "x = torch.ones(1 << 20, device='cuda'); y = (x * 2).sum().item(); "
            "assert y == 2 * (1 << 20), y; assert gt.memory_allocated() >= 4 << 20, gt.stats(); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr
    del torch


def test_cupy_arrays_live_in_the_partition():
    cupy = _cuda_framework("cupy")
    import gpupart.cupy as gc

    part = gc.use(fraction=0.25)
    try:
        x = cupy.arange(1 << 20, dtype=cupy.float32)
        assert float((x * 2).sum()) == pytest.approx(float((1 << 20) * ((1 << 20) - 1)))
        assert part.stats.in_use >= 4 << 20
        del x
    finally:
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def test_cupy_allocator_refuses_a_partition_of_another_backend(ctx):
    pytest.importorskip("cupy")
    import gpupart.cupy as gc

    with ctx.open_device("sim") as dev:
        with pytest.raises(gpupart.InvalidArgument, match="must be a CUDA one"):
            gc.allocator(dev.partition(limit=4 * MiB))


def test_use_without_a_partition_makes_one_on_the_cuda_device(cuda_part, shim, monkeypatch):
    import gpupart._cuda as gcu
    import gpupart.torch as gt

    installed = []
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(
        CUDAPluggableAllocator=lambda *names: names, change_current_allocator=installed.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    ctx = cuda_part.device.context
    try:
        part = gt.use(context=ctx, limit=16 * MiB)
        assert part.name == "torch" and part.device.backend == "cuda" and part.stats.limit == 16 * MiB
        assert installed == [(gt.library_path(), "gpupart_torch_alloc", "gpupart_torch_free")]
        assert gt.use(context=ctx, limit=16 * MiB) is part  # one device per index, the partition found again
    finally:
        gt.bind(0, None)
        gcu._devices.pop(0).close()
