"""Loading libgpupart and declaring its C API for ctypes.

This module is the only place that knows the C layout: the structs below mirror
``include/gpupart.h`` (Core 0.2, the extensible-struct ABI) field for field, and every
function that takes or fills a struct is called through its exported ``*_sized`` twin with
``ctypes.sizeof`` of the Python-side struct, so a newer library keeps accepting this
binding (its missing tail is defaults) and an older one refuses it with a clear message.

The library is found, in order, at ``$GPUPART_PYTHON_LIBRARY`` (a path to the .so), in the build
folder of the repository this package was installed from (recorded at install time in
``_paths.py``) or that it sits in, and on the system library path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import List, Optional

c_size_t = ctypes.c_size_t
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_int = ctypes.c_int
c_double = ctypes.c_double
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
P = ctypes.POINTER

# gpupart_backend
BACKEND_AUTO, BACKEND_SIM, BACKEND_OPENCL, BACKEND_VULKAN, BACKEND_CUDA = range(5)
CONTEXT_IGNORE_ENV = 0x1
CONTEXT_NO_TRACE = 0x2
DEVICE_SHARED = 0x1
ALLOC_NO_RECLAIM = 0x1
OPENCL_NO_SVM = 0x1
GROWTH_DEFAULT, GROWTH_ON, GROWTH_OFF = 0, 1, 2
UNKNOWN_BYTES = 2**64 - 1  # UINT64_MAX: a figure the backend cannot tell (gpupart_device_info.free_bytes)

LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)
HOST_ALLOC_FN = ctypes.CFUNCTYPE(c_void_p, c_size_t, c_void_p)
HOST_FREE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
RECLAIM_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_u64, c_void_p)


class ContextDesc(ctypes.Structure):
    """gpupart_context_desc."""

    _fields_ = [
        ("flags", c_u32),
        ("config_path", c_char_p),
        ("config_text", c_char_p),
        ("ledger_dir", c_char_p),
        ("log", LOG_FN),
        ("log_user", c_void_p),
        ("host_alloc", HOST_ALLOC_FN),
        ("host_free", HOST_FREE_FN),
        ("host_user", c_void_p),
    ]


class DeviceInfoC(ctypes.Structure):
    """gpupart_device_info."""

    _fields_ = [
        ("backend", c_int),
        ("index", c_u32),
        ("name", ctypes.c_char * 256),
        ("vendor", ctypes.c_char * 64),
        ("uuid", ctypes.c_uint8 * 16),
        ("total_bytes", c_u64),
        ("free_bytes", c_u64),
        ("max_block_bytes", c_u64),
        ("min_alignment", c_u64),
        ("block_granularity", c_u64),
        ("pci_bus_id", ctypes.c_char * 32),
    ]


class DeviceDesc(ctypes.Structure):
    """gpupart_device_desc."""

    _fields_ = [
        ("backend", c_int),
        ("index", c_u32),
        ("memory_fraction", c_double),
        ("memory_limit", c_u64),
        ("headroom", c_u64),
        ("growth", c_int),
        ("granularity", c_u64),
        ("backend_desc", c_void_p),
        ("flags", c_u32),
        ("backend_desc_type", c_int),
        ("backend_desc_size", c_u32),
    ]


class SimDescC(ctypes.Structure):
    """gpupart_sim_desc."""

    _fields_ = [
        ("total_bytes", c_u64),
        ("max_block_bytes", c_u64),
        ("min_alignment", c_u64),
        ("max_blocks", c_u32),
        ("fail_block_alloc_at", c_u32),
        ("host_backed", c_int),
        ("block_granularity", c_u64),
        ("block_round_up", c_u64),
        ("uuid", ctypes.c_uint8 * 16),
        ("pci_bus_id", ctypes.c_char * 32),
        ("name", ctypes.c_char * 256),
        ("vm_granule", c_u64),
        ("no_vm", c_int),
    ]


class OpenCLDescC(ctypes.Structure):
    """gpupart_opencl_desc (cl_context, cl_device_id, flags)."""

    _fields_ = [("context", c_void_p), ("device", c_void_p), ("flags", c_u32)]


class CudaDescC(ctypes.Structure):
    """gpupart_cuda_desc (CUcontext)."""

    _fields_ = [("context", c_void_p)]


class PartitionDesc(ctypes.Structure):
    """gpupart_partition_desc."""

    _fields_ = [
        ("name", c_char_p),
        ("fraction", c_double),
        ("limit", c_u64),
        ("guarantee_fraction", c_double),
        ("guarantee", c_u64),
        ("growth", c_int),
        ("initial_block", c_u64),
        ("max_block", c_u64),
        ("growth_factor", c_double),
        ("release_threshold", c_u64),
        ("reclaim", RECLAIM_FN),
        ("reclaim_user", c_void_p),
        ("flags", c_u32),  # since 0.3: GPUPART_PARTITION_*; the package leaves it 0 (thread-safe; expandable as the device's option says)
    ]


class AllocDesc(ctypes.Structure):
    """gpupart_alloc_desc."""

    _fields_ = [("size", c_u64), ("alignment", c_u64), ("flags", c_u32), ("tag", c_u64)]


class AllocationInfoC(ctypes.Structure):
    """gpupart_allocation_info."""

    _fields_ = [
        ("partition", c_void_p),
        ("size", c_u64),
        ("offset", c_u64),
        ("block_size", c_u64),
        ("device_address", c_u64),
        ("native_block", c_void_p),
    ]


STATS_FIELDS = (
    "limit guarantee in_use peak_in_use reserved peak_reserved live_allocations "
    "total_allocations total_frees driver_allocs driver_frees failed_allocations "
    "largest_free double_frees"
).split()


class StatsC(ctypes.Structure):
    """gpupart_stats."""

    _fields_ = [(name, c_u64) for name in STATS_FIELDS]


# name: (restype, argtypes); optional ones (backend interop) are bound when present.
_PROTOTYPES = {
    "gpupart_result_name": (c_char_p, [c_int]),
    "gpupart_result_str": (c_char_p, [c_int]),
    "gpupart_last_error": (c_char_p, []),
    "gpupart_last_native_error": (c_i64, []),
    "gpupart_version_string": (c_char_p, []),
    "gpupart_version": (c_u32, []),
    "gpupart_backend_name": (c_char_p, [c_int]),
    "gpupart_context_create_sized": (c_int, [P(ContextDesc), c_size_t, P(c_void_p)]),
    "gpupart_context_destroy": (c_int, [c_void_p]),
    "gpupart_context_option": (c_int, [c_void_p, c_int, c_u32, c_char_p, c_char_p, c_size_t]),
    "gpupart_enumerate_sized": (c_int, [c_void_p, c_int, c_void_p, c_size_t, P(c_u32)]),
    "gpupart_device_open_sized": (c_int, [c_void_p, P(DeviceDesc), c_size_t, P(c_void_p)]),
    "gpupart_device_close": (c_int, [c_void_p]),
    "gpupart_device_get_info_sized": (c_int, [c_void_p, P(DeviceInfoC), c_size_t]),
    "gpupart_device_budget": (c_u64, [c_void_p]),
    "gpupart_partition_create_sized": (c_int, [c_void_p, P(PartitionDesc), c_size_t, P(c_void_p)]),
    "gpupart_partition_destroy": (c_int, [c_void_p]),
    "gpupart_partition_find": (c_void_p, [c_void_p, c_char_p]),
    "gpupart_partition_count": (c_u32, [c_void_p]),
    "gpupart_partition_at": (c_void_p, [c_void_p, c_u32]),
    "gpupart_partition_name": (c_char_p, [c_void_p]),
    "gpupart_partition_resize": (c_int, [c_void_p, c_u64]),
    "gpupart_partition_trim": (c_int, [c_void_p]),
    "gpupart_alloc_ex_sized": (c_int, [c_void_p, P(AllocDesc), c_size_t, P(c_void_p)]),
    "gpupart_free": (c_int, [c_void_p]),
    "gpupart_allocation_get_info_sized": (c_int, [c_void_p, P(AllocationInfoC), c_size_t]),
    "gpupart_partition_get_stats_sized": (c_int, [c_void_p, P(StatsC), c_size_t]),
    "gpupart_partition_available": (c_int, [c_void_p, P(c_u64)]),
    "gpupart_partition_chargeable": (c_int, [c_void_p, P(c_u64)]),
    "gpupart_partition_charge": (c_int, [c_void_p, c_u64, P(c_void_p)]),
    "gpupart_charge_release": (c_int, [c_void_p]),
    "gpupart_charge_size": (c_u64, [c_void_p]),
    "gpupart_device_get_stats_sized": (c_int, [c_void_p, P(StatsC), c_size_t]),
    "gpupart_partition_reset_peak": (None, [c_void_p]),
    "gpupart_device_check": (c_int, [c_void_p]),
}
_OPTIONAL = {
    "gpupart_opencl_context": (c_void_p, [c_void_p]),
    "gpupart_opencl_device": (c_void_p, [c_void_p]),
    "gpupart_opencl_buffer": (c_void_p, [c_void_p]),
    "gpupart_cuda_context": (c_void_p, [c_void_p]),
    "gpupart_cuda_ptr": (c_u64, [c_void_p]),
}


def _recorded_build_dirs() -> List[Path]:
    """Build folders to search: the one recorded at install time, then this checkout's."""
    dirs: List[Path] = []
    try:
        from . import _paths  # written by setup.py at install time

        dirs.append(Path(_paths.BUILD_DIR))
    except ImportError:
        pass
    dirs.append(Path(__file__).resolve().parent.parent.parent / "build")
    return dirs


