"""Backward as a graph: a function's ``backward_arrays`` run on variables instead of
arrays, so that its gradient is itself a graph and can be differentiated again
(``nn.grad``, double backward).

``backward_arrays(xp, xs, ys, gys, need_grads)`` is written against an array module
``xp``.  ``GraphModule`` is such a module whose arrays are ``GraphArray``s, variables
dressed as arrays: ``xp.exp(x)``, ``x * y``, ``x.sum(axis=1, keepdims=True)``, ``x > 0``
... add dpnb functions to the graph instead of computing.  So one declaration per
function, its ``backward_arrays``, gives both the fast first-order backward (on arrays)
and the backward graph.  A function whose backward cannot run so (it writes into
arrays, scatters with ``add.at``, or reads arrays it kept from forward) declares
``backward_graph(self, F, xs, ys, gys, need_grads)`` beside its ``backward_arrays``,
on variables, with ``F`` the functions module (or says why it has none in
``no_graph_backward``); where it has neither, the first thing the module cannot
express (a write, a value kept from forward, a NumPy call) raises an error naming the
function: never a wrong answer.

A comparison gives a 0/1 mask of the operands' float type, computed by a function
without gradient (``greater_scalar`` ...), as the derivative of a step is zero."""
from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from ..context import get_current_context
from ..errors import DpnbError
from ..graph import Function, FunctionInfo, Variable, functions_in_order


class NoGraphGradient(DpnbError):
    """A function's gradient cannot be built as a graph (no second-order gradient)."""


class _Unexpressible(Exception):
    """What the graph module cannot express; ``graph_backward`` names the function."""


def _functions():
    from .. import functions  # the package this module belongs to, imported by then
    return functions


def _is_number(value) -> bool:
    """A Python number: a constant of the backward (an argument, a count).  A NumPy scalar
    is not one: it may be a value forward computed from the data (refused by _unwrap)."""
    return isinstance(value, numbers.Number) and not isinstance(value, np.generic)


def _unwrap(value) -> Variable:
    """A ``GraphArray``'s variable; an array that did not come from the graph module is
    refused: it would be a constant of the graph although it may depend on the inputs."""
    if isinstance(value, GraphArray):
        return value.v
    if isinstance(value, Variable):
        return value
    raise _Unexpressible(f"reads a value it holds ({type(value).__name__} of shape "
                         f"{getattr(value, 'shape', ())}) rather than one computed in the "
                         "graph")


def _constant(value, shape, dtype=None) -> Variable:
    """A leaf holding ``value`` everywhere (a float type's: the given one, else the
    context's)."""
    if dtype is None or not np.issubdtype(dtype, np.floating):
        dtype = get_current_context().dtype
    return Variable.from_numpy_array(np.full(tuple(shape), value, dtype))


def _wrap(v: Variable) -> "GraphArray":
    return GraphArray(v)


def _binary(a, b, on_variables, on_scalar, on_scalar_reversed=None):
    """``a op b`` where either side may be a number."""
    if _is_number(b):
        return _wrap(on_scalar(_unwrap(a), float(b)))
    if _is_number(a):
        return _wrap(on_scalar_reversed(_unwrap(b), float(a)))
    return _wrap(on_variables(_unwrap(a), _unwrap(b)))


def _compare(a, b, op: str) -> "GraphArray":
    F = _functions()
    flipped = {"greater": "less", "less": "greater", "greater_equal": "less_equal",
               "less_equal": "greater_equal", "equal": "equal", "not_equal": "not_equal"}
    if _is_number(b):
        return _wrap(getattr(F, f"{op}_scalar")(_unwrap(a), float(b)))
    if _is_number(a):
        return _wrap(getattr(F, f"{flipped[op]}_scalar")(_unwrap(b), float(a)))
    x, y = _unwrap(a), _unwrap(b)
    if x.shape != y.shape:
        shape = np.broadcast_shapes(x.shape, y.shape)
        x, y = _broadcast(x, shape), _broadcast(y, shape)
    return _wrap(getattr(F, op)(x, y))


def _extremum(kind: str, a, b) -> "GraphArray":
    """Elementwise ``maximum`` or ``minimum`` (``kind``) of two operands, either a number."""
    F = _functions()
    if _is_number(a):
        a, b = b, a
    if _is_number(b):
        return _wrap(getattr(F, f"{kind}_scalar")(_unwrap(a), float(b)))
    return _wrap(getattr(F, f"{kind}2")(_unwrap(a), _unwrap(b)))


def _broadcast(v: Variable, shape) -> Variable:
    shape = tuple(shape)
    return v if v.shape == shape else _functions().broadcast(v, shape)


def _axes(axis, ndim: int) -> tuple[int, ...] | None:
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(int(a) % ndim for a in axes)


