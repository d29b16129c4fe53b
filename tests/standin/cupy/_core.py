"""The stand-in's array type and the wrapping of NumPy's functions (see ``cupy/__init__``)."""
from __future__ import annotations

import functools
import inspect

import numpy

from .cuda import runtime as _runtime

IMPLICIT_MESSAGE = ("Implicit conversion to a NumPy array is not allowed. "
                    "Please use `.get()` to construct a NumPy array explicitly.")


def _unsupported(value):
    return TypeError(f"Unsupported type {type(value)}")


def unwrap(value):
    """A stand-in argument as the NumPy data behind it; a NumPy array refused as CuPy's
    kernels refuse it (no implicit host-to-device copy); sequences unwrapped item by item."""
    if isinstance(value, ndarray):
        return value._array
    if isinstance(value, numpy.ndarray):
        raise _unsupported(value)
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v) for v in value)
    return value


def rewrap(result, originals: dict):
    """NumPy results as stand-in arrays: arrays wrapped (an ``out=`` array given back as
    the caller's object), NumPy scalars as 0-d arrays, as CuPy returns them."""
    if isinstance(result, numpy.ndarray):
        original = originals.get(id(result))
        return original if original is not None else ndarray._wrap(result)
    if isinstance(result, numpy.generic):
        return ndarray._wrap(numpy.asarray(result))
    if isinstance(result, tuple) and type(result) is not tuple:  # namedtuple (slogdet)
        return type(result)(*(rewrap(r, originals) for r in result))
    if isinstance(result, (list, tuple)):
        return type(result)(rewrap(r, originals) for r in result)
    return result


def _originals(args, kwargs) -> dict:
    found = {}

    def visit(v):
        if isinstance(v, ndarray):
            found[id(v._array)] = v
        elif isinstance(v, (list, tuple)):
            for item in v:
                visit(item)
    visit(args)
    visit(tuple(kwargs.values()))
    return found


def call(np_func, args, kwargs):
    originals = _originals(args, kwargs)
    result = np_func(*unwrap(tuple(args)), **{k: unwrap(v) for k, v in kwargs.items()})
    return rewrap(result, originals)


def function(np_func, name: str | None = None, allowed: tuple | None = None, signature=None):
    """NumPy's ``np_func`` as a stand-in function; ``allowed`` names the only keywords
    CuPy's version takes (others raise as CuPy does); ``signature`` is CuPy's, where it
    differs from NumPy's, bound before the call so that NumPy-only arguments fail."""
    name = name or np_func.__name__

    @functools.wraps(np_func)
    def wrapper(*args, **kwargs):
        if allowed is not None:
            unknown = set(kwargs) - set(allowed)
            if unknown:
                raise TypeError(f"{name}() got an unexpected keyword argument "
                                f"{sorted(unknown)[0]!r}")
        if signature is not None:
            signature.bind(*args, **kwargs)
        return call(np_func, args, kwargs)

    wrapper.__module__ = "cupy"
    wrapper.__qualname__ = wrapper.__name__ = name
    if signature is not None:
        wrapper.__signature__ = signature
    return wrapper


