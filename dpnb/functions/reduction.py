"""Reductions and scans over axes: sum, mean, max, min, prod, norm, the cumulative
sum and product, sorting and top-k selection, nnabla's older whole-array reductions
(reduce_sum, reduce_mean, reduce), and the searches searchsorted and unique."""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from ..errors import DpnbError
from ..graph import Function, Variable
from .base import Reduction, base_axis_of, default_outputs, one_axis
from .graph_module import composite_backward_graph, linear_backward_graph, on_variables
from .specs import Build, FunctionSpec, Params, attrs, call, ints, none_to, plain, public

__all__ = ["sum", "mean", "max", "min", "prod", "norm", "cumsum", "cumprod", "sort", "top_k_data",
           "top_k_grad", "reduce_sum", "reduce_mean", "reduce", "searchsorted", "unique"]


def _reduction_params(fn) -> Params:
    return {"axes": ints(fn.axes), "keep_dims": fn.keepdims}


def _reduction(function: str) -> Build:
    return lambda xs, p, n: public(function)(xs[0], axis=tuple(p["axes"]),
                                             keepdims=p["keep_dims"])


def _take_along(F, x: Variable, index: Variable, axis: int) -> Variable:
    """``x``'s entries at ``index`` along ``axis`` (NumPy's take_along_axis) as a gather_nd,
    whose graph backward sends gradients back to them.  The selecting functions' composites
    pick so, at the index they compute in the graph: a re-forward with new data picks anew."""
    grids = np.indices(index.shape, dtype=np.uint64)
    rows = [index if d == axis % x.ndim else Variable.from_numpy_array(grids[d])
            for d in range(x.ndim)]
    return F.gather_nd(x, F.stack(*rows, axis=0))


