"""gpupart's objects in Python: Context, Device, Partition and Allocation.

Each wraps one C handle and keeps its parent alive (an allocation its partition, a
partition its device, a device its context), so the garbage collector never frees a
parent under a live child. Every object is a context manager: leaving the ``with`` block
frees the allocation, destroys the partition, closes the device or destroys the context.
Using an object after that raises InvalidArgument instead of touching freed C memory.
An Allocation that is dropped without free() is freed by its finalizer; partitions,
devices and contexts are released explicitly or when their parent is (a device's close
destroys its partitions, as in C).
"""

from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional, Union

from . import _lib
from .errors import InvalidArgument, check

BACKENDS = {"auto": _lib.BACKEND_AUTO, "sim": _lib.BACKEND_SIM, "opencl": _lib.BACKEND_OPENCL,
            "vulkan": _lib.BACKEND_VULKAN, "cuda": _lib.BACKEND_CUDA}
GROWTH = {"default": _lib.GROWTH_DEFAULT, "on": _lib.GROWTH_ON, "off": _lib.GROWTH_OFF}

BackendName = Union[str, int]


def backend_id(backend: BackendName) -> int:
    """The gpupart_backend value of a name ("sim", "opencl", ...) or number."""
    if isinstance(backend, int):
        return backend
    try:
        return BACKENDS[backend.lower()]
    except KeyError:
        raise InvalidArgument(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}", -1) from None


def backend_name(backend: int) -> str:
    """gpupart_backend_name of a backend value."""
    return (_lib.lib().gpupart_backend_name(backend) or b"?").decode()


def _growth(growth: Union[str, int]) -> int:
    if isinstance(growth, int):
        return growth
    try:
        return GROWTH[growth]
    except KeyError:
        raise InvalidArgument(f"unknown growth {growth!r}; known: default, on, off", -1) from None


def _bytes(text: Optional[str], what: str = "string") -> Optional[bytes]:
    """text as the C string it becomes; a NUL inside would silently cut it there."""
    if text is None:
        return None
    if "\0" in text:
        raise InvalidArgument(f"{what} {text!r} holds a NUL character, which C strings cannot hold", -1)
    return text.encode()


# The range of each C integer type a struct field or argument has: ctypes would wrap what
# is outside it (2**64 becomes 0, -1 becomes 2**64 - 1) instead of refusing it.
_RANGES = {_lib.c_u64: (0, 2**64 - 1), _lib.c_u32: (0, 2**32 - 1), _lib.c_int: (-2**31, 2**31 - 1)}


def _integer(what: str, value: Any, ctype: Any) -> int:
    """value as an integer that ctype holds unchanged; TypeError or InvalidArgument naming it."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {value!r}") from None
    low, high = _RANGES[ctype]
    if not low <= n <= high:
        raise InvalidArgument(f"{what} {value!r} is out of range: {low} .. {high}", -1)
    return n


def _struct(cls: Any, call: str, **values: Any) -> Any:
    """cls(**values) with every integer field checked against its C type's range."""
    types = dict(cls._fields_)
    for name, value in values.items():
        if types[name] in _RANGES:
            values[name] = _integer(f"{call}: {name}", value, types[name])
    return cls(**values)


def version() -> str:
    """The loaded library's version string, e.g. "0.3.0"."""
    return _lib.lib().gpupart_version_string().decode()


