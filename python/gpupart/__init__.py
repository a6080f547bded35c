"""gpupart for Python: growth arenas and ratio partitions of GPU memory, on every vendor.

A ctypes binding of libgpupart (no compiler needed to install it) with the library's
objects as Python classes::

    import gpupart
    with gpupart.Context() as ctx, ctx.open_device("sim") as dev:
        train = dev.partition("train", fraction=0.6)
        with train.alloc(256 << 20) as a:
            print(a.info.device_address, train.stats.in_use)

Integrations: gpupart.opencl (a pyopencl allocator), gpupart.torch (PyTorch's
CUDAPluggableAllocator) and gpupart.cupy (cupy.cuda.set_allocator). Every failure raises
a subclass of gpupart.Error carrying the library's message and the result's name.
"""

from .core import (Allocation, AllocationInfo, Charge, Context, Device, DeviceInfo, Partition, SimDesc, Stats,
                   backend_name, library_path, version)
from .errors import (BackendError, Busy, ConfigError, Corrupt, DeviceMemoryError, Error, Exists,
                     InvalidArgument, LimitError, NoBackend, NoDevice, NotSupported, OutOfHostMemory,
                     last_error)

__all__ = [
    "Allocation", "AllocationInfo", "Charge", "Context", "Device", "DeviceInfo", "Partition", "SimDesc", "Stats",
    "backend_name", "library_path", "version", "Error", "InvalidArgument", "OutOfHostMemory",
    "DeviceMemoryError", "LimitError", "NoBackend", "NoDevice", "BackendError", "NotSupported",
    "ConfigError", "Busy", "Exists", "Corrupt", "last_error",
]
__version__ = "0.3.0"