class GraphArray:
    """A variable seen as an array by a ``backward_arrays`` running on ``GraphModule``.

    Its operations add functions to the graph; what would read its values (``bool``,
    ``float``, NumPy conversion, iteration) or write into it raises."""

    __slots__ = ("v",)
    __array_ufunc__ = None  # NumPy operators defer to this class's
    __array_priority__ = 1000

    def __init__(self, v: Variable):
        self.v = v

    shape = property(lambda self: self.v.shape)
    ndim = property(lambda self: self.v.ndim)
    dtype = property(lambda self: self.v.dtype)
    size = property(lambda self: self.v.size)

    def __len__(self) -> int:
        return self.v.shape[0]

    def __repr__(self) -> str:
        return f"GraphArray({self.v!r})"

    # -- arithmetic -------------------------------------------------------------
    def __add__(self, other):
        F = _functions()
        return _binary(self, other, F.add2, F.add_scalar, F.add_scalar)

    __radd__ = __add__

    def __sub__(self, other):
        F = _functions()
        return _binary(self, other, F.sub2, lambda x, v: F.add_scalar(x, -v), F.r_sub_scalar)

    def __rsub__(self, other):
        F = _functions()
        return _binary(other, self, F.sub2, lambda x, v: F.add_scalar(x, -v), F.r_sub_scalar)

    def __mul__(self, other):
        F = _functions()
        return _binary(self, other, F.mul2, F.mul_scalar, F.mul_scalar)

    __rmul__ = __mul__

    def __truediv__(self, other):
        F = _functions()
        return _binary(self, other, F.div2, lambda x, v: F.mul_scalar(x, 1.0 / v),
                       F.r_div_scalar)

    def __rtruediv__(self, other):
        F = _functions()
        return _binary(other, self, F.div2, lambda x, v: F.mul_scalar(x, 1.0 / v),
                       F.r_div_scalar)

    def __pow__(self, other):
        F = _functions()
        return _binary(self, other, F.pow2, F.pow_scalar, F.r_pow_scalar)

    def __rpow__(self, other):
        F = _functions()
        return _binary(other, self, F.pow2, F.pow_scalar, F.r_pow_scalar)

    def __neg__(self):
        return _wrap(_functions().mul_scalar(self.v, -1.0))

    def __pos__(self):
        return self

    def __matmul__(self, other):
        return _wrap(self.v @ _unwrap(other))  # NumPy's matmul, as variables have it

    def __rmatmul__(self, other):
        return _wrap(_unwrap(other) @ self.v)

    # -- masks ------------------------------------------------------------------
    def __gt__(self, other):
        return _compare(self, other, "greater")

    def __ge__(self, other):
        return _compare(self, other, "greater_equal")

    def __lt__(self, other):
        return _compare(self, other, "less")

    def __le__(self, other):
        return _compare(self, other, "less_equal")

    def __eq__(self, other):  # type: ignore[override]
        return _compare(self, other, "equal")

    def __ne__(self, other):  # type: ignore[override]
        return _compare(self, other, "not_equal")

    __hash__ = None  # type: ignore[assignment]

    def __invert__(self):
        return _wrap(_functions().logical_not(self.v))

    def __and__(self, other):
        return _compare_logic(self, other, "logical_and")

    __rand__ = __and__

    def __or__(self, other):
        return _compare_logic(self, other, "logical_or")

    __ror__ = __or__

    # -- methods of arrays --------------------------------------------------------
    def sum(self, axis=None, keepdims: bool = False, dtype=None):
        axes = _axes(axis, self.ndim)
        if axes == ():
            return self
        return _wrap(_functions().sum(self.v, axes, keepdims))

    def mean(self, axis=None, keepdims: bool = False):
        axes = _axes(axis, self.ndim)
        if axes == ():
            return self
        return _wrap(_functions().mean(self.v, axes, keepdims))

    def max(self, axis=None, keepdims: bool = False):
        return _wrap(_functions().max(self.v, _axes(axis, self.ndim), keepdims))

    def min(self, axis=None, keepdims: bool = False):
        return _wrap(_functions().min(self.v, _axes(axis, self.ndim), keepdims))

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(
            shape[0], (int, np.integer)) else tuple(shape)
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape = tuple(self.size // max(known, 1) if s == -1 else s for s in shape)
        if tuple(shape) == self.shape:
            return self
        return _wrap(_functions().reshape(self.v, shape, inplace=False))

    def transpose(self, *axes):
        if not axes or axes == (None,):
            axes = tuple(reversed(range(self.ndim)))
        elif len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        axes = tuple(int(a) % self.ndim for a in axes)
        if axes == tuple(range(self.ndim)):
            return self
        return _wrap(_functions().transpose(self.v, axes))

    @property
    def T(self):
        return self.transpose()

    def swapaxes(self, axis1, axis2):
        return GraphModule.swapaxes(self, axis1, axis2)

    def astype(self, dtype, copy: bool = True):
        """The same variable: the graph keeps each variable's type (a cast is a forward's
        business, and integer labels compare the same as floats)."""
        return self

    def copy(self):
        return self  # a graph's variables are never written in place

    def __getitem__(self, key):
        shape = _new_axes_shape(self.shape, key)
        if shape is not None:  # only new axes (x[:, None, None], x[..., None]): a reshape
            return self.reshape(shape)
        return _wrap(self.v[_unwrap_key(key)])

    # -- what a graph cannot do -----------------------------------------------------
    def __setitem__(self, key, value):
        raise _Unexpressible("writes into an array (x[key] = value)")

    def _in_place(self, other):
        raise _Unexpressible("updates an array in place (+= and its kin)")

    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ipow__ = _in_place

    def __bool__(self):
        raise _Unexpressible("decides on an array's values (bool of an array)")

    def __float__(self):
        raise _Unexpressible("reads an array's value (float of an array)")

    __int__ = __index__ = __float__

    def __iter__(self):
        raise _Unexpressible("iterates over an array")

    def __array__(self, *args, **kwargs):
        raise _Unexpressible("hands an array to NumPy")

    def __getattr__(self, name):
        raise _Unexpressible(f"uses the array attribute {name!r}")


def _new_axes_shape(shape: tuple, key) -> tuple | None:
    """The shape ``x[key]`` has where ``key`` only adds axes (None) to whole axes (``:``,
    ``...``); else None."""
    key = key if isinstance(key, tuple) else (key,)
    if None not in key or not all(k is None or k is Ellipsis or k == slice(None) for k in key):
        return None
    if key.count(Ellipsis) > 1:
        return None
    taken = sum(k is not None and k is not Ellipsis for k in key)
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - taken) + key[at + 1:]
    elif taken < len(shape):
        key = key + (slice(None),) * (len(shape) - taken)
    sizes, new = iter(shape), []
    for k in key:
        new.append(1 if k is None else next(sizes))
    return tuple(new)


