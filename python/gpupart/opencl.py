"""pyopencl integration: gpupart partitions as the memory of pyopencl arrays.

Open the gpupart device on pyopencl's own context and device (open_device adopts their
cl_context and cl_device_id, so gpupart's blocks live in the context your queues use),
make a partition, and pass ``Allocator(partition)`` wherever pyopencl takes an
allocator::

    import pyopencl as cl, pyopencl.array as cla, gpupart, gpupart.opencl
    clctx = cl.create_some_context(); queue = cl.CommandQueue(clctx)
    with gpupart.Context() as ctx, gpupart.opencl.open_device(ctx, clctx) as dev:
        alloc = gpupart.opencl.Allocator(dev.partition("arrays", fraction=0.5))
        a = cla.zeros(queue, (1024, 1024), "float32", allocator=alloc)
        ...
        del a  # before the device closes: a device with live allocations is Busy

Each call returns a ``pyopencl.Buffer`` over the allocation's gpupart sub-buffer
(gpupart_opencl_buffer), and the gpupart allocation is freed when that Buffer object is
garbage collected. gpupart reuses freed memory at once, as pyopencl's own MemoryPool
does: that is safe for work on one in-order queue (commands run in order), but with
several queues, or out-of-order ones, finish the queues that used an array before
dropping it.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

from . import _lib
from .core import Context, Device, Partition
from .errors import InvalidArgument, NoBackend, error_for, last_error

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover - the module stays importable for docs and type checks
    cl = None


def _require_pyopencl() -> Any:
    if cl is None:
        raise ImportError("gpupart.opencl needs pyopencl (Debian: python3-pyopencl; pip: pyopencl)")
    return cl


def _require_backend() -> None:
    if not _lib.has("gpupart_opencl_buffer"):
        raise NoBackend(f"{_lib.lib()._gpupart_path} was built without the OpenCL backend", -5)


def open_device(context: Context, cl_context: Any, cl_device: Any = None, *, no_svm: bool = False,
                **device_kwargs: Any) -> Device:
    """Opens a gpupart OpenCL device adopting pyopencl's context and device.

    cl_device defaults to the context's first device. device_kwargs are those of
    Context.open_device (memory_fraction, memory_limit, growth, ...). gpupart retains the
    context and device while the gpupart device is open.
    """
    _require_pyopencl()
    _require_backend()
    if cl_device is None:
        cl_device = cl_context.devices[0]
    desc = _lib.OpenCLDescC(context=cl_context.int_ptr, device=cl_device.int_ptr,
                            flags=_lib.OPENCL_NO_SVM if no_svm else 0)
    return context.open_device("opencl", backend_desc=desc, backend_desc_type="opencl", **device_kwargs)


class Allocator:
    """A pyopencl allocator: ``allocator(nbytes)`` returns a pyopencl.Buffer in partition.

    The partition's device must be an OpenCL device (see open_device). Allocation
    failures raise the gpupart error (LimitError, DeviceMemoryError, ...), which are
    MemoryErrors as pyopencl's own allocators raise.
    """

    def __init__(self, partition: Partition, alignment: int = 0) -> None:
        _require_pyopencl()
        _require_backend()
        if partition.device.backend != "opencl":
            raise InvalidArgument(f"gpupart.opencl.Allocator: partition '{partition.name}' is on a "
                                  f"{partition.device.backend} device, not an OpenCL one", -1)
        self.partition = partition
        self.alignment = alignment

    @property
    def context(self) -> Any:
        """The pyopencl.Context the buffers live in."""
        ptr = _lib.lib().gpupart_opencl_context(self.partition.device.handle)
        return cl.Context.from_int_ptr(ptr, retain=True)

    def __call__(self, nbytes: int) -> Any:
        allocation = self.partition.alloc(max(int(nbytes), 1), self.alignment)
        mem: Optional[int] = _lib.lib().gpupart_opencl_buffer(allocation.handle)
        if not mem:
            err = error_for(-7, last_error())
            allocation.free()
            raise err
        buf = cl.Buffer.from_int_ptr(mem, retain=True)
        weakref.finalize(buf, allocation.free)
        return buf


def buffer_of(allocation: Any) -> Any:
    """A pyopencl.Buffer over a gpupart Allocation's sub-buffer; keep the allocation alive."""
    _require_pyopencl()
    mem = _lib.lib().gpupart_opencl_buffer(allocation.handle)
    if not mem:
        raise error_for(-7, last_error())
    return cl.Buffer.from_int_ptr(mem, retain=True)


__all__ = ["Allocator", "open_device", "buffer_of"]
