"""What every function family shares: the base classes of elementwise functions and
reductions, and the normalisers that check axes, shapes and window geometry at the
door, raising a ``DpnbError`` that names the function and says what was expected.

The normalisers take the ``owner`` of the argument: a ``Function`` (its name starts
the message) or a string such as ``"PF.batch_normalization"``."""
from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Sequence

import numpy as np

from ..errors import DpnbError
from ..graph import Function, Variable
from ..ndarray import NdArray

Owner = Function | str


def argument_error(owner: Owner, message: str) -> DpnbError:
    """An error about an argument of ``owner``, to raise."""
    return owner.error(message) if isinstance(owner, Function) else DpnbError(f"{owner}: {message}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def number_of(owner: Owner, name: str, value, integer: bool = False,
              finite: bool = True) -> float | int:
    """A number argument as a Python float (an int with ``integer``), finite unless
    ``finite`` is False."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if not isinstance(value, kinds) or isinstance(value, bool) or (finite and not np.isfinite(value)):
        kind = "an int" if integer else "a finite number" if finite else "a number"
        raise argument_error(owner, f"{name} must be {kind}, got {value!r}")
    return int(value) if integer else float(value)


def flag_of(owner: Owner, name: str, value) -> bool:
    """A bool argument (Python's or NumPy's) as a Python bool; nothing else is taken."""
    if not isinstance(value, (bool, np.bool_)):
        raise argument_error(owner, f"{name} must be a bool, got {value!r}")
    return bool(value)


def round_half_away(xp, v):
    """C's round: halves away from zero (NumPy's rounds them to even)."""
    return xp.sign(v) * xp.floor(xp.abs(v) + 0.5)


def one_axis(owner: Owner, axis: int | None, ndim: int, name: str = "axis") -> int:
    """One axis of an ``ndim``-D input (None: the last), made non-negative."""
    axis = ndim - 1 if axis is None else axis
    if not _is_int(axis) or not -ndim <= axis < ndim:
        raise argument_error(owner, f"{name} must be an int in [{-ndim}, {ndim}) for an input of "
                                    f"{ndim} dimensions, got {axis!r}")
    return int(axis) % ndim


def axes_of(owner: Owner, axes: int | Sequence[int] | None, ndim: int,
            name: str = "axes") -> tuple[int, ...]:
    """Distinct axes (an int, a sequence, or None for all of them), non-negative and sorted."""
    if axes is None:
        return tuple(range(ndim))
    if not _is_int(axes) and not isinstance(axes, (tuple, list)):
        raise argument_error(owner, f"{name} must be an int, a list or tuple of ints, or None, "
                                    f"got {axes!r} ({type(axes).__name__})")
    given = (axes,) if _is_int(axes) else tuple(axes)
    normal = tuple(sorted(one_axis(owner, a, ndim, name) for a in given))
    if len(set(normal)) != len(normal):
        raise argument_error(owner, f"{name} {axes!r} names an axis more than once; give each "
                                    "axis once")
    return normal


def kept_axes(owner: Owner, axes: int | Sequence[int], ndim: int) -> list[int]:
    """The axes a normalization keeps its statistics along (the channels): at least one."""
    if axes is None or (isinstance(axes, (tuple, list)) and not axes):
        raise argument_error(owner, f"axes must name at least one axis of the {ndim}-D input, "
                                    f"got {axes!r}; e.g. axes=[1] for the channels of (N, C, H, W)")
    return list(axes_of(owner, axes, ndim))


def base_axis_of(owner: Owner, base_axis: int, ndim: int) -> int:
    """``base_axis`` (the first axis that is not a sample axis) made non-negative."""
    if not _is_int(base_axis) or not -ndim <= base_axis < ndim:
        raise argument_error(owner, f"base_axis must lie in [-{ndim}, {ndim}) for an input of "
                                    f"{ndim} dimensions, got {base_axis!r}")
    return int(base_axis) % ndim


def int_tuple(owner: Owner, name: str, value: Sequence[int] | None, length: int | None,
              default: int, minimum: int) -> tuple[int, ...]:
    """``length`` ints >= ``minimum`` (a window's kernel, pad, stride or dilation per
    spatial axis); None gives ``default`` on every axis.  With ``length`` None the value
    sets the number of axes (a kernel): at least one, and it must be given."""
    if value is None and length is not None:
        return (default,) * length
    given = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    count_ok = len(given) == length if length is not None else len(given) >= 1
    if not count_ok or not all(_is_int(v) and v >= minimum for v in given):
        count = f"{length}" if length is not None else "one or more"
        raise argument_error(owner, f"{name} must be {count} int(s) >= {minimum}, one per "
                                    f"spatial axis, got {value!r}")
    return tuple(int(v) for v in given)


def shape_of(owner: Owner, shape: Sequence[int], name: str = "shape") -> tuple[int, ...]:
    """A shape: a sequence of non-negative ints."""
    given = tuple(shape) if isinstance(shape, (tuple, list, np.ndarray)) else (shape,)
    if not all(_is_int(s) and s >= 0 for s in given):
        raise argument_error(owner, f"{name} must be a sequence of ints >= 0, got {shape!r}")
    return tuple(int(s) for s in given)


def broadcast_shape(owner: Owner, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The NumPy broadcast of ``shapes``."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise argument_error(owner, f"shapes {' and '.join(map(str, shapes))} do not broadcast "
                                    "together") from None


def default_outputs(owner: Owner, n_outputs: int, outputs) -> None:
    """nnabla's ``n_outputs`` / ``outputs`` arguments (caller-made output variables):
    dpnb makes each function's outputs itself, so only their defaults are accepted."""
    if n_outputs != -1 or outputs is not None:
        raise argument_error(owner, f"n_outputs and outputs hand in output variables, which dpnb "
                                    f"makes itself; got n_outputs={n_outputs!r}, "
                                    f"outputs={outputs!r}; leave them at -1 and None")