def _unwrap_key(key):
    if isinstance(key, tuple):
        return tuple(_unwrap_key(k) for k in key)
    if isinstance(key, GraphArray):
        raise _Unexpressible("indexes with an array")
    return key


def _compare_logic(a, b, op: str) -> GraphArray:
    F = _functions()
    if _is_number(b) or _is_number(a):
        x, value = (a, b) if _is_number(b) else (b, a)
        return _wrap(getattr(F, f"{op}_scalar")(_unwrap(x), bool(value)))
    x, y = _unwrap(a), _unwrap(b)
    if x.shape != y.shape:
        shape = np.broadcast_shapes(x.shape, y.shape)
        x, y = _broadcast(x, shape), _broadcast(y, shape)
    return _wrap(getattr(F, op)(x, y))


def _elementwise(name: str):
    def apply(x):
        return _wrap(getattr(_functions(), name)(_unwrap(x)))
    apply.__name__ = name
    return apply


class _GraphLinalg:
    """``xp.linalg`` over variables: what the batched matrix functions offer."""

    @staticmethod
    def inv(x):
        if x.ndim != 3:
            raise _Unexpressible("inverts matrices other than a (B, N, N) batch")
        return _wrap(_functions().batch_inv(_unwrap(x)))

    def __getattr__(self, name):
        raise _Unexpressible(f"uses xp.linalg.{name}")


