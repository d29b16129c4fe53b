"""A test-only stand-in for CuPy, backed by NumPy (issue 29).

Prepend ``tests/standin`` to ``sys.path`` (``tests.standin.installed`` does it for a test
and undoes it after) and ``import cupy`` finds this package.  It is as strict as CuPy
where dpnb can get CuPy wrong:

* ``cupy.ndarray`` is its own type, not a ``numpy.ndarray`` subclass;
* ``numpy.asarray(a)`` / ``numpy.array(a)`` raise ``TypeError`` with CuPy's message
  ("Implicit conversion to a NumPy array is not allowed. ..."): only ``a.get()``,
  ``cupy.asnumpy(a)``, ``a.item()``, ``a.tolist()`` and scalar conversions
  (``float(a)``, ``int(a)``, ``bool(a)`` of one element, as CuPy allows) reach the host;
* NumPy functions on stand-in arrays dispatch as CuPy's ``__array_function__`` /
  ``__array_ufunc__`` do (cupy/_core/core.pyx): to ``cupy.<name>`` where the stand-in has
  it, returning stand-in arrays, else ``TypeError`` ("no implementation found");
* CuPy's functions and ufuncs refuse NumPy arrays as operands ("Unsupported type"), as
  its kernels do; host lists and NumPy arrays are accepted as *indices* (CuPy copies them);
  ``a[...] = numpy_array`` raises ``ValueError`` (CuPy's ``fill`` path);
* reductions and scalar indexing return 0-d arrays, never NumPy scalars;
* where CuPy's signature differs from NumPy's (``take`` has no ``mode``, ``einsum`` no
  ``out``/``order``/``casting``, reductions no ``where``/``initial``), NumPy's extra
  arguments raise ``TypeError``.

What dpnb uses (``grep -rn cupy dpnb``, and every ``xp.<name>`` in dpnb), and its status:

=========================================================  ==================================
dpnb's use                                                 here
=========================================================  ==================================
``cupy.cuda.runtime.getDeviceCount`` (context, gpu,        supported; the count is a knob
communicator, cluster.launcher, engine.start, checks)      (``set_device_count``, default 1)
``cupy.cuda.Device(i)``, ``.use()``, ``with``,             supported; ``use`` of an index out
``.synchronize()``, ``.id`` (context, gpu, storage,        of range raises
engine.start, nccl)                                        ``cuda.runtime.CUDARuntimeError``
``cupy.get_default_memory_pool().free_all_blocks()``,      supported (they hold nothing)
``get_default_pinned_memory_pool()`` (extensions.gpu)
``cupy.cuda.Stream(non_blocking=True)``,                   supported as bookkeeping; no
``get_current_stream().record()/.synchronize()``,          asynchrony, so no race a real
``stream.wait_event`` (nccl, mpi)                          stream would have can show here
``cupy.cuda.Event``, ``get_elapsed_time``                  host clock, not GPU timing
``cupy.asarray``, ``cupy.empty``, ``cupy.concatenate``     supported
(mpi, communicator)
``a.get()``, ``a.data.ptr``, ``__cuda_array_interface__``  supported (``ptr`` is the NumPy
(calls, plan, nccl, subscript, context.to_module)          buffer's address)
``cupyx.scatter_add`` (functions.base.add_at)              supported (``np.add.at``)
``xp.add.at``, ``xp.add.reduceat``                         as CuPy 13: ``at`` for add,
                                                           subtract, maximum, minimum,
                                                           bitwise and/or/xor; ``reduceat``
                                                           for add only
``xp.fft`` (spectral), ``xp.linalg.inv/det/slogdet/        supported (NumPy's)
cholesky``, ``xp.lib.stride_tricks.as_strided``
every other ``xp.<name>`` in dpnb/functions (where, take,  supported, NumPy's, with CuPy's
einsum, matmul, pad, unique, bincount, lexsort, ...)       signature where it differs
``cupy.cuda.nccl`` (communicators/_internal/nccl.py,       UNTESTABLE here: ``from cupy.cuda
cluster/checks.py)                                         import nccl`` raises ImportError
``ElementwiseKernel``, ``RawKernel``, ``fuse``             dpnb writes none; the names exist
                                                           and raise ``NotImplementedError``
peer access between devices, real stream ordering,        UNTESTABLE here
kernel timing, device memory limits
=========================================================  ==================================
"""
from __future__ import annotations

import builtins
import inspect
import sys

import numpy

from . import cuda, fft, linalg, lib  # noqa: F401  (cupy's submodules)
from ._core import IMPLICIT_MESSAGE, function, ndarray, ufunc, unwrap  # noqa: F401
from .cuda import memory as _memory

__version__ = "13.0.0+standin"
STANDIN = True  # how a test tells the stand-in from the real CuPy

# -- dtypes and constants: CuPy re-exports NumPy's -----------------------------------------
for _name in ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float16", "float32", "float64", "complex64", "complex128", "intp",
              "uintp", "dtype", "finfo", "iinfo", "number", "integer", "floating",
              "complexfloating", "signedinteger", "unsignedinteger", "generic", "inexact",
              "pi", "e", "inf", "nan", "newaxis", "euler_gamma", "result_type", "can_cast",
              "promote_types", "min_scalar_type", "common_type", "isscalar", "ndim", "shape",
              "size", "s_", "index_exp"):
    globals()[_name] = getattr(numpy, _name)

