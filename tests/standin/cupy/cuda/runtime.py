"""``cupy.cuda.runtime``: the device count and the current device, per host thread as in
CUDA.  The count is the stand-in's setting: ``tests.standin.installed(device_count=...)``
in a test's own process, ``$CUPY_STANDIN_DEVICE_COUNT`` (``standin.environment``) in the
processes it starts."""
from __future__ import annotations

import os
import threading


class CUDARuntimeError(RuntimeError):
    """As ``cupy_backends.cuda.api.runtime.CUDARuntimeError``: ``status`` and a message
    ``"<name>: <description>"``."""

    def __init__(self, status: int, name: str, description: str):
        self.status = status
        super().__init__(f"{name}: {description}")

    def __reduce__(self):
        return (type(self), (self.status,) + tuple(str(self).split(": ", 1)))


cudaErrorInvalidDevice = 101
cudaErrorInvalidResourceHandle = 400
cudaErrorNotReady = 600

_device_count = int(os.environ.get("CUPY_STANDIN_DEVICE_COUNT", "1"))
_local = threading.local()


def set_device_count(count: int) -> None:
    """The stand-in's own knob (no CUDA counterpart): how many GPUs it pretends to have."""
    global _device_count
    _device_count = int(count)


def getDeviceCount() -> int:
    return _device_count


def _check(device: int) -> None:
    if not 0 <= device < _device_count:
        raise CUDARuntimeError(cudaErrorInvalidDevice, "cudaErrorInvalidDevice",
                               "invalid device ordinal")


def getDevice() -> int:
    if _device_count == 0:
        raise CUDARuntimeError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected")
    return getattr(_local, "device", 0)


def setDevice(device: int) -> None:
    _check(int(device))
    _local.device = int(device)


def getDeviceProperties(device: int) -> dict:
    """The few properties a report reads; the stand-in names itself and has no memory."""
    _check(int(device))
    return {"name": b"CuPy stand-in (NumPy)", "totalGlobalMem": 0, "major": 9, "minor": 0}


def deviceSynchronize() -> None:
    getDevice()


def runtimeGetVersion() -> int:
    return 12040


def driverGetVersion() -> int:
    return 12040