class _GraphModule:
    """The array module over ``GraphArray``s (see the module's docstring)."""

    # NumPy's dtypes and constants pass through: they describe, they do not compute.
    float16, float32, float64 = np.float16, np.float32, np.float64
    int32, int64, bool_ = np.int32, np.int64, np.bool_
    pi, e, inf, newaxis = np.pi, np.e, np.inf, None
    dtype, result_type, finfo, issubdtype, floating = (np.dtype, np.result_type, np.finfo,
                                                       np.issubdtype, np.floating)

    linalg = _GraphLinalg()
    exp = staticmethod(_elementwise("exp"))
    log = staticmethod(_elementwise("log"))
    sin = staticmethod(_elementwise("sin"))
    cos = staticmethod(_elementwise("cos"))
    tan = staticmethod(_elementwise("tan"))
    sinh = staticmethod(_elementwise("sinh"))
    cosh = staticmethod(_elementwise("cosh"))
    tanh = staticmethod(_elementwise("tanh"))
    arcsin = staticmethod(_elementwise("asin"))
    arccos = staticmethod(_elementwise("acos"))
    arctan = staticmethod(_elementwise("atan"))
    arcsinh = staticmethod(_elementwise("asinh"))
    arccosh = staticmethod(_elementwise("acosh"))
    arctanh = staticmethod(_elementwise("atanh"))
    abs = staticmethod(_elementwise("abs"))
    isnan = staticmethod(_elementwise("isnan"))
    isinf = staticmethod(_elementwise("isinf"))

    @staticmethod
    def sign(x):
        F = _functions()
        x = _unwrap(x)  # nnabla's F.sign passes gradients straight; the graph's sign has none
        return _wrap(F.greater_scalar(x, 0.0) - F.less_scalar(x, 0.0))

    @staticmethod
    def sqrt(x):
        return _wrap(_functions().pow_scalar(_unwrap(x), 0.5))

    @staticmethod
    def square(x):
        return _wrap(_functions().pow_scalar(_unwrap(x), 2.0))

    @staticmethod
    def log1p(x):
        return _wrap(_functions().log(_functions().add_scalar(_unwrap(x), 1.0)))

    @staticmethod
    def expm1(x):
        return _wrap(_functions().add_scalar(_functions().exp(_unwrap(x)), -1.0))

    @staticmethod
    def maximum(a, b):
        return _extremum("maximum", a, b)

    @staticmethod
    def minimum(a, b):
        return _extremum("minimum", a, b)

    @classmethod
    def clip(cls, x, low, high):
        return cls.minimum(cls.maximum(x, low), high)

    @staticmethod
    def where(condition, x_true, x_false):
        """NumPy's where (all three broadcast together), differentiable in both choices."""
        F = _functions()
        shapes = [np.shape(v) if _is_number(v) else v.shape
                  for v in (condition, x_true, x_false)]
        shape = tuple(np.broadcast_shapes(*shapes))
        dtype = next((v.dtype for v in (x_true, x_false) if not _is_number(v)), None)
        if dtype is None:
            raise _Unexpressible("chooses between two numbers (where of constants)")
        chosen = []
        for v in (x_true, x_false):
            chosen.append(_constant(v, shape, dtype) if _is_number(v)
                          else _broadcast(_unwrap(v), shape))
        cond = _constant(condition, shape, dtype) if _is_number(condition) else _broadcast(
            _unwrap(condition), shape)
        return _wrap(F.where(cond, *chosen))

    @staticmethod
    def matmul(a, b):
        return _wrap(_unwrap(a) @ _unwrap(b))

    dot = matmul

    @staticmethod
    def transpose(x, axes=None):
        return x.transpose(axes) if axes is not None else x.transpose()

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)

    @staticmethod
    def sum(x, axis=None, keepdims=False):
        return x.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    def moveaxis(x, source, destination):
        order = [a for a in range(x.ndim)]
        sources = [int(a) % x.ndim for a in np.atleast_1d(source)]
        destinations = [int(a) % x.ndim for a in np.atleast_1d(destination)]
        rest = [a for a in order if a not in sources]
        for dest, src in sorted(zip(destinations, sources)):
            rest.insert(dest, src)
        return x.transpose(tuple(rest))

    @staticmethod
    def swapaxes(x, axis1, axis2):
        order = list(range(x.ndim))
        a, b = int(axis1) % x.ndim, int(axis2) % x.ndim
        order[a], order[b] = order[b], order[a]
        return x.transpose(tuple(order))

    @staticmethod
    def ascontiguousarray(x):
        return x

    @staticmethod
    def broadcast_to(x, shape):
        return _wrap(_broadcast(_unwrap(x), shape))

    @staticmethod
    def expand_dims(x, axis):
        shape = list(x.shape)
        for a in sorted(_axes(axis, x.ndim + 1)):
            shape.insert(a, 1)
        return x.reshape(tuple(shape))

    @staticmethod
    def concatenate(arrays: Sequence, axis: int = 0):
        return _wrap(_functions().concatenate(*[_unwrap(a) for a in arrays], axis=axis))

    @staticmethod
    def stack(arrays: Sequence, axis: int = 0):
        return _wrap(_functions().stack(*[_unwrap(a) for a in arrays], axis=axis))

    @staticmethod
    def split(x, indices_or_sections, axis: int = 0):
        """NumPy's split into pieces (each its own slice, so that no piece is an output left
        over by a function of several)."""
        x = _unwrap(x)
        axis = int(axis) % x.ndim
        size = x.shape[axis]
        if isinstance(indices_or_sections, (int, np.integer)):
            step = size // int(indices_or_sections)
            bounds = list(range(0, size + 1, step))
        else:
            bounds = [0, *[int(i) for i in indices_or_sections], size]
        pieces = []
        for begin, end in zip(bounds[:-1], bounds[1:]):
            start = [0] * x.ndim
            stop = list(x.shape)
            start[axis], stop[axis] = begin, end
            pieces.append(_wrap(_functions().slice(x, start, stop, [1] * x.ndim)))
        return pieces

    @staticmethod
    def take(x, index, axis: int = 0):
        if not isinstance(index, (int, np.integer)):
            raise _Unexpressible("takes with an index array")
        x = _unwrap(x)
        axis = int(axis) % x.ndim
        start, stop = [0] * x.ndim, list(x.shape)
        start[axis], stop[axis] = int(index), int(index) + 1
        piece = _functions().slice(x, start, stop, [1] * x.ndim)
        return _wrap(piece).reshape(x.shape[:axis] + x.shape[axis + 1:])

    @staticmethod
    def tril(x, k: int = 0):
        """The lower triangle of each matrix (the last two axes): ``x`` times a 0/1 mask."""
        mask = np.tril(np.ones(x.shape, x.dtype), k)
        return x * _wrap(Variable.from_numpy_array(mask))

    # -- constants: made from shapes only, never from data ----------------------------
    @staticmethod
    def zeros(shape, dtype=None):
        return _wrap(_constant(0.0, np.atleast_1d(shape) if np.ndim(shape) == 0 else shape,
                               dtype))

    @staticmethod
    def ones(shape, dtype=None):
        return _wrap(_constant(1.0, np.atleast_1d(shape) if np.ndim(shape) == 0 else shape,
                               dtype))

    @staticmethod
    def full(shape, value, dtype=None):
        return _wrap(_constant(value, shape, dtype))

    @staticmethod
    def zeros_like(x, dtype=None):
        return _wrap(_constant(0.0, x.shape, dtype or x.dtype))

    @staticmethod
    def ones_like(x, dtype=None):
        return _wrap(_constant(1.0, x.shape, dtype or x.dtype))

    @staticmethod
    def arange(*args, dtype=None):
        values = np.arange(*args)
        return _wrap(Variable.from_numpy_array(values.astype(np.float64)))

    @staticmethod
    def eye(n, m=None, k=0, dtype=None):
        return _wrap(Variable.from_numpy_array(np.eye(n, m, k)))

    def __getattr__(self, name):
        raise _Unexpressible(f"uses xp.{name}")