def library_path() -> str:
    """The path or name libgpupart was loaded from."""
    return _lib.lib()._gpupart_path  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Stats:
    """gpupart_stats of a partition or a device (bytes and counts)."""

    limit: int
    guarantee: int
    in_use: int
    peak_in_use: int
    reserved: int
    peak_reserved: int
    live_allocations: int
    total_allocations: int
    total_frees: int
    driver_allocs: int
    driver_frees: int
    failed_allocations: int
    largest_free: int
    double_frees: int

    @classmethod
    def _from(cls, c: _lib.StatsC) -> "Stats":
        return cls(**{name: int(getattr(c, name)) for name in _lib.STATS_FIELDS})

    def as_dict(self) -> Dict[str, int]:
        """The fields as a dict (for logging or JSON)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DeviceInfo:
    """gpupart_device_info: what a backend reports about one device."""

    backend: str
    index: int
    name: str
    vendor: str
    uuid: bytes
    total_bytes: int
    free_bytes: Optional[int]  # None where the backend cannot tell (C: UINT64_MAX)
    max_block_bytes: int
    min_alignment: int
    block_granularity: int
    pci_bus_id: str

    @classmethod
    def _from(cls, c: _lib.DeviceInfoC) -> "DeviceInfo":
        free = None if c.free_bytes == _lib.UNKNOWN_BYTES else int(c.free_bytes)
        return cls(backend_name(c.backend), int(c.index), c.name.decode(errors="replace"),
                   c.vendor.decode(errors="replace"), bytes(c.uuid), int(c.total_bytes), free,
                   int(c.max_block_bytes), int(c.min_alignment), int(c.block_granularity),
                   c.pci_bus_id.decode(errors="replace"))


@dataclass(frozen=True)
class AllocationInfo:
    """gpupart_allocation_info: where an allocation lives."""

    size: int
    offset: int
    block_size: int
    device_address: int
    native_block: int


@dataclass
class SimDesc:
    """gpupart_sim_desc: the simulated backend's knobs (0 = default, as in C)."""

    total_bytes: int = 0
    max_block_bytes: int = 0
    min_alignment: int = 0
    max_blocks: int = 0
    fail_block_alloc_at: int = 0
    host_backed: bool = False
    block_granularity: int = 0
    block_round_up: int = 0
    uuid: bytes = b""  # 16 bytes: the device stands for a real GPU in its ledger; b"" = none
    pci_bus_id: str = ""  # "dddd:bb:dd.f"; "" = none

    def _c(self) -> _lib.SimDescC:
        if self.uuid and len(self.uuid) != 16:
            raise InvalidArgument("SimDesc.uuid: 16 bytes, or b\"\" for none", -1)
        bus = _bytes(self.pci_bus_id, "SimDesc.pci_bus_id")
        if len(bus) >= 32:
            raise InvalidArgument("SimDesc.pci_bus_id: at most 31 bytes", -1)
        return _struct(_lib.SimDescC, "SimDesc", total_bytes=self.total_bytes, max_block_bytes=self.max_block_bytes,
                       min_alignment=self.min_alignment, max_blocks=self.max_blocks,
                       fail_block_alloc_at=self.fail_block_alloc_at, host_backed=int(self.host_backed),
                       block_granularity=self.block_granularity, block_round_up=self.block_round_up,
                       uuid=(ctypes.c_uint8 * 16)(*self.uuid) if self.uuid else (ctypes.c_uint8 * 16)(), pci_bus_id=bus)


class _Handle:
    """A C handle that becomes invalid once released."""

    _ptr: Optional[int] = None
    _what = "object"

    @property
    def handle(self) -> int:
        """The C pointer as an int; InvalidArgument once released."""
        if not self._ptr:
            raise InvalidArgument(f"gpupart {self._what} already released", -1)
        return self._ptr

    @property
    def closed(self) -> bool:
        """Whether the C object was released."""
        return not self._ptr

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an exception is on its way out: never mask it with a close failure
            self.close()
        except Exception:
            pass

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


# Room for any option's value (the longest are paths, under PATH_MAX).
_OPTION_BYTES = 8192


