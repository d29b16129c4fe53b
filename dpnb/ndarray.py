"""NdArray: a handle to the array behind a variable's data or gradient.

The handle stays put while the storage behind it may move: flat parameter
storage re-points it when it grows, and ``clear_buffer`` frees it."""
from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real
from types import ModuleType

import numpy as np

from . import host_memory
from .context import Context, array_module_of, get_current_context, to_module
from .errors import DpnbError, DpnbTypeError, DpnbValueError

_MODES = ("r", "w", "rw")


def as_shape(shape: int | Sequence[int], what: str = "a shape") -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (an int is a 1-d shape, as in nnabla);
    a size that is not a whole number is refused, where nnabla would truncate it."""
    dims = (shape,) if isinstance(shape, (Integral, Real)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise DpnbTypeError(f"{what} must be an int or a sequence of ints, got {shape!r}; "
                            "pass e.g. (2, 3)") from None
    for axis, size in enumerate(dims):
        if not isinstance(size, (Integral, Real)) or isinstance(size, (bool, np.bool_)) \
                or int(size) != size:
            raise DpnbTypeError(f"{what} must hold whole numbers, got {size!r} at axis {axis} "
                                f"of {shape!r}; pass ints (e.g. int(n) or n // 2)")
    dims = tuple(int(s) for s in dims)
    if any(s < 0 for s in dims):
        raise DpnbError(f"{what} must have non-negative sizes, got {dims}")
    return dims


def prefer_cached_array(prefer: bool) -> None:
    """nnabla's choice between its caching and non-caching array allocators.

    dpnb's arrays are NumPy's and CuPy's.  Host memory is cached as nnabla's
    ``CpuCachedArray`` caches it where the C library allows (``dpnb.host_memory``),
    from ``import dpnb`` on, as nnabla prefers cached arrays; ``False`` turns that off.
    CuPy's memory pool always caches."""
    if not isinstance(prefer, (bool, np.bool_)):
        raise DpnbError(f"prefer_cached_array takes True or False, got {prefer!r}")
    host_memory.cache(bool(prefer))


prefer_cached_array(True)