GraphModule = _GraphModule()


# Backward functions registered by type name (nnabla.backward_functions.register): they
# take nnabla's arguments and come before a function's own graph backward.
custom_backwards: dict = {}


def graph_backward(fn: Function, xs: list[Variable], ys: list[Variable], gys: list[Variable],
                   need_grads: list[bool]) -> list[Variable | None]:
    """The gradients of ``fn``'s inputs ``xs`` as variables of the graph, from its outputs
    ``ys`` and their gradients ``gys`` (variables too): ``fn.backward_graph`` where the
    class declares one, else its ``backward_arrays`` run on ``GraphModule``."""
    try:
        declared = _declared(fn)
        custom = custom_backwards.get(fn.name)
        if custom is not None:
            grads = custom(list(gys), list(xs), [x.shape for x in xs], list(ys),
                           [y.shape for y in ys], **fn.info.args)
            grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
        elif getattr(fn, "no_graph_backward", None):
            raise NoGraphGradient(f"{_public_name(fn)} has no second-order gradient in dpnb: "
                                  f"{fn.no_graph_backward}")
        elif declared is not None:
            grads = declared(_functions(), list(xs), list(ys), list(gys), list(need_grads))
        else:
            grads = _traced(fn, xs, ys, gys, need_grads)
    except _Unexpressible as what:
        raise NoGraphGradient(
            f"F.{_public_name(fn)} has no second-order gradient in dpnb yet: its backward "
            f"{what}, which the graph module cannot express; it needs a backward_graph "
            "declared beside its backward_arrays") from None
    grads = list(grads)
    if len(grads) != len(xs):
        raise DpnbError(f"{fn.name}: its graph backward gave {len(grads)} gradients for "
                        f"{len(xs)} inputs")
    result = []
    for x, g, need in zip(xs, grads, need_grads):
        if g is None or not need:
            result.append(None)
            continue
        g = _unwrap(g) if not _is_number(g) else _constant(g, x.shape, x.dtype)
        if g.shape != x.shape:
            raise DpnbError(f"{fn.name}: its graph backward gave a gradient of shape {g.shape} "
                            f"for an input of shape {x.shape}")
        result.append(g)
    return result


def _declared(fn: Function):
    """``fn``'s ``backward_graph``, where its class declares one that goes with the
    ``backward_arrays`` it uses: a subclass that computes another backward (fused batch
    normalization over batch normalization) does not inherit its base's."""
    mro = type(fn).__mro__
    graph = next((c for c in mro if "backward_graph" in vars(c)), None)
    arrays = next((c for c in mro if "backward_arrays" in vars(c)), None)
    if graph is None or (arrays is not None and not issubclass(graph, arrays)):
        return None
    return fn.backward_graph


def _traced(fn: Function, xs, ys, gys, need_grads) -> tuple:
    if not fn.differentiable:
        return [None] * len(xs)
    ax = ([None if i in fn.grad_skips_inputs else GraphArray(x) for i, x in enumerate(xs)]
          if fn.grad_depends_on_inputs else None)
    ay = [GraphArray(y) for y in ys] if fn.grad_depends_on_outputs else None
    ag = [GraphArray(g) for g in gys]
    return fn.backward_arrays(GraphModule, ax, ay, ag, list(need_grads))


def _public_name(fn: Function) -> str:
    """The lower-case name of ``fn``'s public function (``Affine`` -> ``affine``)."""
    spec = getattr(fn, "nnabla_spec", None)
    build = getattr(spec, "build", None)
    name = getattr(build, "function", None)
    if isinstance(name, str):
        return name
    return fn.name


# -- differentiating a graph ---------------------------------------------------------