# -- ufuncs (CuPy 13's: no NumPy 2 aliases such as acos, no spacing / matvec / vecdot) ----
_UFUNCS = """absolute add arccos arccosh arcsin arcsinh arctan arctan2 arctanh bitwise_and
bitwise_not bitwise_or bitwise_xor cbrt ceil conjugate copysign cos cosh deg2rad degrees
divide divmod equal exp exp2 expm1 fabs float_power floor floor_divide fmax fmin fmod frexp
gcd greater greater_equal heaviside hypot invert isfinite isinf isnan lcm ldexp left_shift
less less_equal log log10 log1p log2 logaddexp logaddexp2 logical_and logical_not logical_or
logical_xor matmul maximum minimum modf multiply negative nextafter not_equal positive power
rad2deg radians reciprocal remainder right_shift rint sign signbit sin sinh sqrt square
subtract tan tanh true_divide trunc""".split()
for _name in _UFUNCS:
    globals()[_name] = ufunc(getattr(numpy, _name))
abs = absolute  # noqa: A001,F821
conj = conjugate  # noqa: F821
mod = remainder  # noqa: F821

# -- functions with NumPy's meaning and signature ------------------------------------------
_FUNCTIONS = """all allclose amax amin any append arange argmax argmin argwhere around
array_equal array_split atleast_1d atleast_2d atleast_3d average bincount broadcast_arrays
broadcast_to clip column_stack compress concatenate copyto count_nonzero cross cumprod
cumsum diag diagflat diagonal diff dot dsplit dstack empty empty_like expand_dims extract
eye flatnonzero flip fliplr flipud full full_like hsplit hstack identity indices inner
isclose ix_ kron lexsort linspace logspace max maximum_filter mean median meshgrid min
moveaxis nan_to_num nanmax nanmean nanmin nansum nonzero ones ones_like outer pad
partition percentile prod ptp put ravel repeat reshape resize roll rollaxis rot90 round
searchsorted select sort split squeeze stack std sum swapaxes take_along_axis tensordot
tile trace transpose tri tril triu unique unravel_index ravel_multi_index var vdot vsplit
vstack where zeros zeros_like argsort histogram may_share_memory shares_memory
quantile cov corrcoef interp""".split()
for _name in _FUNCTIONS:
    if hasattr(numpy, _name):
        globals()[_name] = function(getattr(numpy, _name))


def _cupy_signature(text: str) -> inspect.Signature:
    namespace: dict = {}
    exec(f"def f{text}: pass", namespace)
    return inspect.signature(namespace["f"])


# Where CuPy's signature is narrower than NumPy's (its docs, cupy/_indexing, _core):
take = function(numpy.take, "take",
                signature=_cupy_signature("(a, indices, axis=None, out=None)"))
einsum = function(numpy.einsum, "einsum", allowed=("dtype", "optimize"))
ascontiguousarray = function(numpy.ascontiguousarray, "ascontiguousarray",
                             signature=_cupy_signature("(a, dtype=None)"))


# -- host <-> device -------------------------------------------------------------------------
def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    """A new stand-in array from host data (NumPy arrays, lists, scalars) or another
    stand-in array: the explicit host-to-device copy."""
    if isinstance(obj, ndarray):
        data = numpy.array(obj._array, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
        return obj if data is obj._array else ndarray._wrap(data)
    return ndarray._wrap(numpy.array(_host(obj), dtype=dtype, copy=True, order=order,
                                     ndmin=ndmin))


def asarray(a, dtype=None, order=None, *, blocking=False):
    if isinstance(a, ndarray):
        data = numpy.asarray(a._array, dtype=dtype, order=order)
        return a if data is a._array else ndarray._wrap(data)
    return ndarray._wrap(numpy.array(_host(a), dtype=dtype, order=order, copy=True))


asanyarray = asarray


def _host(obj):
    """Host data for ``array`` / ``asarray``; stand-in arrays nested in a list are
    refused as CuPy refuses them (its ``array`` of a list of device arrays concatenates
    only ``cupy.ndarray`` items of one shape; the stand-in keeps the strict reading)."""
    if isinstance(obj, (list, tuple)) and builtins.any(isinstance(x, ndarray) for x in obj):
        return [x.get() if isinstance(x, ndarray) else x for x in obj]
    return obj


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    """``a`` on the host: ``a.get()`` for a stand-in array, ``numpy.asarray`` otherwise."""
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    result = numpy.asarray(a, order=order)
    if out is not None:
        out[...] = result
        return out
    return result


def get_array_module(*args):
    """``cupy`` if any argument is a stand-in array, else ``numpy``."""
    for arg in args:
        if isinstance(arg, ndarray):
            return sys.modules[__name__]
    return numpy


def get_default_memory_pool() -> _memory.MemoryPool:
    return _memory_pool


def get_default_pinned_memory_pool() -> _memory.PinnedMemoryPool:
    return _pinned_pool


_memory_pool = _memory.MemoryPool()
_pinned_pool = _memory.PinnedMemoryPool()


def is_available() -> bool:
    return cuda.is_available()


# -- kernels: dpnb writes none; declared untestable here ----------------------------------
class _Untestable:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"cupy.{type(self).__name__} runs CUDA code, which the "
                                  f"NumPy stand-in cannot run; test it on a GPU")


class ElementwiseKernel(_Untestable):
    pass


class ReductionKernel(_Untestable):
    pass


class RawKernel(_Untestable):
    pass


class RawModule(_Untestable):
    pass


def fuse(*args, **kwargs):
    raise NotImplementedError("cupy.fuse compiles CUDA code, which the NumPy stand-in "
                              "cannot run; test it on a GPU")


del _name