class Context(_Handle):
    """gpupart_context: configuration, loaded backends and open devices.

    config_text uses the configuration file's syntax and is applied after config_path
    (else $GPUPART_CONFIG); ignore_env=True reads no GPUPART_* variable and no file.
    log(level, message) receives the library's log lines when given.
    """

    _what = "context"

    def __init__(self, *, config_text: Optional[str] = None, config_path: Optional[str] = None,
                 ignore_env: bool = False, ledger_dir: Optional[str] = None,
                 log: Optional[Callable[[int, str], None]] = None, flags: int = 0) -> None:
        desc = _lib.ContextDesc()
        desc.flags = _integer("Context: flags", flags, _lib.c_u32) | (_lib.CONTEXT_IGNORE_ENV if ignore_env else 0)
        desc.config_path = _bytes(config_path, "Context: config_path")
        desc.config_text = _bytes(config_text, "Context: config_text")
        desc.ledger_dir = _bytes(ledger_dir, "Context: ledger_dir")
        self._log = None
        if log is not None:
            self._log = _lib.LOG_FN(lambda level, msg, user: log(level, msg.decode(errors="replace")))
            desc.log = self._log
        out = ctypes.c_void_p()
        check(_lib.lib().gpupart_context_create_sized(ctypes.byref(desc), ctypes.sizeof(desc), ctypes.byref(out)))
        self._ptr = out.value

    def enumerate(self, backend: BackendName = "auto") -> List[DeviceInfo]:
        """Every device the backend (AUTO = every backend present) sees."""
        lib, count = _lib.lib(), ctypes.c_uint32(0)
        size = ctypes.sizeof(_lib.DeviceInfoC)
        check(lib.gpupart_enumerate_sized(self.handle, backend_id(backend), None, size, ctypes.byref(count)))
        infos = (_lib.DeviceInfoC * max(count.value, 1))()
        check(lib.gpupart_enumerate_sized(self.handle, backend_id(backend), infos, size, ctypes.byref(count)))
        return [DeviceInfo._from(infos[i]) for i in range(count.value)]

    def option(self, backend: BackendName, index: int, name: str) -> str:
        """gpupart_context_option: the value option name (its INI key) takes for device index.

        As an open of that device in this context would resolve it (the variable over the
        file over the default, per-device entries included), in the option's own syntax
        ("true"/"false", bytes as a plain number, "none"); what only an open device decides
        (an orchestrator's share, the operator's ceilings) is not applied. backend is not
        "auto". InvalidArgument for an unknown backend or a name that is no such option.
        """
        what = "Context.option"
        index = _integer(what + ": index", index, _lib.c_u32)
        key = _bytes(name, what + ": name")
        if key is None:
            raise TypeError(what + ": name is None")
        out = ctypes.create_string_buffer(_OPTION_BYTES)
        check(_lib.lib().gpupart_context_option(self.handle, backend_id(backend), index, key, out, len(out)))
        return out.value.decode()

    def open_device(self, backend: BackendName = "auto", index: int = 0, *, memory_fraction: float = 0.0,
                    memory_limit: int = 0, headroom: int = 0, growth: Union[str, int] = "default",
                    granularity: int = 0, flags: int = 0, sim: Optional[SimDesc] = None,
                    backend_desc: Optional[ctypes.Structure] = None,
                    backend_desc_type: BackendName = "auto") -> "Device":
        """gpupart_device_open: 0 for a number means "configuration, else the default".

        sim configures the sim backend; backend_desc is another backend's ctypes struct
        (see gpupart.opencl), typed by backend_desc_type (AUTO = backend).
        """
        desc = _struct(_lib.DeviceDesc, "open_device", backend=backend_id(backend), index=index,
                       memory_fraction=memory_fraction, memory_limit=memory_limit, headroom=headroom,
                       growth=_growth(growth), granularity=granularity, flags=flags)
        keep = sim._c() if sim is not None else backend_desc
        if sim is not None:
            backend_desc_type = "sim"
        if keep is not None:
            desc.backend_desc = ctypes.cast(ctypes.pointer(keep), ctypes.c_void_p)
            desc.backend_desc_type = backend_id(backend_desc_type)
            desc.backend_desc_size = ctypes.sizeof(keep)
        out = ctypes.c_void_p()
        check(_lib.lib().gpupart_device_open_sized(self.handle, ctypes.byref(desc), ctypes.sizeof(desc),
                                                   ctypes.byref(out)))
        return Device(self, out.value)

    def close(self) -> None:
        """gpupart_context_destroy; Busy while devices are open. Idempotent."""
        if self._ptr:
            check(_lib.lib().gpupart_context_destroy(self._ptr))
            self._ptr = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass  # devices still open: the memory stays with the process


