"""The CUDA extension (``nnabla_ext.cuda``): CuPy arrays on a GPU."""
from __future__ import annotations

from ..context import Context, make_context
from .gpu import (array_classes, clear_memory_cache, device_synchronize, get_device_count,
                  get_devices, synchronize)

__all__ = ["array_classes", "clear_memory_cache", "context", "device_synchronize",
           "get_device_count", "get_devices", "synchronize"]


def context(device_id: str | int = "0", type_config: str = "float", **kw) -> Context:
    """The CUDA context on GPU ``device_id``."""
    return make_context("cuda", device_id, type_config)