def candidates() -> List[str]:
    """Every path or name tried for libgpupart, in order."""
    env = os.environ.get("GPUPART_PYTHON_LIBRARY")
    if env:
        return [env]  # an explicit choice is never silently replaced by another library
    found = [str(d / "libgpupart.so") for d in _recorded_build_dirs() if (d / "libgpupart.so").exists()]
    system = ctypes.util.find_library("gpupart")
    return found + ([system] if system else []) + ["libgpupart.so.0"]


def _bind(lib: ctypes.CDLL, table: dict, required: bool) -> None:
    for name, (restype, argtypes) in table.items():
        fn = getattr(lib, name, None) if not required else getattr(lib, name)
        if fn is None:
            continue
        fn.restype = restype
        fn.argtypes = argtypes


def load() -> ctypes.CDLL:
    """Loads and binds libgpupart; OSError naming every place tried when none works."""
    errors = []
    for path in candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        try:
            _bind(lib, _PROTOTYPES, True)
        except AttributeError as e:
            errors.append(f"{path}: not a gpupart 0.2 library ({e})")
            continue
        _bind(lib, _OPTIONAL, False)
        lib._gpupart_path = path  # type: ignore[attr-defined]
        return lib
    raise OSError(
        "gpupart: libgpupart.so not found or not usable; build it (./scripts/run) or set "
        "GPUPART_PYTHON_LIBRARY to its path. Tried:\n  " + "\n  ".join(errors)
    )


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = load()
    return _lib


def has(name: str) -> bool:
    """Whether the loaded library exports name (e.g. a backend's interop call)."""
    return getattr(lib(), name, None) is not None
