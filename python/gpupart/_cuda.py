"""What gpupart.torch and gpupart.cupy share: a gpupart CUDA device for a framework's
device index, opened on the device's primary context (the one the CUDA runtime, and so
PyTorch and CuPy, use), and the partitions bound to each index for the life of the process.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _lib
from .core import Context, Device, Partition
from .errors import InvalidArgument, NoBackend

_contexts: Dict[int, Context] = {}
_devices: Dict[int, Device] = {}


def require_cuda() -> None:
    """NoBackend unless the loaded libgpupart has its CUDA backend."""
    if not _lib.has("gpupart_cuda_ptr"):
        raise NoBackend(f"{_lib.lib()._gpupart_path} was built without the CUDA backend (no cuda.h at build time)",
                        -5)


def check_partition(partition: Partition, who: str) -> Partition:
    """partition, after checking it is a live partition of a CUDA device."""
    if partition.device.backend != "cuda":
        raise InvalidArgument(f"{who}: partition '{partition.name}' is on a {partition.device.backend} device; "
                              "it must be a CUDA one", -1)
    return partition


def default_partition(device: int, context: Optional[Context], partition_kwargs: Dict[str, Any],
                      name: str) -> Partition:
    """A partition on CUDA device `device`, on a device opened once per index (through
    context, else a process-wide Context reading GPUPART_* and GPUPART_CONFIG)."""
    require_cuda()
    if device not in _devices:
        ctx = context or _contexts.setdefault(device, Context())
        _devices[device] = ctx.open_device("cuda", device)
    dev = _devices[device]
    return dev.find(partition_kwargs.get("name", name)) or dev.partition(**{"name": name, **partition_kwargs})


def cuda_ptr(allocation: Any) -> int:
    """gpupart_cuda_ptr of an Allocation."""
    return int(_lib.lib().gpupart_cuda_ptr(allocation.handle))