class Sum(Reduction):
    """Sum over axes."""

    nnabla_spec = FunctionSpec("Sum", "sum_param", ("axes", "keep_dims"), _reduction_params,
                               _reduction("sum"))

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0].sum(axis=self.axes, keepdims=self.keepdims),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (self.spread(xp, gys[0]),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def sum(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Sum of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Sum(axis, keepdims)(x)


class Mean(Reduction):
    """Mean over axes."""

    nnabla_spec = FunctionSpec("Mean", "mean_param", ("axes", "keep_dims"), _reduction_params,
                               _reduction("mean"))

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        specs = super().output_specs(inputs)
        self.count = math.prod(self.in_shape[a] for a in self.axes)
        return specs

    def forward_arrays(self, xp, xs):
        x = xs[0]
        if x.dtype.kind == "f" and x.dtype.itemsize >= 4:  # what mean computes, less overhead
            return (xp.divide(x.sum(axis=self.axes, keepdims=self.keepdims), self.count),)
        return (x.mean(axis=self.axes, keepdims=self.keepdims),)  # float16 sums in float32

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (self.spread(xp, gys[0], self.count),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def mean(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Mean of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Mean(axis, keepdims)(x)


class _Extremum(Reduction):
    """Maximum or minimum over axes, optionally with the flat index (row-major over the
    reduced axes, uint64 as in nnabla) of the first extreme element.  The gradient of
    the values (with ``only_index``, of the index output, as nnabla does) goes to that
    element; the index output of ``with_index`` passes none."""

    kind = ""       # "maximum" or "minimum", for messages
    reduction = ""  # the array method: "max" or "min" (and "argmax" or "argmin")

    def __init__(self, axis, keepdims: bool, with_index: bool, only_index: bool):
        super().__init__(axis, keepdims)
        self.outputs_kept = "index" if only_index else ("both" if with_index else "value")

    def output_specs(self, inputs):
        ((shape, dtype),) = super().output_specs(inputs)
        if any(self.in_shape[a] == 0 for a in self.axes):
            raise self.error(f"cannot take the {self.kind} over an empty axis of shape "
                             f"{self.in_shape}; reduce only over axes with at least one element")
        return {"value": [(shape, dtype)], "index": [(shape, np.dtype(np.uint64))],
                "both": [(shape, dtype), (shape, np.dtype(np.uint64))]}[self.outputs_kept]

    def _flat_index(self, xp, x):
        """The reduced axes moved last and flattened, and the first extreme's index there."""
        ndim, k = x.ndim, len(self.axes)
        moved = xp.moveaxis(x, self.axes, tuple(range(ndim - k, ndim)))
        flat = moved.reshape(moved.shape[:ndim - k] + (-1,))
        return moved.shape, flat, getattr(flat, "arg" + self.reduction)(axis=-1)

    def forward_arrays(self, xp, xs):
        (x,) = xs
        _, flat, index = self._flat_index(xp, x)
        out_shape = self.kept_shape if self.keepdims else index.shape
        index = index.astype(np.uint64).reshape(out_shape)
        if self.outputs_kept == "index":
            return (index,)
        value = getattr(x, self.reduction)(axis=self.axes, keepdims=self.keepdims)
        return (value, index) if self.outputs_kept == "both" else (value,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), gy = xs, gys[0].astype(xs[0].dtype, copy=False)
        moved_shape, flat, first = self._flat_index(xp, x)
        hit = xp.arange(flat.shape[-1]) == first[..., None]
        g = (gy.reshape(first.shape)[..., None] * hit).reshape(moved_shape)
        last = tuple(range(x.ndim - len(self.axes), x.ndim))
        return (xp.moveaxis(g, last, self.axes),)

    def composite(self, F, xs):
        """The value as the element at its own index output (also the only_index output's
        gradient, as nnabla's)."""
        (x,) = xs
        flat = on_variables(lambda xp, x: _axes_last(xp, x, self.axes)[1], x)
        index = type(self)(self.axes, False, False, True)(x)
        value = _take_along(F, flat, F.reshape(index, index.shape + (1,)), -1)
        return F.reshape(value, self.outputs[0].shape)

    backward_graph = composite_backward_graph


def _extremum_params(fn) -> Params:
    kept = fn.outputs_kept
    return {**_reduction_params(fn), "with_index": kept == "both", "only_index": kept == "index"}


def _extremum(function: str) -> Build:
    return lambda xs, p, n: public(function)(xs[0], axis=tuple(p["axes"]),
                                             keepdims=p["keep_dims"], with_index=p["with_index"],
                                             only_index=p["only_index"])


class Max(_Extremum):
    """Maximum over axes (see ``_Extremum``)."""

    nnabla_spec = FunctionSpec("Max", "max_param",
                               ("axes", "keep_dims", "with_index", "only_index"), _extremum_params,
                               _extremum("max"))

    kind, reduction = "maximum", "max"


class Min(_Extremum):
    """Minimum over axes (see ``_Extremum``)."""

    nnabla_spec = FunctionSpec("Min", "min_param",
                               ("axes", "keep_dims", "with_index", "only_index"), _extremum_params,
                               _extremum("min"))

    kind, reduction = "minimum", "min"


def max(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False,
        with_index: bool = False, only_index: bool = False):
    """Maximum of the elements over ``axis`` (an int, a tuple, or None for all axes);
    ``with_index`` also returns the flat index of the first maximum over the reduced
    axes (uint64), ``only_index`` returns that index alone, as in nnabla."""
    return Max(axis, keepdims, with_index, only_index)(x)


def min(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False,
        with_index: bool = False, only_index: bool = False):
    """Minimum of the elements over ``axis``, with ``with_index`` / ``only_index`` as F.max."""
    return Min(axis, keepdims, with_index, only_index)(x)


def _axes_last(xp, x, axes: tuple[int, ...]):
    """``x`` with ``axes`` moved last and flattened into one: (shape moved, flat array)."""
    ndim, k = x.ndim, len(axes)
    moved = xp.moveaxis(x, axes, tuple(range(ndim - k, ndim)))
    return moved.shape, moved.reshape(moved.shape[:ndim - k] + (-1,))


def _axes_back(xp, g, moved_shape: tuple[int, ...], axes: tuple[int, ...]):
    """The inverse of ``_axes_last``."""
    ndim = len(moved_shape)
    return xp.moveaxis(g.reshape(moved_shape), tuple(range(ndim - len(axes), ndim)), axes)


class Prod(Reduction):
    """Product over axes.  Its gradient is the product of the other elements, exact
    where inputs are zero too (nnabla's divides by the input, giving 0 there)."""

    nnabla_spec = FunctionSpec("Prod", "prod_param", ("axes", "keep_dims"), _reduction_params,
                               _reduction("prod"))

    def forward_arrays(self, xp, xs):
        return (xs[0].prod(axis=self.axes, keepdims=self.keepdims),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        moved_shape, flat = _axes_last(xp, xs[0], self.axes)
        zero = flat == 0
        zeros = zero.sum(axis=-1, keepdims=True)
        others = xp.where(zero, 1, flat).prod(axis=-1, keepdims=True)
        safe = xp.where(zero, 1, flat)
        g = xp.where(zeros == 0, others / safe, xp.where(zero & (zeros == 1), others, 0))
        g = g * gys[0].reshape(g.shape[:-1] + (1,))
        return (_axes_back(xp, g, moved_shape, self.axes).astype(xs[0].dtype, copy=False),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """The product of the others as the exclusive running products from both ends: no
        division, so exact where inputs are zero, and so is its own derivative."""
        (x,), gy = xs, gys[0]
        flat = on_variables(lambda xp, x: _axes_last(xp, x, self.axes)[1], x)
        moved_shape = flat.shape[:-1] + tuple(x.shape[a] for a in self.axes)
        others = (F.cumprod(flat, axis=-1, exclusive=True)
                  * F.cumprod(flat, axis=-1, exclusive=True, reverse=True))
        g = others * F.reshape(gy, flat.shape[:-1] + (1,))
        return [on_variables(lambda xp, g: _axes_back(xp, g, moved_shape, self.axes), g)]


def prod(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Product of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Prod(axis, keepdims)(x)


class Norm(Reduction):
    """The p-norm over axes, (sum |x|^p)^(1/p) for a finite p >= 1; where the norm is 0
    its gradient is taken as 0."""

    nnabla_spec = FunctionSpec("Norm", "norm_param", ("p", "axes", "keep_dims"),
                               lambda fn: {"p": float(fn.p), **_reduction_params(fn)},
                               lambda xs, p, n: norm(xs[0], p["p"], axis=tuple(p["axes"]),
                                                     keepdims=p["keep_dims"]))

    grad_depends_on_outputs = True

    def __init__(self, p: float | None, axis, keepdims: bool):
        super().__init__(axis, keepdims)
        self.p = 2.0 if p is None else p

    def output_specs(self, inputs):
        p = self.p
        if isinstance(p, bool) or not isinstance(p, (int, float, np.number)) or not (
                np.isfinite(p) and p >= 1):
            raise self.error(f"p must be a finite number >= 1, got {p!r}; for the largest "
                             "magnitude use F.max(F.abs(x))")
        self.p = float(p)
        return super().output_specs(inputs)

    def forward_arrays(self, xp, xs):
        (x,), p = xs, self.p
        if p == 2.0:
            return (xp.sqrt((x * x).sum(axis=self.axes, keepdims=self.keepdims)),)
        return ((xp.abs(x) ** p).sum(axis=self.axes, keepdims=self.keepdims) ** (1.0 / p),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), p = xs, self.p
        y = ys[0].reshape(self.kept_shape)
        scale = xp.where(y == 0, 0, gys[0].reshape(self.kept_shape) / xp.where(y == 0, 1, y) ** (p - 1))
        direction = xp.sign(x) if p == 1.0 else xp.sign(x) * xp.abs(x) ** (p - 1)
        return ((direction * scale).astype(x.dtype, copy=False),)


def norm(x: Variable, p: float | None = None, axis: int | Sequence[int] | None = None,
         keepdims: bool = False) -> Variable:
    """The ``p``-norm (default 2) of the elements over ``axis`` (None: all axes)."""
    return Norm(p, axis, keepdims)(x)


class _Cumulative(Function):
    """A running sum or product along one axis; ``exclusive`` leaves each element out of
    its own result, ``reverse`` runs from the end.  Both are done by flipping and
    shifting the input, running the inclusive scan, and undoing them."""

    identity = 0  # of the scan's operation, shifted in by ``exclusive``

    def __init__(self, axis: int | None, exclusive: bool, reverse: bool):
        self.axis, self.exclusive, self.reverse = axis, bool(exclusive), bool(reverse)

    def output_specs(self, inputs):
        (x,) = inputs
        self.axis = one_axis(self, 0 if self.axis is None else self.axis, x.ndim)
        return [(x.shape, x.dtype)]

    def _index(self, ndim: int, part: slice) -> tuple:
        return (slice(None),) * self.axis + (part,) + (slice(None),) * (ndim - self.axis - 1)

    def _flip(self, xp, a):
        return xp.flip(a, self.axis) if self.reverse else a

    def _prepared(self, xp, x):
        """The input the inclusive scan runs over."""
        x = self._flip(xp, x)
        if not self.exclusive:
            return x
        t = xp.full(x.shape, self.identity, x.dtype)
        t[self._index(x.ndim, slice(1, None))] = x[self._index(x.ndim, slice(None, -1))]
        return t

    def _unprepared_grad(self, xp, g):
        """The gradient with respect to the scan's input taken back to the original input."""
        if self.exclusive:
            shifted = xp.zeros_like(g)
            shifted[self._index(g.ndim, slice(None, -1))] = g[self._index(g.ndim, slice(1, None))]
            g = shifted
        return self._flip(xp, g)

    def _suffix_sum(self, xp, a):
        return xp.flip(xp.cumsum(xp.flip(a, self.axis), axis=self.axis), self.axis)

    def forward_arrays(self, xp, xs):
        t = self._prepared(xp, xs[0])
        return (self._flip(xp, self.scan(xp, t)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        gy = self._flip(xp, gys[0])
        t = None if xs is None else self._prepared(xp, xs[0])
        return (self._unprepared_grad(xp, self.scan_grad(xp, t, gy)),)


class CumSum(_Cumulative):
    """Cumulative sum along an axis."""

    nnabla_spec = FunctionSpec("CumSum", "cumsum_param", ("axis", "exclusive", "reverse"),
                               attrs("axis", "exclusive", "reverse"),
                               call("cumsum", "axis", "exclusive", "reverse"))

    grad_depends_on_inputs = False

    def scan(self, xp, t):
        return xp.cumsum(t, axis=self.axis, dtype=t.dtype)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function

    def scan_grad(self, xp, t, gy):
        return self._suffix_sum(xp, gy)


class CumProd(_Cumulative):
    """Cumulative product along an axis; its gradient is exact where inputs are zero:
    after the first zero of a run only that zero gets a gradient."""

    nnabla_spec = FunctionSpec("CumProd", "cumprod_param", ("axis", "exclusive", "reverse"),
                               attrs("axis", "exclusive", "reverse"),
                               call("cumprod", "axis", "exclusive", "reverse"))

    identity = 1

    def scan(self, xp, t):
        return xp.cumprod(t, axis=self.axis, dtype=t.dtype)

    def scan_grad(self, xp, t, gy):
        zero = t == 0
        first_zero = zero & (xp.cumsum(zero, axis=self.axis) == 1)
        y = xp.cumprod(t, axis=self.axis)
        before = self._suffix_sum(xp, gy * y) / xp.where(zero, 1, t)
        at_zero = self._suffix_sum(xp, gy * xp.cumprod(xp.where(first_zero, 1, t), axis=self.axis))
        return xp.where(first_zero, at_zero, xp.where(zero, 0, before)).astype(t.dtype, copy=False)

    def composite(self, F, xs):
        """Each output as the product of a row of an (n, n) table holding the input where
        it takes part and 1 elsewhere: unlike the backward above traced, its graph is exact
        where inputs are zero too, for the table's n times the memory (graph backward only)."""
        (x,) = xs
        n, at = x.shape[self.axis], self.axis
        out, part = np.indices((n, n))
        after = part - out if not self.reverse else out - part
        taken = (after < 0) if self.exclusive else (after <= 0)
        taken = Variable.from_numpy_array(
            taken.astype(x.dtype).reshape((1,) * at + (n, n) + (1,) * (x.ndim - at - 1)))
        row = F.reshape(x, x.shape[:at] + (1,) + x.shape[at:])
        return F.prod(row * taken + (1 - taken), axis=at + 1)

    backward_graph = composite_backward_graph


def cumsum(x: Variable, axis: int | None = None, exclusive: bool = False, reverse: bool = False,
           n_outputs: int = -1, outputs=None) -> Variable:
    """Cumulative sum along ``axis`` (None: axis 0, as nnabla)."""
    default_outputs("F.cumsum", n_outputs, outputs)
    return CumSum(axis, exclusive, reverse)(x)


def cumprod(x: Variable, axis: int | None = None, exclusive: bool = False, reverse: bool = False,
            n_outputs: int = -1, outputs=None) -> Variable:
    """Cumulative product along ``axis`` (None: axis 0, as nnabla)."""
    default_outputs("F.cumprod", n_outputs, outputs)
    return CumProd(axis, exclusive, reverse)(x)


def _sort_params(fn) -> Params:
    return {"axis": int(fn.axis), "reverse": bool(fn.reverse),
            "with_index": fn.kept == "both", "only_index": fn.kept == "index"}


class Sort(Function):
    """Values sorted along an axis (stably; ``reverse``: descending), with their source
    indices (uint64) as a second output or alone.  The gradient of the first output
    (with ``only_index``, of the indices, as nnabla does) goes back to where each value
    came from."""

    nnabla_spec = FunctionSpec("Sort", "sort_param",
                               ("axis", "reverse", "with_index", "only_index"), _sort_params,
                               call("sort", "axis", "reverse", "with_index", "only_index"))

    def __init__(self, axis: int, reverse: bool, with_index: bool, only_index: bool):
        self.axis, self.reverse = axis, bool(reverse)
        self.kept = "index" if only_index else ("both" if with_index else "value")

    def output_specs(self, inputs):
        (x,) = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        value, index = (x.shape, x.dtype), (x.shape, np.dtype(np.uint64))
        return {"value": [value], "index": [index], "both": [value, index]}[self.kept]

    def _order(self, xp, x):
        """The stable sorting permutation along the axis; descending is the ascending
        order of the flipped input, flipped and mapped back, so equal values keep
        their order."""
        if not self.reverse:
            return xp.argsort(x, axis=self.axis, kind="stable")
        flipped = xp.argsort(xp.flip(x, self.axis), axis=self.axis, kind="stable")
        return (x.shape[self.axis] - 1) - xp.flip(flipped, self.axis)

    def forward_arrays(self, xp, xs):
        (x,) = xs
        order = self._order(xp, x)
        index = order.astype(np.uint64)
        if self.kept == "index":
            return (index,)
        value = xp.take_along_axis(x, order, axis=self.axis)
        return (value, index) if self.kept == "both" else (value,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        inverse = xp.argsort(self._order(xp, x), axis=self.axis)
        gy = gys[0].astype(x.dtype, copy=False)
        return (xp.take_along_axis(gy, inverse, axis=self.axis),)

    def composite(self, F, xs):
        """The sorted values as the entries at its own index output (also the only_index
        output's gradient, as nnabla's)."""
        (x,) = xs
        return _take_along(F, x, Sort(self.axis, self.reverse, False, True)(x), self.axis)

    backward_graph = composite_backward_graph


def sort(x: Variable, axis: int = -1, reverse: bool = False, with_index: bool = False,
         only_index: bool = False):
    """``x`` sorted along ``axis`` (ascending; ``reverse``: descending); ``with_index``
    also returns the sorting indices, ``only_index`` returns them alone (uint64)."""
    return Sort(axis, reverse, with_index, only_index)(x)


class _TopK(Function):
    """Shared by the top-k functions: each sample (the axes from ``base_axis`` on,
    flattened) and the positions of its k largest (or smallest) entries."""

    def __init__(self, k: int, abs: bool, base_axis: int, largest: bool = True):
        self.k, self.abs, self.base_axis, self.largest = k, bool(abs), base_axis, bool(largest)

    def setup_samples(self, x) -> None:
        self.base_axis = base_axis_of(self, self.base_axis, x.ndim) if x.ndim else 0
        self.in_shape = x.shape
        self.samples = int(np.prod(x.shape[:self.base_axis], dtype=np.int64))
        size = int(np.prod(x.shape[self.base_axis:], dtype=np.int64))
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or not (
                1 <= self.k <= size):
            raise self.error(f"k must be an int in [1, {size}] (the size of a sample, the axes "
                             f"from base_axis={self.base_axis} of {x.shape}), got {self.k!r}")
        self.k = int(self.k)

    def positions(self, xp, flat):
        """The column of each sample's selected entries in ``flat`` (samples, size), the
        first selected first."""
        key = xp.abs(flat) if self.abs else flat
        order = xp.argsort(-key if self.largest else key, axis=1, kind="stable")
        return order[:, :self.k]

    def rows(self, xp):
        return xp.arange(self.samples)[:, None]


class TopKData(_TopK):
    """The k largest (``abs``: by magnitude; ``largest=False``: smallest) values of each
    sample, in order (``reduce``), or in place with the others zeroed.  The gradient
    reaches the selected values only (nnabla passes all of it with ``reduce=False``)."""

    nnabla_spec = FunctionSpec("TopKData", "top_k_data_param",
                               ("k", "abs", "reduce", "base_axis", "largest", "with_index"),
                               attrs("k", "abs", "reduce", "base_axis", "largest", "with_index"),
                               call("top_k_data", "k", "abs", "reduce", "base_axis", "largest",
                                    "with_index"))

    def __init__(self, k, abs, reduce, base_axis, largest, with_index):
        super().__init__(k, abs, base_axis, largest)
        self.reduce, self.with_index = bool(reduce), bool(with_index)

    def output_specs(self, inputs):
        (x,) = inputs
        self.setup_samples(x)
        if self.with_index and not self.reduce:
            raise self.error("with_index=True needs reduce=True (the indices are those of the "
                             "reduced output); set reduce=True or drop with_index")
        if not self.reduce:
            return [(x.shape, x.dtype)]
        shape = x.shape[:self.base_axis] + (self.k,)
        out = [(shape, x.dtype)]
        return out + [(shape, np.dtype(np.uint64))] if self.with_index else out

    def forward_arrays(self, xp, xs):
        flat = xs[0].reshape(self.samples, -1)
        where = self.positions(xp, flat)
        values = flat[self.rows(xp), where]
        if self.reduce:
            shape = self.in_shape[:self.base_axis] + (self.k,)
            index = (where.astype(np.uint64).reshape(shape),) if self.with_index else ()
            return (values.reshape(shape),) + index
        y = xp.zeros_like(flat)
        y[self.rows(xp), where] = values
        return (y.reshape(self.in_shape),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        flat = xs[0].reshape(self.samples, -1)
        where, rows = self.positions(xp, flat), self.rows(xp)
        gy = gys[0].astype(flat.dtype, copy=False).reshape(self.samples, -1)
        gx = xp.zeros_like(flat)
        gx[rows, where] = gy if self.reduce else gy[rows, where]
        return (gx.reshape(self.in_shape),)

    def composite(self, F, xs):
        """The values at its own index output; in place, the input times their one-hot."""
        (x,) = xs
        flat = F.reshape(x, (self.samples, -1))
        index = TopKData(self.k, self.abs, True, self.base_axis, self.largest, True)(x)[1]
        index = F.reshape(index, (self.samples, self.k))
        if self.reduce:
            return F.reshape(_take_along(F, flat, index, 1), self.outputs[0].shape)
        taken = F.sum(F.one_hot(F.reshape(index, index.shape + (1,)), flat.shape[1:]), axis=1)
        return F.reshape(flat * taken, self.in_shape)

    backward_graph = composite_backward_graph


def top_k_data(x: Variable, k: int, abs: bool = False, reduce: bool = True, base_axis: int = 1,
               largest: bool = True, with_index: bool = False, n_outputs: int = -1, outputs=None):
    """The ``k`` largest values of each sample (the axes from ``base_axis`` on), as a
    (..., k) array (``reduce``) or in place with the rest zeroed; ``with_index`` also
    returns their flat positions in the sample (uint64)."""
    default_outputs("F.top_k_data", n_outputs, outputs)
    return TopKData(k, abs, reduce, base_axis, largest, with_index)(x)


class TopKGrad(_TopK):
    """The input unchanged; backward keeps only the k largest (``abs``: by magnitude)
    gradient entries of each sample and zeroes the rest."""

    nnabla_spec = FunctionSpec("TopKGrad", "top_k_grad_param", ("k", "abs", "base_axis"),
                               attrs("k", "abs", "base_axis"),
                               call("top_k_grad", "k", "abs", "base_axis"))

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        (x,) = inputs
        self.setup_samples(x)
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xs[0].copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        gy = gys[0].reshape(self.samples, -1)
        where, rows = self.positions(xp, gy), self.rows(xp)
        gx = xp.zeros_like(gy)
        gx[rows, where] = gy[rows, where]
        return (gx.reshape(self.in_shape),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """That filter as a function: top_k_data of the gradient, in place."""
        return [TopKData(self.k, self.abs, False, self.base_axis, True, False)(gys[0])]


def top_k_grad(x: Variable, k: int, abs: bool = False, base_axis: int = 1, n_outputs: int = -1,
               outputs=None) -> Variable:
    """``x`` unchanged forward; backward passes only the ``k`` largest gradient entries
    of each sample (the axes from ``base_axis`` on)."""
    default_outputs("F.top_k_grad", n_outputs, outputs)
    return TopKGrad(k, abs, base_axis)(x)


def reduce_sum(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The sum of all elements of ``x`` (a scalar): nnabla's older form of ``sum(x)``."""
    default_outputs("F.reduce_sum", n_outputs, outputs)
    return Sum(None, False)(x)


def reduce_mean(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The mean of all elements of ``x`` (a scalar): nnabla's older form of ``mean(x)``."""
    default_outputs("F.reduce_mean", n_outputs, outputs)
    return Mean(None, False)(x)


def reduce(x: Variable, op: str = "sum") -> Variable:
    """The sum (``op="sum"``) or mean (``op="mean"``) of all elements; deprecated in
    nnabla as here, which warns as it does: use ``sum`` or ``mean``."""
    warnings.warn("F.reduce is deprecated; use F.sum or F.mean instead", DeprecationWarning,
                  stacklevel=2)
    if op == "sum":
        return reduce_sum(x)
    if op == "mean":
        return reduce_mean(x)
    raise DpnbError(f"F.reduce: op must be 'sum' or 'mean', got {op!r}")


class SearchSorted(Function):
    """For each value, the index in the matching innermost row of the sorted sequence at
    which it would be inserted to keep the row sorted (``right``: after equal entries);
    as a float array, as nnabla's.  No gradient."""

    nnabla_spec = FunctionSpec("SearchSorted", "searchsorted_param", ("right",),
                               attrs(right=lambda fn: bool(fn.right)),
                               call("searchsorted", "right"))

    differentiable = False

    def __init__(self, right: bool):
        self.right = bool(right)

    def output_specs(self, inputs):
        seq, values = inputs
        if seq.ndim < 1 or seq.ndim != values.ndim or seq.shape[:-1] != values.shape[:-1]:
            raise self.error(f"sorted_sequence {seq.shape} and values {values.shape} must have "
                             "the same number of axes and the same shape except the innermost "
                             "axis; give one row of values per sorted row")
        return [(values.shape, self.context.dtype)]

    def forward_arrays(self, xp, xs):
        seq, values = xs
        before = (seq[..., None, :] <= values[..., :, None]) if self.right else (
            seq[..., None, :] < values[..., :, None])
        return (before.sum(axis=-1).astype(self.outputs[0].dtype),)


def searchsorted(sorted_sequence: Variable, values: Variable, right: bool | None = None,
                 n_outputs: int = -1, outputs=None) -> Variable:
    """Where each of ``values`` goes in the innermost rows of ``sorted_sequence``: index i
    with row[i-1] < v <= row[i] (``right``: row[i-1] <= v < row[i])."""
    default_outputs("F.searchsorted", n_outputs, outputs)
    return SearchSorted(bool(right))(sorted_sequence, values)


class Unique(Function):
    """The distinct elements of the flattened input (``flatten``) or the distinct slices
    along ``axis``, sorted or in the order they first appear, with (int32) the index of
    each one's first appearance, each input element's (slice's) place in the result,
    and how often each one appears.  Every NaN counts as distinct, as in nnabla.
    The outputs take their length from each forward; no gradient."""

    nnabla_spec = FunctionSpec("Unique", "unique_param",
                               ("flatten", "axis", "sorted", "with_index", "with_inverse",
                                "with_counts"),
                               lambda fn: plain({"flatten": fn.flatten,
                                                 "axis": none_to(fn.axis, 0), "sorted": fn.sorted,
                                                 "with_index": fn.extra[0],
                                                 "with_inverse": fn.extra[1],
                                                 "with_counts": fn.extra[2]}),
                               call("unique", "flatten", "axis", "sorted", "with_index",
                                    "with_inverse", "with_counts"))

    differentiable = False

    def __init__(self, flatten: bool, axis: int | None, sorted: bool, with_index: bool,
                 with_inverse: bool, with_counts: bool):
        self.flatten, self.axis, self.sorted = bool(flatten), axis, bool(sorted)
        self.extra = (bool(with_index), bool(with_inverse), bool(with_counts))

    def output_specs(self, inputs):
        (x,) = inputs
        if self.flatten:
            self.along = None
        elif self.axis is None:
            raise self.error("flatten=False finds distinct slices along an axis; give axis=, "
                             "or leave flatten=True for distinct elements")
        else:
            self.along = one_axis(self, self.axis, x.ndim)
        if self.along is None:
            n, self.slice_shape = x.size, ()
        else:
            n = x.shape[self.along]
            self.slice_shape = x.shape[:self.along] + x.shape[self.along + 1:]
        self.kinds = [kind for kind, on in zip(("index", "inverse", "counts"), self.extra) if on]
        found = n if x.data.allocated else 0  # the true count is known only at forward
        specs = [(self._shape(found), x.dtype)]
        specs += [((n if kind == "inverse" else found,), np.dtype(np.int32)) for kind in self.kinds]
        return specs

    def _shape(self, count: int) -> tuple[int, ...]:
        if self.along is None:
            return (count,)
        shape = list(self.slice_shape)
        shape.insert(self.along, count)
        return tuple(shape)

    def forward_arrays(self, xp, xs):
        (x,) = xs
        rows = x.reshape(-1, 1) if self.along is None else xp.moveaxis(x, self.along, 0).reshape(
            x.shape[self.along], -1)
        n = rows.shape[0]
        order = xp.lexsort(rows.T[::-1]) if rows.shape[1] else xp.arange(n)
        ordered = rows[order]
        new = xp.ones(n, bool)
        if n:
            new[1:] = xp.any(ordered[1:] != ordered[:-1], axis=1) if rows.shape[1] else False
        group = xp.cumsum(new) - 1
        starts = xp.nonzero(new)[0]
        first = order[starts]  # a stable sort puts each group's first appearance first
        counts = xp.diff(xp.concatenate([starts, xp.asarray([n])]))
        inverse = xp.empty(n, np.int64)
        inverse[order] = group
        if not self.sorted:
            by_first = xp.argsort(first, kind="stable")
            rank = xp.empty_like(by_first)
            rank[by_first] = xp.arange(by_first.size)
            first, counts, inverse = first[by_first], counts[by_first], rank[inverse]
        y = rows[first].reshape((first.size,) + self.slice_shape)
        if self.along is not None:
            y = xp.moveaxis(y, 0, self.along)
        extra = {"index": first, "inverse": inverse, "counts": counts}
        results = [y] + [extra[kind].astype(np.int32) for kind in self.kinds]
        for out, result in zip(self.outputs, results):
            if out.shape != result.shape:
                out.data.reset_shape(result.shape, force=True)
        return tuple(results)


def unique(x: Variable, flatten: bool = True, axis: int | None = None, sorted: bool = True,
           with_index: bool = False, with_inverse: bool = False, with_counts: bool = False,
           n_outputs: int = -1, outputs=None):
    """The distinct elements of ``x`` (``flatten``), or its distinct slices along
    ``axis``, sorted (or in order of first appearance), followed by the outputs asked
    for: first-appearance indices, inverse indices and counts (int32)."""
    default_outputs("F.unique", n_outputs, outputs)
    return Unique(flatten, axis, sorted, with_index, with_inverse, with_counts)(x)
