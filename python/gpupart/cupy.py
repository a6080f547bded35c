"""CuPy integration: gpupart partitions as CuPy's device memory.

``use()`` installs a Python-level allocator with cupy.cuda.set_allocator: each request is
one gpupart allocation, wrapped as ``cupy.cuda.MemoryPointer`` over
``cupy.cuda.UnownedMemory`` whose owner is the gpupart Allocation, so the allocation is
freed when CuPy drops the memory::

    import cupy, gpupart.cupy
    gpupart.cupy.use(fraction=0.5)
    x = cupy.arange(1 << 20)            # lives in the partition
    print(gpupart.cupy.partition().stats.in_use)

CuPy then bypasses its own memory pool; set it back with cupy.cuda.set_allocator(
cupy.get_default_memory_pool().malloc). A refused allocation raises the gpupart error
(LimitError, DeviceMemoryError: MemoryErrors). As with gpupart.torch, freed memory is
reused at once: safe on one stream, else synchronise before dropping an array.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from . import _cuda
from .core import Context, Partition
from .errors import InvalidArgument

_bound: Dict[int, Partition] = {}


def allocator(partition: Partition, device: int = 0) -> Callable[[int], Any]:
    """A cupy.cuda.set_allocator function allocating from partition (a CUDA partition)."""
    import cupy

    _cuda.check_partition(partition, "gpupart.cupy.allocator")

    def malloc(size: int) -> Any:
        a = partition.alloc(max(int(size), 1))
        mem = cupy.cuda.UnownedMemory(_cuda.cuda_ptr(a), size, a, device)
        return cupy.cuda.MemoryPointer(mem, 0)

    return malloc


def use(partition: Optional[Partition] = None, *, device: int = 0, context: Optional[Context] = None,
        **partition_kwargs: Any) -> Partition:
    """Makes CuPy allocate from partition (else a partition named "cupy" made with
    partition_kwargs on CUDA device `device`). Returns the partition."""
    import cupy

    if partition is None:
        partition = _cuda.default_partition(device, context, partition_kwargs, "cupy")
    elif partition_kwargs:
        raise InvalidArgument("gpupart.cupy.use: give a partition or partition arguments, not both", -1)
    cupy.cuda.set_allocator(allocator(partition, device))
    _bound[device] = partition
    return partition


def partition(device: int = 0) -> Partition:
    """The partition use() installed for `device`."""
    try:
        return _bound[device]
    except KeyError:
        raise InvalidArgument(f"gpupart.cupy: use() was not called for device {device}", -1) from None