class NdArray:
    """One array of fixed shape and dtype on one device, allocated on first use.

    ``nn.NdArray(shape)`` makes one of the current context's device and float
    type, as in nnabla; the graph names its arrays through ``owner``."""

    __slots__ = ("_array", "_shape", "_size", "_dtype", "_xp", "_freed_by", "_cleared",
                 "_zeroing", "_pinned", "_child", "owner")

    def __init__(self, *shape: int | Sequence[int], dtype=None, xp: ModuleType | None = None,
                 owner: str = ""):
        """``NdArray(shape)`` or, as nnabla also takes it, ``NdArray(2, 3)``."""
        shape = shape[0] if len(shape) == 1 else shape
        if dtype is None or xp is None:
            ctx = get_current_context()
            dtype = ctx.dtype if dtype is None else dtype
            xp = ctx.xp if xp is None else xp
        self._shape = as_shape(shape)
        self._size = math.prod(self._shape)
        self._dtype = np.dtype(dtype)
        self._xp = xp
        self._array = None
        self._freed_by = ""
        self._cleared = False  # released by clear() or free(), for clear_called
        self._zeroing = False  # zero() called and the values not used since, for zeroing
        self._pinned = False
        self._child = False  # narrowed from another array's memory: its dtype is fixed
        self.owner = owner  # names the variable in error messages

    @classmethod
    def from_numpy_array(cls, nparr) -> "NdArray":
        """A new array holding a copy of ``nparr``, keeping its dtype."""
        xp = array_module_of(nparr) if hasattr(nparr, "shape") else np
        array = xp.array(nparr, copy=True)
        handle = cls(array.shape, dtype=array.dtype, xp=xp)
        handle.bind(array)
        return handle

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def size(self) -> int:
        return self._size

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def xp(self) -> ModuleType:
        return self._xp

    def size_from_axis(self, axis: int = -1) -> int:
        """The number of elements in the axes from ``axis`` on; the whole size for ``axis <= 0``."""
        return math.prod(self._shape[max(axis, 0):])

    @property
    def data(self):
        """The backing array; writable in place (``v.data[...] = x``)."""
        self._zeroing = False
        if self._array is None:
            if self._freed_by:
                raise DpnbError(
                    f"the array of {self.owner or 'this variable'} was freed by "
                    f"{self._freed_by}; run the pass without that flag, or mark the variable "
                    "persistent (v.persistent = True) to keep it")
            self._array = self._xp.zeros(self._shape, self._dtype)
        return self._array

    @data.setter
    def data(self, value) -> None:
        """Copy ``value`` into the backing array, broadcast to its shape and cast to its
        dtype, as nnabla's assignments to ``.d`` and ``.g`` do."""
        if isinstance(value, NdArray):
            value = value.data
        if isinstance(value, (Real, complex, np.number, np.bool_)):
            self.data[...] = value
            return
        value = to_module(self._numbers(value), self._xp)
        try:
            value = self._xp.broadcast_to(value, self._shape)
        except ValueError:
            raise DpnbValueError(
                f"cannot assign an array of shape {tuple(value.shape)} to {self.owner or 'an array'} "
                f"of shape {self._shape}: it does not broadcast; reshape the value, or create "
                "the variable with the new shape") from None
        self.data[...] = value

    def _numbers(self, value):
        """``value`` as an array of numbers in its own array module, or an error naming
        what it is."""
        xp = array_module_of(value) if hasattr(value, "shape") else np
        try:
            array = xp.asarray(value)
        except ValueError as e:  # a ragged list
            raise DpnbValueError(f"cannot assign {type(value).__name__} to "
                                 f"{self.owner or 'an array'}: it is not a rectangular array "
                                 f"of numbers ({e}); give a NumPy array of shape "
                                 f"{self._shape}") from None
        if array.dtype.kind not in "biufc":
            raise DpnbTypeError(f"cannot assign {value!r:.60} ({type(value).__name__}) to "
                                f"{self.owner or 'an array'}: expected numbers (an array, a "
                                "list of numbers or a scalar); convert it first")
        return array

    def get_data(self, mode: str = "rw", dtype=None):
        """The backing array for reading (``"r"``: read-only where the array module
        has the flag), writing (``"w"``) or both (``"rw"``); with ``dtype``, a copy
        in that type (the handle keeps its own)."""
        if mode not in _MODES:
            raise DpnbError(f"get_data: mode must be one of {_MODES}, got {mode!r}")
        zeroing = self._zeroing
        array = self.data
        if mode == "r":  # reading leaves the zeros requested, as nnabla's
            self._zeroing = zeroing
        if dtype is not None and np.dtype(dtype) != self._dtype:
            array = array.astype(dtype)
        if mode == "r" and self._xp is np:
            array = array.view()
            array.flags.writeable = False
        return array

    def cast(self, dtype, ctx: Context | None = None):
        """Change this array's dtype in place (values converted), and with ``ctx``
        its device; returns the array when no ``ctx`` is given, as in nnabla."""
        dtype = np.dtype(dtype)
        xp = self._xp if ctx is None else ctx.xp
        if dtype != self._dtype or xp is not self._xp:
            if self._pinned:
                raise DpnbError(
                    f"cannot cast {self.owner or 'this array'} to {dtype}: it is a view into "
                    "flat parameter storage, whose type is fixed; create the parameter in "
                    "a context of that type instead")
            if self._child:
                raise DpnbError(
                    f"cannot cast {self.owner or 'this array'} from {self._dtype} to {dtype}: "
                    "it is narrowed from another array, whose memory holds its values in that "
                    "type (nnabla: cast of child-arrays is not permitted); cast the array it "
                    "was narrowed from before narrowing")
            array = to_module(self.data, xp).astype(dtype)
            self._dtype, self._xp = dtype, xp
            self.bind(array)
        return self.data if ctx is None else None

    def copy_from(self, arr: "NdArray", use_current_context: bool = True) -> "NdArray":
        """Copy the values of ``arr`` (same shape) into this array, cast to its type; returns self.
        The copy happens on this array's device and in its type, so the context does not matter."""
        if not isinstance(arr, NdArray):
            raise DpnbError(f"copy_from expects an nn.NdArray, got {type(arr).__name__}; "
                            "assign arrays with `a.data = value`")
        self.data = arr
        return self

    def narrow(self, dim: int, start: int, length: int) -> "NdArray":
        """Rows ``start`` to ``start + length`` (axis 0, the only one nnabla narrows) as an
        NdArray over the same memory."""
        if dim != 0:
            raise DpnbError(f"narrow: only axis 0 can be narrowed, as in nnabla; got dim={dim}")
        if not (0 <= start and 0 <= length and start + length <= (self._shape or (0,))[0]):
            raise DpnbError(f"narrow: rows {start} to {start + length} are outside axis 0 of "
                            f"shape {self._shape}")
        part = NdArray((length, *self._shape[1:]), dtype=self._dtype, xp=self._xp,
                       owner=f"rows {start}:{start + length} of {self.owner or 'an array'}")
        part.bind(self.data[start:start + length])
        part._child = True
        return part

    def view(self, shape: Sequence[int]) -> "NdArray":
        """An NdArray of ``shape`` (the same number of elements) over the same memory."""
        shape = as_shape(shape)
        if math.prod(shape) != self._size:
            raise DpnbError(f"view: shape {shape} holds {math.prod(shape)} elements, but "
                            f"{self.owner or 'this array'} of shape {self._shape} has {self._size}")
        viewed = NdArray(shape, dtype=self._dtype, xp=self._xp,
                         owner=f"a view of {self.owner or 'an array'}")
        viewed.bind(self.data.reshape(shape))
        viewed._child = self._child
        return viewed

    def bind(self, array) -> None:
        """Point this handle at ``array`` (no copy): used by the graph and flat storage."""
        self._array = array
        self._freed_by = ""
        self._zeroing = False

    def take(self, array, producer: object) -> None:
        """Bind a function's result (no copy where the type agrees; ``producer``
        names the function in errors): it must have this shape; it is cast to this
        dtype, and a NumPy scalar becomes a 0-d array.  A view into flat storage (a
        parameter a function computes into) is written in place instead."""
        if array.shape != self._shape:
            raise DpnbError(f"{producer} computed shape {tuple(array.shape)} but declared "
                            f"{self._shape}; this is a bug in dpnb, please report it")
        if isinstance(array, np.generic):  # NumPy reductions return scalars
            array = np.asarray(array)
        if self._pinned and self._array is not None:
            self._array[...] = array
            self._zeroing = False
            return
        self._array = array if array.dtype == self._dtype else array.astype(self._dtype)
        self._freed_by = ""
        self._zeroing = False

    def accumulate(self, array) -> None:
        """Add ``array`` into this array (a copy of it if none is allocated yet):
        how leaf gradients gather across uses and backward calls."""
        self._zeroing = False
        if self._array is None:
            self._array = array.astype(self._dtype, copy=True).reshape(self._shape)
            self._freed_by = ""
        else:
            self._array[...] += array

    def pin(self) -> None:
        """Fix this handle's shape and dtype: it is a view into a shared buffer (flat storage)."""
        self._pinned = True

    @property
    def pinned(self) -> bool:
        """Whether this handle is a view into flat storage (its shape and dtype fixed)."""
        return self._pinned

    def reset_shape(self, shape: Sequence[int], force: bool = False) -> None:
        """Give this array a new shape: the same values if the size is unchanged,
        else (only with ``force``) a new, zero-filled array."""
        shape = as_shape(shape)
        size = math.prod(shape)
        if size == self._size:
            if self._array is not None:
                self._array = self._array.reshape(shape)
        elif not force:
            raise DpnbError(
                f"cannot reset the shape of {self.owner or 'this array'} from {self._shape} "
                f"({self._size} elements) to {shape} ({size} elements) without force=True, "
                "which drops its values")
        elif self._pinned:
            raise DpnbError(
                f"cannot resize {self.owner or 'this array'} from {self._shape} to {shape}: it "
                "is a view into flat parameter storage; create a new parameter instead")
        else:
            self._array = None
            self._cleared = False
        self._shape, self._size = shape, size

    def clear(self) -> None:
        """Release the backing array, as nnabla's ``clear``; the next use allocates a new one."""
        self._array = None
        self._freed_by = ""
        self._cleared = True

    def free(self, by: str) -> None:
        """Release the backing array; reading it afterwards is an error naming ``by``,
        the graph pass that freed it (``forward(clear_buffer=True)`` ...)."""
        self._array = None
        self._freed_by = by
        self._cleared = True

    @property
    def freed_by(self) -> str:
        """The graph pass that freed the array, while it stays freed ("" otherwise)."""
        return self._freed_by if self._array is None else ""

    @property
    def clear_called(self) -> bool:
        """Whether the array was released (``clear``, or a graph pass freeing it) and has not
        been allocated since, as nnabla's ``clear_called``."""
        return self._cleared and self._array is None

    @property
    def allocated(self) -> bool:
        return self._array is not None

    def zero(self) -> None:
        """Set every element to 0; ``zeroing`` says so until the values are next used."""
        self.fill(0)
        self._zeroing = True

    @property
    def zeroing(self) -> bool:
        """Whether ``zero()`` was the last thing done to the values (reading them with
        ``get_data("r")`` aside), as nnabla's flag."""
        return self._zeroing

    def fill(self, value: float) -> None:
        """Set every element to ``value``."""
        self.data.fill(value)

    def __pos__(self) -> "NdArray":
        return self

    def __repr__(self) -> str:
        return f"<NdArray({self._shape}) dtype={self._dtype}>"