def differentiate(outputs: Sequence[Variable], seeds: Sequence[Variable],
                  inputs: Sequence[Variable], stop: Sequence[Variable] = ()
                  ) -> list[Variable | None]:
    """The gradients of ``outputs`` (weighed by ``seeds``) with respect to ``inputs``, as
    variables: each function between them, last first, adds its graph backward; a variable
    read by several functions gets the sum of their gradients.  None for an input that
    gets no gradient (none flows there, or its ``need_grad`` is False).  The walk goes no
    further up than ``stop`` (the inputs of a composite: nothing above them matters)."""
    F = _functions()
    order = functions_in_order(list(outputs), set(stop))
    # The variables downstream of an input that needs a gradient: only the functions
    # between the inputs and the outputs are differentiated.
    downstream = {x for x in inputs if x.need_grad}
    for fn in order:
        if fn.differentiable and any(x in downstream for x in fn.inputs):
            downstream.update(y for y in fn.outputs if y.need_grad)
    pending: dict[Variable, list[Variable]] = {}
    for o, seed in zip(outputs, seeds):
        pending.setdefault(o, []).append(seed)
    totals: dict[Variable, Variable] = {}
    for fn in reversed(order):
        if not any(x in downstream for x in fn.inputs):
            continue
        outs = fn.outputs
        gys = [_total(pending, totals, y) for y in outs]
        if all(g is None for g in gys):
            continue
        need = [x in downstream and x.need_grad for x in fn.inputs]
        gys = [F.constant(0.0, y.shape) if g is None else g for y, g in zip(outs, gys)]
        for x, g in zip(fn.inputs, graph_backward(fn, fn.inputs, outs, gys, need)):
            if g is not None:
                pending.setdefault(x, []).append(g)
    return [_total(pending, totals, x) if x.need_grad else None for x in inputs]


def _total(pending: dict, totals: dict, v: Variable) -> Variable | None:
    """The sum of the gradients ``v`` received, built once."""
    if v not in totals:
        parts = pending.get(v)
        if not parts:
            return None
        total = parts[0]
        for part in parts[1:]:
            total = _functions().add2(total, part)
        totals[v] = total
    return totals[v]


def on_variables(compute, *variables: Variable):
    """``compute(xp, *arrays)``, code written for arrays, run on variables with
    ``GraphModule``: its result (or results) as variables of the graph."""
    result = compute(GraphModule, *[GraphArray(v) for v in variables])
    if isinstance(result, (list, tuple)):
        return [_unwrap(r) for r in result]
    return _unwrap(result)


def composite_backward_graph(self, F, xs, ys, gys, need_grads):
    """A ``backward_graph`` for a function that can say what it computes as a graph of
    other functions (``self.composite(F, xs)``, its outputs): that graph differentiated."""
    outputs = self.composite(F, list(xs))
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    seeds = [g for g in gys]
    wanted = [x for x, need in zip(xs, need_grads) if need]
    grads = iter(differentiate(outputs[:len(seeds)], seeds, wanted, stop=xs))
    return [next(grads) if need else None for need in need_grads]


# -- the backward of a linear function, as a function of its own ---------------------

def _writable(a):
    """``a``, or a copy where it is a read-only view (a forward's broadcast), since a gradient
    is written into by ``backward(accum=False)``."""
    return a if getattr(a.flags, "writeable", True) else a.copy()


# The type names of the functions nn.grad made (``ConvolutionDataGrad`` ...), which the
# registry of backward functions answers for too.
made_type_names: set[str] = set()


class _MadeByGrad(Function):
    """Base of the functions made by graph backwards: no nnabla file form; ``info`` gives
    the type name nnabla gives its counterpart and no arguments."""

    no_nnabla_spec = "a function made by a graph backward (nn.grad)"
    type_name = ""

    @property
    def name(self) -> str:
        return self.type_name

    @property
    def info(self) -> FunctionInfo:
        return FunctionInfo(self.type_name, {})

    def _named(self, type_name: str) -> None:
        self.type_name = type_name
        made_type_names.add(type_name)