# CuPy's ufunc methods (cupy/_core/_kernel.pyx): ``at`` for the ops its scatter kernels
# have, ``reduce`` / ``accumulate`` for add and multiply, ``reduceat`` for add.
_AT = {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"}
_REDUCE = {"add", "multiply"}


class ufunc:
    """A NumPy ufunc on stand-in arrays: ``out`` a stand-in array, NumPy arrays refused."""

    def __init__(self, np_ufunc):
        self._ufunc = np_ufunc
        self.__name__ = np_ufunc.__name__
        self.name = "cupy_" + np_ufunc.__name__
        self.nin, self.nout, self.nargs = np_ufunc.nin, np_ufunc.nout, np_ufunc.nargs

    def __repr__(self):
        return f"<ufunc '{self.name}'>"

    def __call__(self, *args, out=None, dtype=None, casting="same_kind", **kwargs):
        if kwargs:
            raise TypeError(f"Wrong arguments {kwargs}")
        if len(args) != self.nin:
            if len(args) == self.nin + 1 and out is None:  # positional out, as CuPy takes
                args, out = args[:-1], args[-1]
            else:
                raise TypeError(f"Wrong number of arguments for {self.name!r}")
        for a in args:
            if not isinstance(a, ndarray) and not _is_scalar(a):
                raise _unsupported(a)
        kw = {"casting": casting}
        if dtype is not None:
            kw["dtype"] = dtype
        if out is not None:
            if not isinstance(out, ndarray):
                raise TypeError("Output arguments must be cupy.ndarray")
            kw["out"] = out
        return call(self._ufunc, args, kw)

    def at(self, a, indices, b=None):
        if self.__name__ not in _AT:
            raise NotImplementedError(f"`{self.name}.at` is not supported yet")
        if not isinstance(a, ndarray):
            raise TypeError(f"Argument 'self' has incorrect type (expected cupy.ndarray, "
                            f"got {type(a).__name__})")
        self._ufunc.at(a._array, _index(indices), unwrap(b))

    def reduce(self, array, axis=0, dtype=None, out=None, keepdims=False):
        if self.__name__ not in _REDUCE:
            raise NotImplementedError(f"`{self.name}.reduce` is not supported yet")
        return call(self._ufunc.reduce, (array,), dict(axis=axis, dtype=dtype, out=out,
                                                       keepdims=keepdims))

    def accumulate(self, array, axis=0, dtype=None, out=None):
        if self.__name__ not in _REDUCE:
            raise NotImplementedError(f"`{self.name}.accumulate` is not supported yet")
        return call(self._ufunc.accumulate, (array,), dict(axis=axis, dtype=dtype, out=out))

    def reduceat(self, array, indices, axis=0, dtype=None, out=None):
        if self.__name__ != "add":
            raise NotImplementedError(f"`{self.name}.reduceat` is not supported yet")
        if not isinstance(array, ndarray):
            raise _unsupported(array)
        return call(self._ufunc.reduceat, (array, indices),
                    dict(axis=axis, dtype=dtype, out=out))

    def outer(self, A, B, **kwargs):
        return call(self._ufunc.outer, (A, B), kwargs)


def _is_scalar(value) -> bool:
    return isinstance(value, (bool, int, float, complex, numpy.generic))


def _index(key):
    """An index: stand-in arrays unwrapped; host lists and NumPy arrays accepted, as CuPy
    copies them to the device (``_prepare_slice_list``)."""
    if isinstance(key, ndarray):
        return key._array
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    return key


class MemoryPointer:
    """``ndarray.data``: the address of the first element and its device."""

    def __init__(self, array: numpy.ndarray, device_id: int):
        self.ptr = array.__array_interface__["data"][0]
        self.device_id = device_id

    @property
    def device(self):
        from .cuda import Device
        return Device(self.device_id)

    def __int__(self):
        return self.ptr


class ndarray:
    """The stand-in's array: NumPy data that only ``.get()``, ``cupy.asnumpy`` and
    ``.item()`` / ``.tolist()`` / scalar conversions bring to the host."""

    __slots__ = ("_array", "_device_id", "__weakref__")
    __array_priority__ = 100
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("the stand-in builds arrays from shape and dtype only")
        self._array = numpy.empty(shape, dtype, order=order)
        self._device_id = _runtime.getDevice()

    @classmethod
    def _wrap(cls, array: numpy.ndarray, device_id: int | None = None) -> "ndarray":
        self = object.__new__(cls)
        self._array = array
        self._device_id = _runtime.getDevice() if device_id is None else device_id
        return self

    # -- conversions CuPy refuses or makes explicit --------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError(IMPLICIT_MESSAGE)

    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is not None:
            if not isinstance(out, numpy.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained from cupy.ndarray")
            if out.dtype != self.dtype:
                raise TypeError(f"{out.dtype} array cannot be obtained from {self.dtype} array")
            if out.shape != self.shape:
                raise ValueError(f"Shape mismatch. Expected shape: {self.shape}, "
                                 f"actual shape: {out.shape}")
            numpy.copyto(out, self._array)
            return out
        return numpy.array(self._array, order=order, copy=True)

    def set(self, arr, stream=None):
        if not isinstance(arr, numpy.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if self.shape != arr.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        numpy.copyto(self._array, arr)

    def item(self, *args):
        return self._array.item(*args)

    def tolist(self):
        return self._array.tolist()

    def __bool__(self):
        return bool(self._array)

    def __int__(self):
        return int(self.get())

    def __float__(self):
        return float(self.get())

    def __complex__(self):
        return complex(self.get())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self):
        return repr(self._array)

    def __str__(self):
        return str(self._array)

    def __format__(self, spec):
        return format(self._array, spec) if self.ndim == 0 else str(self._array)

    def __reduce__(self):
        return (_rebuild, (self.get(),))

    # -- NumPy's protocols, as cupy/_core/core.pyx implements them ------------------
    def __array_ufunc__(self, np_ufunc, method, *inputs, **kwargs):
        import cupy
        inout = inputs
        if "out" in kwargs:
            out = kwargs["out"]
            if len(out) != 1:
                raise ValueError("The 'out' parameter must have exactly one array value")
            inout += out
            kwargs["out"] = out[0]
        if method not in ("__call__", "outer", "at", "reduce", "accumulate", "reduceat"):
            return NotImplemented
        func = getattr(cupy, np_ufunc.__name__, None)
        if not isinstance(func, ufunc):
            return NotImplemented
        if method != "__call__":
            func = getattr(func, method)
        for x in inout:
            if not (hasattr(x, "__cuda_array_interface__") or _is_scalar(x)
                    or isinstance(x, numpy.ndarray)):
                return NotImplemented
        return func(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        import cupy
        try:
            module = functools.reduce(getattr, func.__module__.split(".")[1:], cupy)
            cupy_func = getattr(module, func.__name__)
        except AttributeError:
            return NotImplemented
        if cupy_func is func:
            return NotImplemented
        for t in types:
            if not issubclass(t, (ndarray, numpy.ndarray)):
                return NotImplemented
        return cupy_func(*args, **kwargs)

    # -- attributes dpnb reads ------------------------------------------------------
    shape = property(lambda self: self._array.shape)
    ndim = property(lambda self: self._array.ndim)
    size = property(lambda self: self._array.size)
    dtype = property(lambda self: self._array.dtype)
    itemsize = property(lambda self: self._array.itemsize)
    nbytes = property(lambda self: self._array.nbytes)
    strides = property(lambda self: self._array.strides)
    flags = property(lambda self: self._array.flags)
    base = property(lambda self: None if self._array.base is None else
                    ndarray._wrap(self._array.base, self._device_id)
                    if isinstance(self._array.base, numpy.ndarray) else None)
    T = property(lambda self: ndarray._wrap(self._array.T, self._device_id))
    real = property(lambda self: ndarray._wrap(self._array.real, self._device_id))
    imag = property(lambda self: ndarray._wrap(self._array.imag, self._device_id))

    @shape.setter
    def shape(self, value):
        self._array.shape = value

    @real.setter
    def real(self, value):  # CuPy's ndarray has these setters too
        self.real[...] = value

    @imag.setter
    def imag(self, value):
        self.imag[...] = value

    @property
    def data(self) -> MemoryPointer:
        return MemoryPointer(self._array, self._device_id)

    @property
    def device(self):
        from .cuda import Device
        return Device(self._device_id)

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self._array
        return {"shape": a.shape, "typestr": a.dtype.str, "descr": a.dtype.descr,
                "data": (a.__array_interface__["data"][0], False), "version": 3,
                "strides": None if a.flags.c_contiguous else a.strides, "stream": 1}

    # -- indexing ---------------------------------------------------------------------
    def __getitem__(self, key):
        return ndarray._wrap(self._array[_index(key)], self._device_id)

    def __setitem__(self, key, value):
        if isinstance(value, numpy.ndarray) and value.ndim > 0:
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        if isinstance(value, (list, tuple)):
            raise _unsupported(value)
        self._array[_index(key)] = unwrap(value)

    def fill(self, value):
        if isinstance(value, numpy.ndarray):
            if value.shape != ():
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
            value = value.item()
        self._array.fill(unwrap(value))

    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        result = self._array.astype(dtype, order=order, casting=casting or "unsafe", copy=copy)
        return self if result is self._array else ndarray._wrap(result, self._device_id)

    def view(self, dtype=None):
        return ndarray._wrap(self._array.view() if dtype is None else self._array.view(dtype),
                             self._device_id)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()


def _rebuild(host):
    from . import array
    return array(host)


def _method(name, signature=None):
    np_method = getattr(numpy.ndarray, name)

    def method(self, *args, **kwargs):
        if signature is not None:
            signature.bind(self, *args, **kwargs)
        result = call(np_method, (self,) + args, kwargs)
        return result

    method.__name__ = name
    return method


# ndarray methods that CuPy has with NumPy's meaning (keyword sets as in CuPy's core.pyx:
# no ``where=`` / ``initial=`` on reductions).
_REDUCTIONS = {"sum": "axis dtype out keepdims", "prod": "axis dtype out keepdims",
               "mean": "axis dtype out keepdims", "var": "axis dtype out ddof keepdims",
               "std": "axis dtype out ddof keepdims", "max": "axis out keepdims",
               "min": "axis out keepdims", "all": "axis out keepdims",
               "any": "axis out keepdims", "argmax": "axis out keepdims",
               "argmin": "axis out keepdims", "cumsum": "axis dtype out",
               "cumprod": "axis dtype out"}
for _name, _params in _REDUCTIONS.items():
    _sig = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)] +
                             [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=None) for p in _params.split()])
    setattr(ndarray, _name, _method(_name, _sig))
