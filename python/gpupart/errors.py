"""gpupart's errors as Python exceptions: one class per gpupart_result, all under Error.

Every failing call raises the class of its result code, carrying the library's
thread-local message (gpupart_last_error), the result's name (``"GPUPART_ELIMIT"``) and
code, and the driver's native error code where there was one. The memory errors also
derive from MemoryError and EINVAL from ValueError, so generic handlers catch them.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

from . import _lib


class Error(Exception):
    """A gpupart call failed; ``message`` is gpupart_last_error() at the time."""

    code: int = 0
    name: str = "GPUPART_OK"

    def __init__(self, message: str, code: Optional[int] = None, native_error: int = 0) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.native_error = native_error

    def __str__(self) -> str:
        return f"{self.message} ({self.name})"


class InvalidArgument(Error, ValueError):
    """GPUPART_EINVAL: an invalid argument, a freed handle or a double free."""

    code, name = -1, "GPUPART_EINVAL"


class OutOfHostMemory(Error, MemoryError):
    """GPUPART_ENOMEM: out of host memory."""

    code, name = -2, "GPUPART_ENOMEM"


class DeviceMemoryError(Error, MemoryError):
    """GPUPART_EDEVMEM: the driver refused device memory."""

    code, name = -3, "GPUPART_EDEVMEM"


class LimitError(Error, MemoryError):
    """GPUPART_ELIMIT: the partition's limit or the device's budget was reached."""

    code, name = -4, "GPUPART_ELIMIT"


class NoBackend(Error):
    """GPUPART_ENOBACKEND: the backend is not built or its driver library is missing."""

    code, name = -5, "GPUPART_ENOBACKEND"


class NoDevice(Error):
    """GPUPART_ENODEV: no such device."""

    code, name = -6, "GPUPART_ENODEV"


class BackendError(Error):
    """GPUPART_EBACKEND: a driver call failed (see native_error)."""

    code, name = -7, "GPUPART_EBACKEND"


class NotSupported(Error):
    """GPUPART_ENOTSUP: not supported by this backend."""

    code, name = -8, "GPUPART_ENOTSUP"


class ConfigError(Error):
    """GPUPART_ECONFIG: invalid configuration (file, text or GPUPART_* variable)."""

    code, name = -9, "GPUPART_ECONFIG"


class Busy(Error):
    """GPUPART_EBUSY: the object is still in use (live allocations, open devices)."""

    code, name = -10, "GPUPART_EBUSY"


class Exists(Error):
    """GPUPART_EEXIST: a partition with that name exists."""

    code, name = -11, "GPUPART_EEXIST"


class Corrupt(Error):
    """GPUPART_ECORRUPT: an invariant check failed."""

    code, name = -12, "GPUPART_ECORRUPT"


BY_CODE: Dict[int, Type[Error]] = {
    cls.code: cls
    for cls in (InvalidArgument, OutOfHostMemory, DeviceMemoryError, LimitError, NoBackend, NoDevice,
                BackendError, NotSupported, ConfigError, Busy, Exists, Corrupt)
}


def last_error() -> str:
    """gpupart_last_error(): the message of this thread's last failed gpupart call."""
    return (_lib.lib().gpupart_last_error() or b"").decode("utf-8", "replace")


def error_for(code: int, fallback: str = "") -> Error:
    """The exception for result code, with this thread's last message."""
    lib = _lib.lib()
    message = last_error() or fallback or (lib.gpupart_result_str(code) or b"").decode()
    cls = BY_CODE.get(code)
    native = int(lib.gpupart_last_native_error())
    if cls is None:
        name = (lib.gpupart_result_name(code) or b"?").decode()
        err = Error(message, code, native)
        err.name = name
        return err
    return cls(message, code, native)


def check(code: int) -> None:
    """Raises the exception for code unless it is GPUPART_OK."""
    if code != 0:
        raise error_for(code)