class Device(_Handle):
    """gpupart_device: one GPU opened through one backend, with this process's budget."""

    _what = "device"

    def __init__(self, context: Context, ptr: int) -> None:
        self.context = context
        self._ptr = ptr
        self._partitions: Dict[int, Partition] = {}
        self._callbacks: List[Any] = []  # reclaim callbacks the C side may still call

    @property
    def info(self) -> DeviceInfo:
        """gpupart_device_get_info (free_bytes queried anew)."""
        c = _lib.DeviceInfoC()
        check(_lib.lib().gpupart_device_get_info_sized(self.handle, ctypes.byref(c), ctypes.sizeof(c)))
        return DeviceInfo._from(c)

    @property
    def backend(self) -> str:
        """The backend's name, e.g. "sim" or "opencl"."""
        return self.info.backend

    @property
    def budget(self) -> int:
        """This process's budget on the device in bytes."""
        return int(_lib.lib().gpupart_device_budget(self.handle))

    @property
    def stats(self) -> Stats:
        """gpupart_device_get_stats: every partition together."""
        c = _lib.StatsC()
        check(_lib.lib().gpupart_device_get_stats_sized(self.handle, ctypes.byref(c), ctypes.sizeof(c)))
        return Stats._from(c)

    def _wrap(self, ptr: int) -> "Partition":
        if ptr not in self._partitions:
            self._partitions[ptr] = Partition(self, ptr)
        return self._partitions[ptr]

    def partition(self, name: Optional[str] = None, *, fraction: float = 0.0, limit: int = 0,
                  guarantee_fraction: float = 0.0, guarantee: int = 0, growth: Union[str, int] = "default",
                  initial_block: int = 0, max_block: int = 0, growth_factor: float = 0.0,
                  release_threshold: int = 0,
                  reclaim: Optional[Callable[["Partition", int], None]] = None) -> "Partition":
        """gpupart_partition_create (the configured partition of that name, if declared).

        reclaim(partition, bytes_wanted) is asked to free memory in the OOM sequence.
        """
        desc = _struct(_lib.PartitionDesc, "partition", name=_bytes(name, "partition: name"), fraction=fraction,
                       limit=limit, guarantee_fraction=guarantee_fraction, guarantee=guarantee,
                       growth=_growth(growth), initial_block=initial_block, max_block=max_block,
                       growth_factor=growth_factor, release_threshold=release_threshold)
        if reclaim is not None:
            desc.reclaim = self._reclaim_fn(reclaim)
        out = ctypes.c_void_p()
        check(_lib.lib().gpupart_partition_create_sized(self.handle, ctypes.byref(desc), ctypes.sizeof(desc),
                                                        ctypes.byref(out)))
        return self._wrap(out.value)

    def _reclaim_fn(self, reclaim: Callable[["Partition", int], None]) -> Any:
        def call(p: int, wanted: int, user: Any) -> int:
            try:
                reclaim(self._wrap(p), int(wanted))
            except Exception:  # an exception cannot cross into C; the allocation then fails as usual
                pass
            return 0

        fn = _lib.RECLAIM_FN(call)
        self._callbacks.append(fn)
        return fn

    def find(self, name: str) -> Optional["Partition"]:
        """gpupart_partition_find: the partition named name, or None."""
        ptr = _lib.lib().gpupart_partition_find(self.handle, _bytes(name, "find: name"))
        return self._wrap(ptr) if ptr else None

    @property
    def partitions(self) -> List["Partition"]:
        """Every partition, in creation (and configuration) order."""
        lib = _lib.lib()
        return [self._wrap(lib.gpupart_partition_at(self.handle, i))
                for i in range(lib.gpupart_partition_count(self.handle))]

    def check(self) -> None:
        """gpupart_device_check: Corrupt when an invariant does not hold."""
        check(_lib.lib().gpupart_device_check(self.handle))

    def close(self) -> None:
        """gpupart_device_close (destroys every partition); Busy while allocations live."""
        if self._ptr:
            check(_lib.lib().gpupart_device_close(self._ptr))
            self._ptr = None
            for p in self._partitions.values():
                p._ptr = None
            self._partitions.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Partition(_Handle):
    """gpupart_partition: a named share of a device with a limit, guarantee and arena."""

    _what = "partition"

    def __init__(self, device: Device, ptr: int) -> None:
        self.device = device
        self._ptr = ptr

    @property
    def name(self) -> str:
        """The partition's name."""
        return _lib.lib().gpupart_partition_name(self.handle).decode()

    @property
    def stats(self) -> Stats:
        """gpupart_partition_get_stats."""
        c = _lib.StatsC()
        check(_lib.lib().gpupart_partition_get_stats_sized(self.handle, ctypes.byref(c), ctypes.sizeof(c)))
        return Stats._from(c)

    @property
    def available(self) -> int:
        """gpupart_partition_available: the bytes it could still allocate now."""
        out = _lib.c_u64()
        check(_lib.lib().gpupart_partition_available(self.handle, ctypes.byref(out)))
        return out.value

    def alloc(self, size: int, alignment: int = 0, *, flags: int = 0, tag: int = 0) -> "Allocation":
        """gpupart_alloc_ex: LimitError or DeviceMemoryError when the memory is not there."""
        desc = _struct(_lib.AllocDesc, "alloc", size=size, alignment=alignment, flags=flags, tag=tag)
        out = ctypes.c_void_p()
        check(_lib.lib().gpupart_alloc_ex_sized(self.handle, ctypes.byref(desc), ctypes.sizeof(desc),
                                                ctypes.byref(out)))
        return Allocation(self, out.value)

    @property
    def chargeable(self) -> int:
        """gpupart_partition_chargeable: the bytes it could still charge now, to the byte."""
        out = _lib.c_u64()
        check(_lib.lib().gpupart_partition_chargeable(self.handle, ctypes.byref(out)))
        return out.value

    def charge(self, size: int) -> "Charge":
        """gpupart_partition_charge: size bytes accounted with no memory behind them (the
        caller's memory lives elsewhere); LimitError when the partition or budget refuses."""
        out = ctypes.c_void_p()
        check(_lib.lib().gpupart_partition_charge(self.handle, _integer("charge: size", size, _lib.c_u64),
                                                  ctypes.byref(out)))
        return Charge(self, out.value)

    def resize(self, new_limit: int) -> None:
        """gpupart_partition_resize."""
        check(_lib.lib().gpupart_partition_resize(self.handle, _integer("resize: new_limit", new_limit, _lib.c_u64)))

    def trim(self) -> None:
        """gpupart_partition_trim: return every empty cached block to the driver."""
        check(_lib.lib().gpupart_partition_trim(self.handle))

    def reset_peak(self) -> None:
        """gpupart_partition_reset_peak."""
        _lib.lib().gpupart_partition_reset_peak(self.handle)

    def close(self) -> None:
        """gpupart_partition_destroy; Busy while allocations live. Idempotent."""
        if self._ptr:
            check(_lib.lib().gpupart_partition_destroy(self._ptr))
            self.device._partitions.pop(self._ptr, None)
            self._ptr = None

    destroy = close


