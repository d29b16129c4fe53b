"""NdArray: a handle to the array behind a variable's data or gradient.

The handle stays put while the storage behind it may move: flat parameter
storage re-points it when it grows, and ``clear_buffer`` frees it."""
from __future__ import annotations

from types import ModuleType

import numpy as np

from .context import array_module_of, to_module
from .errors import DpnbError


class NdArray:
    """One array of fixed shape and dtype on one device, allocated on first use."""

    __slots__ = ("_array", "_shape", "_dtype", "_xp", "_freed", "owner")

    def __init__(self, shape: tuple[int, ...], dtype, xp: ModuleType, array=None, owner: str = ""):
        self._shape = tuple(int(s) for s in shape)
        self._dtype = np.dtype(dtype)
        self._xp = xp
        self._array = array
        self._freed = False
        self.owner = owner  # names the variable in error messages

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def xp(self) -> ModuleType:
        return self._xp

    @property
    def data(self):
        """The backing array; writable in place (``v.data[...] = x``)."""
        if self._array is None:
            if self._freed:
                raise DpnbError(
                    f"the array of {self.owner or 'this variable'} was freed by "
                    "clear_buffer=True; run forward/backward without clear_buffer, or "
                    "mark the variable persistent (v.persistent = True) to keep it")
            self._array = self._xp.zeros(self._shape, self._dtype)
        return self._array

    @data.setter
    def data(self, value) -> None:
        """Copy ``value`` into the backing array, casting to its dtype."""
        if isinstance(value, NdArray):
            value = value.data
        if np.isscalar(value) or getattr(value, "ndim", None) == 0:
            self.data[...] = value
            return
        value_xp = array_module_of(value) if hasattr(value, "shape") else np
        value = to_module(value_xp.asarray(value), self._xp)
        if tuple(value.shape) != self._shape:
            raise DpnbError(
                f"cannot assign an array of shape {tuple(value.shape)} to {self.owner or 'an array'} "
                f"of shape {self._shape}; reshape the value, or create the variable with "
                "the new shape")
        self.data[...] = value

    def bind(self, array) -> None:
        """Point this handle at ``array`` (no copy): used by the graph and flat storage."""
        self._array = array
        self._freed = False

    def free(self) -> None:
        """Release the backing array; reading it afterwards is an error."""
        self._array = None
        self._freed = True

    @property
    def allocated(self) -> bool:
        return self._array is not None

    def zero(self) -> None:
        self.fill(0)

    def fill(self, value: float) -> None:
        self.data.fill(value)

    def __repr__(self) -> str:
        return f"<NdArray shape={self._shape} dtype={self._dtype}>"