def computed_into(owner: Owner, y: Variable, outputs) -> Variable:
    """nnabla's ``outputs=[ndarray]`` for a function of one output: ``y`` computed into
    that NdArray (a parameter's data: each forward writes the result there, as nnabla's
    quantized layers keep their quantized weights) and kept by the graph's freeing passes."""
    if outputs is None:
        return y
    if not (isinstance(outputs, (list, tuple)) and len(outputs) == 1
            and isinstance(outputs[0], NdArray)):
        raise argument_error(owner, f"outputs must be a list of one NdArray (the output's "
                                    f"array, e.g. [param.data]), got {outputs!r}")
    if y.parent is None:  # computed at once, without a graph
        outputs[0].take(y.d, owner)
        y._data = outputs[0]
    else:
        y.parent.compute_into(0, outputs[0])
    y.persistent = True
    return y


def variadic_keywords(owner: Owner, kw: dict, defaults: dict) -> list:
    """The keyword arguments of an nnabla function of variadic inputs (``stack(*x, **kw)``):
    the values of ``defaults``' names, refusing unknown names and caller-made outputs."""
    unknown = sorted(set(kw) - set(defaults) - {"n_outputs", "outputs"})
    if unknown:
        takes = ", ".join([*defaults, "n_outputs", "outputs"])
        raise argument_error(owner, f"unexpected keyword argument(s) {unknown}; besides the "
                                    f"input variables it takes {takes}")
    default_outputs(owner, kw.get("n_outputs", -1), kw.get("outputs"))
    return [kw.get(name, value) for name, value in defaults.items()]


def add_at(xp, target, index, values) -> None:
    """``target[index] += values`` with repeated indices adding up (NumPy's ``add.at``,
    CuPy's ``scatter_add``)."""
    if hasattr(xp.add, "at"):
        xp.add.at(target, index, values)
    else:
        importlib.import_module("cupyx").scatter_add(target, index, values)


def sum_to(g, shape: tuple[int, ...]):
    """A broadcast gradient ``g`` summed back to ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and g.shape[i + lead] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


_scratch = threading.local()


def workspace(xp, shape: tuple[int, ...], dtype, slot: int = 0):
    """An uninitialised temporary of ``shape`` (convolution columns, batch norm's x - mean),
    valid until the next call with the same ``slot``: hand out no result that lives in it.
    A function that needs several temporaries at once takes one slot for each.

    On the CPU one buffer per thread and slot is kept and reused: NumPy hands large
    arrays back to the OS, and filling fresh pages costs more than the copy
    itself.  CuPy's memory pool already reuses device memory."""
    if xp is not np:
        return xp.empty(shape, dtype)
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    buffer = buffers.get(slot)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = buffers[slot] = np.empty(nbytes, np.uint8)
    return buffer[:nbytes].view(dtype).reshape(shape)


class Unary(Function):
    """Base of the elementwise functions of one variable: same shape and dtype out.

    A subclass writes ``forward`` and ``backward`` only, e.g.::

        class Sin(Unary):
            def forward_arrays(self, xp, xs):
                return (xp.sin(xs[0]),)

            def backward_arrays(self, xp, xs, ys, gys, need_grads):
                return (gys[0] * xp.cos(xs[0]),)
    """

    def output_specs(self, inputs):
        (x,) = inputs
        return [(x.shape, x.dtype)]


class Binary(Function):
    """Base of the elementwise functions of two variables, with NumPy broadcasting."""

    def output_specs(self, inputs):
        a, b = inputs
        self.shapes = (a.shape, b.shape)
        return [(broadcast_shape(self, a.shape, b.shape), np.result_type(a.dtype, b.dtype))]

    def reduce_grads(self, gxs, need_grads):
        """The full-shape gradients ``gxs`` summed back to each input's shape."""
        return tuple(sum_to(g, s) if need else None
                     for g, s, need in zip(gxs, self.shapes, need_grads))


class Scalar(Function):
    """Base of the elementwise functions of a variable and a Python number ``val``."""

    def __init__(self, val: float):
        self.val = val

    def output_specs(self, inputs):
        (x,) = inputs
        if not np.isscalar(self.val) or isinstance(self.val, (str, bytes)):
            raise self.error(f"val must be a number, got {type(self.val).__name__}; "
                             "for two variables use the function's two-input form")
        return [(x.shape, x.dtype)]


class Reduction(Function):
    """Base of the reductions over ``axis`` (None: all axes), keeping the reduced axes
    as size 1 when ``keepdims``."""

    def __init__(self, axis: int | Sequence[int] | None, keepdims: bool):
        self.axis = axis
        self.keepdims = bool(keepdims)

    def output_specs(self, inputs):
        (x,) = inputs
        self.axes = axes_of(self, self.axis, x.ndim, "axis")
        self.in_shape = x.shape
        self.kept_shape = tuple(1 if i in self.axes else s for i, s in enumerate(x.shape))
        shape = self.kept_shape if self.keepdims else tuple(
            s for i, s in enumerate(x.shape) if i not in self.axes)
        return [(shape, x.dtype)]

    def spread(self, xp, gy, divisor=None):
        """The output gradient repeated over the reduced axes, divided by ``divisor`` where
        given: a new array, written in one pass."""
        out = xp.empty(self.in_shape, gy.dtype)
        if divisor is None:
            xp.copyto(out, gy.reshape(self.kept_shape))
        else:
            xp.divide(gy.reshape(self.kept_shape), divisor, out=out)
        return out