class GradientSeed(_MadeByGrad):
    """The gradient an output of ``nn.grad`` starts from (ones, or the value given), computed
    from that output, so that forwarding the gradients computes the outputs too, as nnabla's
    ``GradEndFunction`` makes it (a MAML inner loss is there to read after the outer
    forward).  A constant of the walk: no gradient goes back through it."""

    no_nnabla_spec = "the gradient an output of nn.grad starts from"
    differentiable = False
    grad_depends_on_inputs = False

    def __init__(self, value: np.ndarray):
        self.value = value
        self._named("GradEndFunction")

    def output_specs(self, inputs):
        return [(inputs[0].shape, self.value.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.array(self.value),)   # a copy: the output's array is the graph's to reuse


class LinearBackward(_MadeByGrad):
    """The backward of ``of``, a function linear in its inputs ``linear`` (jointly) whose
    other inputs only select (max pooling's maxima, embed's ids: no gradient flows to
    them) and whose backward reads no output: its forward is ``of``'s backward on arrays
    (one output per linear input), its backward ``of``'s forward (the adjoint's adjoint),
    so every order stays on arrays.  Its inputs: the output gradient, then ``of``'s other
    inputs."""

    no_nnabla_spec = "the backward of a linear function, made by a graph backward"

    def __init__(self, of: Function, linear: Sequence[int] = (0,)):
        self.of, self.linear = of, tuple(linear)
        self.shapes = [v.shape for v in of.inputs]
        self.others = [i for i in range(len(self.shapes)) if i not in self.linear]
        self._named(f"{of.name}{'DataGrad' if self.linear[0] == 0 else 'FilterGrad'}")

    def output_specs(self, inputs):
        return [(self.shapes[i], inputs[0].dtype) for i in self.linear]

    def forward_arrays(self, xp, xs):
        g, others = xs[0], list(xs[1:])
        # a linear function's backward does not read its linear inputs: zeros stand in
        operands = (_placed_all(self, [xp.zeros(self.shapes[i], g.dtype) for i in self.linear],
                                others) if self.of.grad_depends_on_inputs else None)
        need = [i in self.linear for i in range(len(self.shapes))]
        grads = self.of.backward_arrays(xp, operands, None, [g], need)
        # a backward may pass g straight on (scatter_add's x0): an output never aliases an input
        return tuple(grads[i].copy() if xp.may_share_memory(grads[i], g) else grads[i]
                     for i in self.linear)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        others = list(xs[1:])
        y = _linear_map(self.of, xp, _placed_all(self, list(gys), others))[0]
        return (_writable(y), *[None] * len(others))

    def backward_graph(self, F, xs, ys, gys, need_grads):
        others = list(xs[1:])
        y = LinearForward(self.of, self.linear)(*_placed_all(self, list(gys), others))
        return [y, *[None] * len(others)]


def _linear_map(of: Function, xp, xs: list) -> tuple:
    """The map ``of``'s backward is the adjoint of, on ``xs``: its forward, or for a
    function that draws random numbers its ``linear_map``, with the draw of its last
    forward (a new draw would be the adjoint of another backward)."""
    if of.draws_random_numbers:
        return of.linear_map(xp, xs)
    return of.forward_arrays(xp, xs)


def _placed_all(fn, linear_values: list, other_values: list) -> list:
    """``fn.of``'s inputs in order from the values of its linear and its other inputs."""
    operands = [None] * len(fn.shapes)
    for i, v in zip(fn.linear, linear_values):
        operands[i] = v
    for i, v in zip(fn.others, other_values):
        operands[i] = v
    return operands


class LinearForward(_MadeByGrad):
    """``of``'s forward again, on all of its inputs, as the backward of ``LinearBackward``
    (third order on)."""

    no_nnabla_spec = "a linear function's forward again, made by a graph backward"

    def __init__(self, of: Function, linear: Sequence[int] = (0,)):
        self.of, self.linear = of, tuple(linear)
        self.shapes = [v.shape for v in of.inputs]
        self.others = [i for i in range(len(self.shapes)) if i not in self.linear]
        self.y_shape = of.outputs[0].shape
        self._named(f"{of.name}Again")

    def output_specs(self, inputs):
        return [(self.y_shape, inputs[self.linear[0]].dtype)]

    def forward_arrays(self, xp, xs):
        return (_linear_map(self.of, xp, list(xs))[0],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        need = [i in self.linear for i in range(len(xs))]
        operands = list(xs) if self.of.grad_depends_on_inputs else None
        grads = self.of.backward_arrays(xp, operands, None, [gys[0]], need)
        return tuple(_writable(grads[i]) if i in self.linear else None for i in range(len(xs)))

    def backward_graph(self, F, xs, ys, gys, need_grads):
        grads = LinearBackward(self.of, self.linear)(gys[0], *[xs[i] for i in self.others])
        grads = iter(grads if isinstance(grads, tuple) else (grads,))
        return [next(grads) if i in self.linear else None for i in range(len(xs))]


def linear_backward_graph(self, F, xs, ys, gys, need_grads):
    """The ``backward_graph`` of a function linear in its first input, whose other inputs
    only select and whose backward reads no output: ``LinearBackward``."""
    if self.grad_depends_on_outputs:
        raise _Unexpressible("reads its outputs, so it is not linear in the sense "
                             "linear_backward_graph needs")
    return [LinearBackward(self)(gys[0], *xs[1:]) if need_grads[0] else None,
            *[None] * (len(xs) - 1)]


# -- the backward of a bilinear function, as functions of their own -----------------

def bilinear_backward_graph(self, F, xs, ys, gys, need_grads):
    """The ``backward_graph`` of a function bilinear in its first two inputs (convolution,
    affine): each of their gradients is a ``BilinearPart``, linear in the output gradient
    and in the other input; further inputs (a bias) take the traced backward."""
    grads = [None] * len(xs)
    for i in (0, 1):
        if need_grads[i]:
            grads[i] = BilinearPart(self, i)(gys[0], xs[1 - i])
    if len(xs) > 2 and any(need_grads[2:]):
        rest = _traced(self, xs, ys, gys, [False, False, *need_grads[2:]])
        grads[2:] = rest[2:]
    return grads


def _placed(i: int, value, other) -> list:
    """The two operands of a bilinear function with ``value`` as operand ``i``."""
    return [value, other] if i == 0 else [other, value]


class BilinearPart(_MadeByGrad):
    """The gradient of operand ``i`` of ``of``, a function bilinear in its first two
    inputs, as a function of the output gradient and the other operand.  Its forward is
    ``of``'s backward on arrays (given zeros for operand ``i``, which a bilinear function's
    gradient of it does not read); its backward is ``of``'s forward (for the output
    gradient) and ``of``'s backward for the other operand."""

    no_nnabla_spec = "a part of a bilinear function's backward, made by a graph backward"

    def __init__(self, of: Function, i: int):
        self.of, self.i = of, i
        self.shapes = [v.shape for v in of.inputs[:2]]
        self._named(f"{of.name}{'DataGrad' if i == 0 else 'FilterGrad'}")

    def output_specs(self, inputs):
        gy, other = inputs
        return [(self.shapes[self.i], np.result_type(gy.dtype, other.dtype))]

    def forward_arrays(self, xp, xs):
        gy, other = xs
        operands = _placed(self.i, xp.zeros(self.shapes[self.i], other.dtype), other)
        need = [k == self.i for k in (0, 1)]
        return (self.of.backward_arrays(xp, operands, None, [gy], need)[self.i],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy, other), (g,) = xs, gys
        operands = _placed(self.i, g, other)
        j = 1 - self.i
        g_gy = _writable(self.of.forward_arrays(xp, operands)[0]) if need_grads[0] else None
        g_other = None
        if need_grads[1]:
            g_other = self.of.backward_arrays(xp, operands, None, [gy],
                                              [k == j for k in (0, 1)])[j]
        return (g_gy, g_other)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        (gy, other), (g,) = xs, gys
        g_gy = BilinearApply(self.of)(*_placed(self.i, g, other)) if need_grads[0] else None
        g_other = BilinearPart(self.of, 1 - self.i)(gy, g) if need_grads[1] else None
        return [g_gy, g_other]


class BilinearApply(_MadeByGrad):
    """``of``'s forward on two operands again (no further inputs), as the backward of a
    ``BilinearPart`` (third order on)."""

    no_nnabla_spec = "a bilinear function's forward again, made by a graph backward"

    def __init__(self, of: Function):
        self.of = of
        self.y_shape = of.outputs[0].shape
        self._named(f"{of.name}Again")

    def output_specs(self, inputs):
        return [(self.y_shape, np.result_type(*(v.dtype for v in inputs)))]

    def forward_arrays(self, xp, xs):
        return (self.of.forward_arrays(xp, list(xs))[0],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return self.of.backward_arrays(xp, list(xs), None, list(gys), list(need_grads))[:2]

    def backward_graph(self, F, xs, ys, gys, need_grads):
        return [BilinearPart(self.of, i)(gys[0], xs[1 - i]) if need_grads[i] else None
                for i in (0, 1)]


# -- a function given as a graph of functions ------------------------------------------

class GraphFunction(_MadeByGrad):
    """A function given as a graph: ``build(F, xs)`` makes its outputs from its inputs
    with dpnb functions.  Its forward and its first-order backward (on arrays) evaluate
    that graph and the graph's gradient on leaves holding the arrays; its graph backward
    is that graph differentiated, so every order is exact.  nnabla's backward-function
    classes (``BatchNormalizationBackward`` ...) are such functions, their ``build`` a
    function's gradient made by differentiating its composite."""

    no_nnabla_spec = "a function given as a graph of functions (nnabla's backward classes)"

    def __init__(self, type_name: str, build, output_shapes: Sequence[tuple]):
        self.build = build
        self.shapes = [tuple(s) for s in output_shapes]
        self._named(type_name)

    def output_specs(self, inputs):
        dtype = np.result_type(*(v.dtype for v in inputs))
        return [(s, dtype) for s in self.shapes]

    def composite(self, F, xs):
        return self.build(F, list(xs))

    backward_graph = composite_backward_graph

    def forward_arrays(self, xp, xs):
        leaves = _leaves(xs, [True] * len(xs))
        dtype = np.result_type(*(x.dtype for x in xs))
        return tuple(xp.asarray(a, dtype) for a in _evaluate(self.build(_functions(), leaves)))

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        leaves = _leaves(xs, need_grads)
        outputs = self.build(_functions(), leaves)
        seeds = [Variable.from_numpy_array(np.asarray(g)) for g in gys]
        wanted = [x for x, need in zip(leaves, need_grads) if need]
        found = iter(_evaluate(differentiate(outputs, seeds, wanted, stop=leaves)))
        grads = []
        for x, need in zip(xs, need_grads):
            g = next(found) if need else None
            grads.append(None if not need else xp.zeros(x.shape, x.dtype) if g is None
                         else xp.asarray(g, x.dtype))
        return tuple(grads)


def _leaves(arrays, need_grads) -> list[Variable]:
    return [Variable.from_numpy_array(np.array(a), need_grad=bool(need))
            for a, need in zip(arrays, need_grads)]


def _evaluate(variables) -> list:
    """The values of ``variables`` (None stays None), computed together."""
    computed = [v for v in variables if v is not None and v.parent is not None]
    if computed:
        _functions().sink(*computed).forward(clear_no_need_grad=False)
    return [None if v is None else np.array(v.d) for v in variables]