class Allocation(_Handle):
    """gpupart_allocation: device memory handed out by a partition."""

    _what = "allocation"

    def __init__(self, partition: Partition, ptr: int) -> None:
        self.partition = partition
        self._ptr = ptr

    @property
    def info(self) -> AllocationInfo:
        """gpupart_allocation_get_info."""
        c = _lib.AllocationInfoC()
        check(_lib.lib().gpupart_allocation_get_info_sized(self.handle, ctypes.byref(c), ctypes.sizeof(c)))
        return AllocationInfo(int(c.size), int(c.offset), int(c.block_size), int(c.device_address),
                              int(c.native_block or 0))

    @property
    def size(self) -> int:
        """Bytes, as requested."""
        return self.info.size

    def free(self) -> None:
        """gpupart_free. Idempotent in Python (a second free() does nothing)."""
        if self._ptr:
            ptr, self._ptr = self._ptr, None
            check(_lib.lib().gpupart_free(ptr))

    close = free

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:
            pass


class Charge(_Handle):
    """gpupart_charge: bytes accounted on a partition with no memory behind them."""

    _what = "charge"

    def __init__(self, partition: Partition, ptr: int) -> None:
        self.partition = partition
        self._ptr = ptr

    @property
    def size(self) -> int:
        """Bytes, as charged."""
        return int(_lib.lib().gpupart_charge_size(self.handle))

    def release(self) -> None:
        """gpupart_charge_release. Idempotent in Python (a second release() does nothing)."""
        if self._ptr:
            ptr, self._ptr = self._ptr, None
            check(_lib.lib().gpupart_charge_release(ptr))

    close = release

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass
