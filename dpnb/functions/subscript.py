"""``x[key]`` and ``x[key] = value`` on variables and NdArrays, with NumPy's keys (ints,
slices, ``None``, ``...``, integer and boolean arrays), as nnabla has them: on a variable,
a function of the graph with its gradient; on an NdArray, computed at once.  An index
array may itself be a variable (``H[train_mask]``): an input, read at each forward."""
from __future__ import annotations

import numpy as np

from ..context import to_module
from ..graph import Function, Variable
from ..ndarray import NdArray
from . import array
from .base import add_at, sum_to
from .graph_module import LinearBackward, linear_backward_graph

_SUBSCRIPT = ("x[key] and x[key] = value in one step, which nnabla builds from Slice, Reshape "
              "and the gathers and has no type of its own for")  # why these have no nnabla_spec


class _Key:
    """A subscript with its variable parts taken out as inputs: ``parts`` holds each part,
    an index variable replaced by its position among ``variables``."""

    def __init__(self, key):
        parts = key if isinstance(key, tuple) else (key,)
        self.variables: list[Variable] = []
        self.parts = []
        for part in parts:
            if isinstance(part, Variable):
                self.parts.append(_Input(len(self.variables)))
                self.variables.append(part)
            elif isinstance(part, NdArray):
                self.parts.append(np.asarray(part.data))
            elif isinstance(part, (list, tuple)):
                self.parts.append(np.asarray(part))
            else:
                self.parts.append(part)

    def realized(self, xp, arrays: list) -> tuple:
        """The key with the index variables' arrays (``arrays``) in place, on ``xp``."""
        key = []
        for part in self.parts:
            if isinstance(part, _Input):
                part = arrays[part.position]
            if isinstance(part, np.ndarray) or hasattr(part, "__cuda_array_interface__"):
                part = to_module(part, xp)
                part = part if part.dtype == bool else part.astype(np.int64)
            key.append(part)
        return tuple(key)


def _names_an_element_twice(xp, shape: tuple[int, ...], key: tuple) -> bool:
    """Whether ``key``, where it holds integer index arrays, names an element of an array
    of ``shape`` more than once (slices, ints and boolean masks never do)."""
    if not any(getattr(part, "dtype", None) == np.int64 for part in key):
        return False
    places = xp.arange(int(np.prod(shape))).reshape(shape)[key]
    return places.size != xp.unique(places).size


class _Input:
    """The place of an index variable in a key: its position among the key's variables."""

    def __init__(self, position: int):
        self.position = position


def _shape_of_result(shape: tuple[int, ...], key: tuple) -> tuple[int, ...]:
    """The shape NumPy gives ``array[key]`` for an array of ``shape`` (on a view of one byte)."""
    view = np.lib.stride_tricks.as_strided(np.zeros((), np.int8), shape, (0,) * len(shape))
    return view[key].shape


class GetItem(Function):
    """``x[key]``; the gradient adds the output's gradient back at the elements read."""

    no_nnabla_spec = _SUBSCRIPT

    def __init__(self, key: _Key):
        self.key = key

    def output_specs(self, inputs):
        x, *indices = inputs
        key = self.key.realized(np, [index.d for index in indices])
        try:
            shape = _shape_of_result(x.shape, key)
        except (IndexError, TypeError, ValueError) as e:
            raise self.error(f"cannot index an array of shape {x.shape} with {key!r}: "
                             f"{e}") from None
        return [(shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x, *indices = xs
        y = x[self.key.realized(xp, indices)]
        if y.shape != self.outputs[0].shape:
            raise self.error(f"the index now selects {y.shape}, where it selected "
                             f"{self.outputs[0].shape} when the graph was built (a boolean "
                             "mask changed its count); index again after changing it")
        return (xp.array(y),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        x, *indices = xs
        gx = None
        if need_grads[0]:
            gx = xp.zeros(x.shape, gys[0].dtype)
            add_at(xp, gx, self.key.realized(xp, indices), gys[0])
        return (gx, *[None] * len(indices))

    backward_graph = linear_backward_graph  # linear in x; the key only selects


class SetItem(Function):
    """``x`` with ``x[key] = value``; the gradient goes to ``value`` from the elements set
    and to ``x`` from the others."""

    no_nnabla_spec = _SUBSCRIPT

    def __init__(self, key: _Key):
        self.key = key

    def output_specs(self, inputs):
        x, value, *indices = inputs
        key = self.key.realized(np, [index.d for index in indices])
        try:
            target = _shape_of_result(x.shape, key)
            np.broadcast_shapes(value.shape, target)
        except (IndexError, TypeError, ValueError) as e:
            raise self.error(f"cannot set {key!r} of an array of shape {x.shape} to a value "
                             f"of shape {value.shape}: {e}") from None
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x, value, *indices = xs
        key = self.key.realized(xp, indices)
        if _names_an_element_twice(xp, x.shape, key):
            raise self.error(f"the key names an element of the shape {x.shape} array more than "
                             "once, where which value lands is undefined (NumPy promises no "
                             "order) and its gradient with it; make the indices distinct, or "
                             "add the values with F.scatter_add")
        y = x.copy()
        y[key] = value
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        key = self.key.realized(xp, xs[2:])
        gx = None
        if need_grads[0]:
            gx = gy.copy()
            gx[key] = 0
        gvalue = sum_to(gy[key], xs[1].shape) if need_grads[1] else None
        return (gx, gvalue, *[None] * (len(xs) - 2))

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Linear in x and value together, the key only selects: LinearBackward."""
        gx, gvalue = LinearBackward(self, (0, 1))(gys[0], *xs[2:])
        return [gx, gvalue, *[None] * (len(xs) - 2)]


def _values(value):
    """The array behind ``value`` (a variable's or an NdArray's data), or ``value`` itself."""
    if isinstance(value, Variable):
        return value.d
    return value.data if isinstance(value, NdArray) else value


def _slice_arguments(shape: tuple[int, ...], key) -> tuple[list, list, list] | None:
    """nnabla's Slice arguments (start, stop, step per axis) for a key of slices and at
    most one ``...``, as nnabla builds ``x[key]`` from them; None for other keys."""
    parts = key if isinstance(key, tuple) else (key,)
    if (not all(isinstance(p, slice) or p is Ellipsis for p in parts)
            or sum(p is Ellipsis for p in parts) > 1 or len(parts) - (Ellipsis in parts) > len(shape)
            or any(p.step == 0 for p in parts if isinstance(p, slice))):
        return None
    fill = (slice(None),) * (len(shape) - len(parts) + (Ellipsis in parts))
    at = next((i for i, p in enumerate(parts) if p is Ellipsis), len(parts))
    parts = parts[:at] + fill + parts[at + 1:]
    start, stop, step = [], [], []
    for part, size in zip(parts, shape):
        forward = part.step is None or part.step > 0
        start.append(part.start if part.start is not None else 0 if forward else -1)
        stop.append(part.stop if part.stop is not None else size if forward else -size - 1)
        step.append(1 if part.step is None else part.step)
    return start, stop, step


def get_item(x, key):
    """``x[key]`` for a variable or an NdArray: nnabla's Slice where the key is slices only."""
    arguments = _slice_arguments(x.shape, key) if isinstance(x, Variable) else None
    if arguments is not None:
        return array.slice(x, *arguments)
    key = _Key(key)
    return GetItem(key)(x, *key.variables)


def set_item(x, key, value) -> None:
    """``x[key] = value``.  An NdArray changes in place.  A variable becomes the output of
    the assignment, whose input is what the variable was: the graph built on the variable
    from now on sees the new values, and gradients flow to ``value`` and to the rest."""
    if isinstance(x, NdArray):
        key = _Key(key)
        x.data[key.realized(x.xp, [v.d for v in key.variables])] = _values(value)
        return
    if not isinstance(value, Variable):
        value = Variable.from_numpy_array(np.asarray(_values(value), x.dtype))
    before = Variable(x.shape, need_grad=x.need_grad, dtype=x.dtype)
    before.rewire_on(x)
    key = _Key(key)
    x.rewire_on(SetItem(key)(before, value, *key.variables))