for _name in ("reshape", "transpose", "ravel", "flatten", "copy", "squeeze", "swapaxes",
              "take", "repeat", "clip", "dot", "nonzero", "sort", "argsort", "diagonal",
              "conj", "conjugate", "round", "trace", "put", "partition", "argpartition",
              "searchsorted", "compress", "choose", "ptp", "dump", "dumps", "tofile",
              "tobytes"):
    if hasattr(numpy.ndarray, _name):
        setattr(ndarray, _name, _method(_name))

_OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
              "floordiv": "floor_divide", "mod": "remainder", "pow": "power",
              "matmul": None, "and": "bitwise_and", "or": "bitwise_or",
              "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift"}


def _binary(np_name, reflected=False, inplace=False):
    def op(self, other):
        import cupy
        if isinstance(other, numpy.ndarray):
            raise _unsupported(other)
        if not isinstance(other, ndarray) and not _is_scalar(other):
            return NotImplemented
        u = getattr(cupy, np_name)
        if inplace:
            return u(self, other, out=self)
        return u(other, self) if reflected else u(self, other)
    return op


for _op, _np in _OPERATORS.items():
    _np = _np or "matmul"
    setattr(ndarray, f"__{_op}__", _binary(_np))
    setattr(ndarray, f"__r{_op}__", _binary(_np, reflected=True))
    setattr(ndarray, f"__i{_op}__", _binary(_np, inplace=True))
for _op, _np in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                 "gt": "greater", "ge": "greater_equal"}.items():
    setattr(ndarray, f"__{_op}__", _binary(_np))
for _op, _np in {"neg": "negative", "pos": "positive", "abs": "absolute",
                 "invert": "invert"}.items():
    setattr(ndarray, f"__{_op}__", lambda self, _np=_np: getattr(__import__("cupy"), _np)(self))
ndarray.__divmod__ = lambda self, other: (self // other, self % other)
del _op, _np, _name, _params, _sig
