"""pyopencl arrays in a gpupart partition, on PoCL (or whichever OpenCL device is present).

Skipped where pyopencl, an OpenCL platform or the library's OpenCL backend is missing.
"""

import gc
from typing import Iterator

import pytest

import gpupart
from conftest import MiB

cl = pytest.importorskip("pyopencl")
cla = pytest.importorskip("pyopencl.array")
np = pytest.importorskip("numpy")
import gpupart.opencl as gcl  # noqa: E402
from gpupart import _lib  # noqa: E402


def _cl_device():
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return None
    devices = [d for p in platforms for d in p.get_devices()]
    pocl = [d for d in devices if "Portable Computing Language" in d.platform.name]
    return (pocl or devices or [None])[0]


@pytest.fixture
def clctx():
    device = _cl_device()
    if device is None:
        pytest.skip("no OpenCL device")
    if not _lib.has("gpupart_opencl_buffer"):
        pytest.skip("libgpupart was built without its OpenCL backend")
    return cl.Context([device])


@pytest.fixture
def queue(clctx):
    return cl.CommandQueue(clctx)


@pytest.fixture
def part(clctx) -> Iterator[gpupart.Partition]:
    with gpupart.Context(ignore_env=True) as ctx:
        dev = gcl.open_device(ctx, clctx)
        try:
            yield dev.partition("arrays", limit=64 * MiB)
        finally:
            gc.collect()  # arrays dropped by the test free their allocations first
            dev.close()


def test_device_adopts_pyopencls_context_and_device(clctx, part):
    lib = _lib.lib()
    dev = part.device
    assert dev.backend == "opencl"
    assert lib.gpupart_opencl_context(dev.handle) == clctx.int_ptr
    assert lib.gpupart_opencl_device(dev.handle) == clctx.devices[0].int_ptr
    assert gcl.Allocator(part).context == clctx


def test_array_operations_run_in_the_partition(queue, part):
    alloc = gcl.Allocator(part)
    n = 100_000
    a = cla.arange(queue, n, dtype=np.float32, allocator=alloc)
    b = cla.zeros(queue, n, np.float32, allocator=alloc) + 2
    c = a * b + 1
    assert isinstance(c.base_data, cl.Buffer)
    np.testing.assert_allclose(c.get(), np.arange(n, dtype=np.float32) * 2 + 1)
    assert cla.sum(a).get() == pytest.approx(n * (n - 1) / 2, rel=1e-5)
    assert cla.dot(a, b).get() == pytest.approx(n * (n - 1), rel=1e-5)
    s = part.stats
    assert s.live_allocations >= 3 and s.in_use >= 3 * n * 4 and s.total_allocations >= 3


def test_array_constructor_and_set_get_round_trip(queue, part):
    host = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float64)
    arr = cla.Array(queue, host.shape, host.dtype, allocator=gcl.Allocator(part))
    arr.set(host)
    np.testing.assert_array_equal(arr.get(), host)
    np.testing.assert_allclose((arr * 3).get(), host * 3)


def test_buffers_are_gpupart_sub_buffers_of_its_blocks(queue, part):
    a = cla.empty(queue, 1000, np.uint8, allocator=gcl.Allocator(part))
    buf = a.base_data
    assert buf.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT) is not None  # a sub-buffer
    assert buf.size == 1000
    assert part.stats.in_use == 1000


def test_dropping_arrays_frees_their_allocations(queue, part):
    alloc = gcl.Allocator(part)
    arrays = [cla.zeros(queue, 1024, np.float32, allocator=alloc) for _ in range(5)]
    assert part.stats.live_allocations == 5
    queue.finish()
    del arrays
    gc.collect()
    s = part.stats
    assert (s.live_allocations, s.in_use, s.total_frees) == (0, 0, 5)


def test_partition_limit_raises_limit_error_from_the_allocator(queue, part):
    alloc = gcl.Allocator(part)
    keep = cla.empty(queue, 48 * MiB, np.uint8, allocator=alloc)
    with pytest.raises(gpupart.LimitError) as info:
        cla.empty(queue, 32 * MiB, np.uint8, allocator=alloc)
    assert isinstance(info.value, MemoryError) and "arrays" in info.value.message
    del keep


def test_allocator_refuses_a_partition_of_another_backend():
    with gpupart.Context(ignore_env=True) as ctx, ctx.open_device("sim") as dev:
        with pytest.raises(gpupart.InvalidArgument, match="not an OpenCL"):
            gcl.Allocator(dev.partition(limit=4 * MiB))
