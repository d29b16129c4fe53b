"""Device helpers shared by the ``cuda`` and ``cudnn`` extensions, over CuPy.

Importing this module needs CuPy and a visible GPU; otherwise it raises
``ExtensionUnavailableError``, an ImportError."""
from __future__ import annotations

from ..context import require_cupy

cupy = require_cupy()


def array_classes() -> list[str]:
    return ["CudaCachedArray", "CudaArray"]


def get_device_count() -> int:
    return int(cupy.cuda.runtime.getDeviceCount())


def get_devices() -> list[str]:
    return [str(i) for i in range(get_device_count())]


def device_synchronize(device: str | int = "0") -> None:
    """Wait until every kernel queued on ``device`` has finished."""
    with cupy.cuda.Device(int(device)):
        cupy.cuda.Device().synchronize()


def synchronize(device_id: str | int = "0", **kw) -> None:
    device_synchronize(device_id)


def clear_memory_cache() -> None:
    """Give the blocks CuPy's memory pools keep for reuse back to the driver."""
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
