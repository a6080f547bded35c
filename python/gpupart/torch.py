"""PyTorch integration: gpupart partitions behind torch.cuda's allocator.

``use()`` binds a gpupart partition of a CUDA device to a PyTorch device index and makes
``torch.cuda.memory.CUDAPluggableAllocator`` over libgpupart_torch (the C entry points
gpupart_torch_alloc / gpupart_torch_free, built with gpupart's CUDA backend) PyTorch's
allocator::

    import gpupart.torch
    part = gpupart.torch.use(fraction=0.5)      # before the first CUDA tensor
    x = torch.ones(1024, 1024, device="cuda")   # lives in the partition
    print(gpupart.torch.stats().in_use)

PyTorch allows the allocator to be changed only before its first CUDA allocation, and
under a pluggable allocator torch.cuda.memory_allocated() and friends raise: use
stats(), memory_allocated(), max_memory_allocated() and memory_reserved() here instead.
gpupart is not stream-ordered: memory freed by PyTorch is reused at once, which is safe
for work on one stream; synchronise before dropping a tensor another stream still uses.
PyTorch does not check the pointer a pluggable allocator returns, so a refused allocation
cannot become a Python exception: use() makes it print gpupart's message and abort the
process (abort_on_failure=False returns NULL instead, which PyTorch uses as address 0).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import _cuda, _lib
from .core import Context, Partition, Stats
from .errors import InvalidArgument, check

ALLOC_SYMBOL = "gpupart_torch_alloc"
FREE_SYMBOL = "gpupart_torch_free"

_bound: Dict[int, Partition] = {}
_shim: Optional[ctypes.CDLL] = None


def library_candidates() -> List[str]:
    """Where libgpupart_torch.so is looked for, in order."""
    env = os.environ.get("GPUPART_PYTHON_TORCH_LIBRARY")
    if env:
        return [env]
    here = Path(_lib.lib()._gpupart_path).parent  # type: ignore[attr-defined]
    found = [str(p) for p in (here / "python" / "libgpupart_torch.so", here / "libgpupart_torch.so") if p.exists()]
    system = ctypes.util.find_library("gpupart_torch")
    return found + ([system] if system else [])


def library_path() -> str:
    """The libgpupart_torch.so PyTorch is given (OSError when there is none)."""
    paths = library_candidates()
    if not paths:
        raise OSError("gpupart.torch: libgpupart_torch.so not found: it is built with gpupart's CUDA backend "
                      "(cuda.h at build time); or set GPUPART_PYTHON_TORCH_LIBRARY to its path")
    return paths[0]


def _library() -> ctypes.CDLL:
    global _shim
    if _shim is None:
        _lib.lib()  # libgpupart first, so the shim's libgpupart.so.0 resolves to the same instance
        shim = ctypes.CDLL(library_path())
        shim.gpupart_torch_set_partition.restype = ctypes.c_int
        shim.gpupart_torch_set_partition.argtypes = [ctypes.c_int, ctypes.c_void_p]
        shim.gpupart_torch_live.restype = ctypes.c_uint64
        shim.gpupart_torch_set_abort_on_failure.argtypes = [ctypes.c_int]
        shim.gpupart_torch_set_abort_on_failure.restype = None
        _shim = shim
    return _shim


def bind(device: int, partition: Optional[Partition]) -> None:
    """Makes PyTorch device index `device` allocate from partition (None unbinds it)."""
    if partition is not None:
        _cuda.check_partition(partition, "gpupart.torch.bind")
    check(_library().gpupart_torch_set_partition(device, partition.handle if partition is not None else None))
    if partition is None:
        _bound.pop(device, None)
    else:
        _bound[device] = partition


def use(partition: Optional[Partition] = None, *, device: int = 0, context: Optional[Context] = None,
        abort_on_failure: bool = True, **partition_kwargs: Any) -> Partition:
    """Binds partition (else a partition named "torch" made with partition_kwargs, e.g.
    fraction=0.5, on CUDA device `device`) and makes gpupart PyTorch's CUDA allocator.

    Call it before PyTorch's first CUDA allocation. Returns the partition. With
    abort_on_failure a refused allocation ends the process with gpupart's message.
    """
    import torch  # imported here: gpupart works without PyTorch

    if partition is None:
        partition = _cuda.default_partition(device, context, partition_kwargs, "torch")
    elif partition_kwargs:
        raise InvalidArgument("gpupart.torch.use: give a partition or partition arguments, not both", -1)
    bind(device, partition)
    _library().gpupart_torch_set_abort_on_failure(int(abort_on_failure))
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), ALLOC_SYMBOL, FREE_SYMBOL)
    torch.cuda.memory.change_current_allocator(allocator)
    return partition


def partition(device: int = 0) -> Partition:
    """The partition bound to PyTorch device index `device`."""
    try:
        return _bound[device]
    except KeyError:
        raise InvalidArgument(f"gpupart.torch: no partition is bound to device {device}", -1) from None


def stats(device: int = 0) -> Stats:
    """gpupart's stats of the partition behind `device` (PyTorch's own raise here)."""
    return partition(device).stats


def memory_allocated(device: int = 0) -> int:
    """Bytes of live tensors' memory, as torch.cuda.memory_allocated."""
    return stats(device).in_use


def max_memory_allocated(device: int = 0) -> int:
    """Peak of memory_allocated, as torch.cuda.max_memory_allocated."""
    return stats(device).peak_in_use


def memory_reserved(device: int = 0) -> int:
    """Bytes held from the driver, as torch.cuda.memory_reserved."""
    return stats(device).reserved


def live_allocations() -> int:
    """Allocations handed to PyTorch and not yet freed, over every device."""
    return int(_library().gpupart_torch_live())
