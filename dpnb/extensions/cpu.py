"""The CPU extension (``nnabla_ext.cpu``): NumPy arrays in host memory."""
from __future__ import annotations

from .. import host_memory
from ..context import Context, make_context


def context(type_config: str = "float", **kw) -> Context:
    """The CPU context; other keywords (``device_id``) are ignored, as nnabla ignores them."""
    return make_context("cpu", "", type_config)


def array_classes() -> list[str]:
    return ["CpuCachedArray", "CpuArray"]


def get_device_count() -> int:
    return 1


def get_devices() -> list[str]:
    return ["0"]


def device_synchronize(device: str = "0") -> None:
    """Nothing to wait for: NumPy computes synchronously."""


def synchronize(**kw) -> None:
    """Nothing to wait for: NumPy computes synchronously."""


def clear_memory_cache() -> None:
    """Hand the host memory that freed arrays left cached back to the operating system
    (``dpnb.host_memory``)."""
    host_memory.release()
