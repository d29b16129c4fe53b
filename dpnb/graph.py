"""The computation graph: variables, the Function base class, and the forward
and backward passes over a graph defined once and re-run (define-and-run), or
computed as it is built (``auto_forward``)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import ModuleType

import numpy as np

from .context import Context, array_module_of, get_current_context, to_module
from .errors import DpnbError
from .ndarray import NdArray

_auto_forward = False


def get_auto_forward() -> bool:
    return _auto_forward


def set_auto_forward(auto: bool) -> None:
    """Compute every function as soon as it is added to a graph (eager mode)."""
    global _auto_forward
    _auto_forward = bool(auto)


@contextlib.contextmanager
def auto_forward(auto: bool = True) -> Iterator[None]:
    """Eager mode inside the ``with`` block."""
    previous = _auto_forward
    set_auto_forward(auto)
    try:
        yield
    finally:
        set_auto_forward(previous)


class Variable:
    """A node of data in the graph: an array, its gradient, and the function that made it."""

    def __init__(self, shape: Sequence[int] = (), need_grad: bool = False, dtype=None):
        ctx = get_current_context()
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise DpnbError(f"Variable shape must have non-negative sizes, got {shape}")
        self._data = NdArray(shape, dtype or ctx.dtype, ctx.xp, owner=f"Variable{shape}")
        self._grad: NdArray | None = None
        self.need_grad = bool(need_grad)
        self.persistent = False
        self.parent: Function | None = None

    @classmethod
    def from_numpy_array(cls, data, grad=None, need_grad: bool = False) -> "Variable":
        """A leaf variable holding a copy of ``data``, keeping its dtype."""
        data = np.asarray(data) if array_module_of(data) is np else data
        v = cls(data.shape, need_grad=need_grad, dtype=data.dtype)
        v.d = data
        if grad is not None:
            v.g = grad
        return v

    # -- arrays -----------------------------------------------------------
    @property
    def data(self) -> NdArray:
        return self._data

    @property
    def grad(self) -> NdArray:
        if self._grad is None:
            self._grad = NdArray(self.shape, self.dtype, self._data.xp, owner=f"gradient of {self._data.owner}")
        return self._grad

    @property
    def d(self):
        return self._data.data

    @d.setter
    def d(self, value) -> None:
        self._data.data = value

    @property
    def g(self):
        return self.grad.data

    @g.setter
    def g(self, value) -> None:
        self.grad.data = value

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    def __len__(self) -> int:
        return self.shape[0]

    def unlinked(self) -> "Variable":
        """A new leaf variable sharing this one's data and gradient, cut from the graph."""
        v = Variable.__new__(Variable)
        v._data, v._grad = self._data, self.grad
        v.need_grad, v.persistent, v.parent = self.need_grad, self.persistent, None
        return v

    def __repr__(self) -> str:
        return f"<Variable({self.shape}, need_grad={self.need_grad}) at {id(self):#x}>"

    # -- passes -----------------------------------------------------------
    def forward(self, clear_buffer: bool = False, clear_no_need_grad: bool = False) -> None:
        """Recompute this variable from the graph's leaves.

        ``clear_buffer`` frees intermediate results as soon as no later function
        needs them (inference); ``clear_no_need_grad`` frees only those that
        backward will not read either."""
        order = _functions_in_order(self)
        last_use = _last_uses(order)
        keep = _read_by_backward(order) if clear_no_need_grad and not clear_buffer else set()
        for step, fn in enumerate(order):
            fn._run_forward()
            if not (clear_buffer or clear_no_need_grad):
                continue
            for x in fn.inputs:
                if (x.parent is not None and not x.persistent and x is not self
                        and last_use[id(x)] == step and id(x) not in keep):
                    x._data.free()

    def backward(self, grad=None, clear_buffer: bool = False, communicator_callbacks=None) -> None:
        """Back-propagate from this variable into every leaf that needs a gradient.

        ``grad`` defaults to 1 for a variable of one element; others need it
        given.  Leaf gradients (parameters) accumulate until zeroed; the
        gradients of intermediate variables are those of this call.
        ``communicator_callbacks`` get ``on_finish_function_backward(fn)`` after
        each function and ``on_finish()`` at the end (gradient all-reduce
        overlapped with backward)."""
        if grad is None:
            if self.size != 1:
                raise DpnbError(
                    f"backward() without a gradient needs a variable of one element, but "
                    f"this one has shape {self.shape}; reduce it first (F.mean / F.sum) or "
                    "pass grad=<array of that shape>")
            grad = 1
        seed = self._data.xp.empty(self.shape, self.dtype)
        seed[...] = to_module(grad, self._data.xp) if hasattr(grad, "shape") else grad
        callbacks = _as_list(communicator_callbacks)

        order = _functions_in_order(self)
        needs = _grad_requirements(order)
        pending: dict[int, object] = {id(self): seed}
        if self.parent is None:
            _accumulate_leaf(self, seed)
        for fn in reversed(order):
            if not any(needs[id(y)] for y in fn.outputs):
                continue
            xp = fn.xp
            gys = [pending.pop(id(y), None) for y in fn.outputs]
            for y, gy in zip(fn.outputs, gys):
                if gy is not None and (not clear_buffer or y.persistent or y is self):
                    y.grad.bind(gy.astype(y.dtype, copy=False))
            gys = [xp.zeros(y.shape, y.dtype) if gy is None else to_module(gy, xp)
                   for y, gy in zip(fn.outputs, gys)]
            need_grads = [needs[id(x)] for x in fn.inputs]
            xs = [to_module(x.d, xp) for x in fn.inputs] if fn.grad_depends_on_inputs else None
            ys = [y.d for y in fn.outputs] if fn.grad_depends_on_outputs else None
            gxs = fn.backward(xp, xs, ys, gys, need_grads)
            for x, gx, need in zip(fn.inputs, gxs, need_grads):
                if not need or gx is None:
                    continue
                if x.parent is None:
                    _accumulate_leaf(x, gx)
                elif id(x) in pending:
                    pending[id(x)] = pending[id(x)] + gx
                else:
                    pending[id(x)] = gx
            if clear_buffer:
                for y in fn.outputs:
                    if not y.persistent and y is not self:
                        y._data.free()
            for cb in callbacks:
                cb.on_finish_function_backward(fn)
        for cb in callbacks:
            cb.on_finish()

    # -- operators (nnabla's arithmetic on variables) ----------------------
    def __add__(self, other):
        from . import functions as F
        return F.add2(self, other) if isinstance(other, Variable) else F.add_scalar(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        from . import functions as F
        return F.sub2(self, other) if isinstance(other, Variable) else F.add_scalar(self, -other)

    def __rsub__(self, other):
        from . import functions as F
        return F.r_sub_scalar(self, other)

    def __mul__(self, other):
        from . import functions as F
        return F.mul2(self, other) if isinstance(other, Variable) else F.mul_scalar(self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        from . import functions as F
        return F.div2(self, other) if isinstance(other, Variable) else F.mul_scalar(self, 1.0 / other)

    def __rtruediv__(self, other):
        from . import functions as F
        return F.r_div_scalar(self, other)

    def __pow__(self, other):
        from . import functions as F
        return F.pow2(self, other) if isinstance(other, Variable) else F.pow_scalar(self, other)

    def __rpow__(self, other):
        from . import functions as F
        return F.r_pow_scalar(self, other)

    def __neg__(self):
        from . import functions as F
        return F.mul_scalar(self, -1.0)

    def __pos__(self):
        return self


class Function:
    """One operation of the graph, with its forward and backward side by side.

    A subclass keeps its arguments as attributes and implements:

    - ``setup(inputs)``: check the input variables' shapes and dtypes (raise
      through ``self.error``) and return ``[(shape, dtype), ...]`` per output;
    - ``forward(xp, xs)``: output arrays from input arrays;
    - ``backward(xp, xs, ys, gys, need_grads)``: input gradients (or None where
      not needed) from output gradients.  ``ys`` is given only to functions
      with ``grad_depends_on_outputs``, ``xs`` only to those with
      ``grad_depends_on_inputs``; keep input shapes from ``setup`` if needed.
      Never modify ``gys`` in place: they may be another variable's gradient.
    """

    differentiable = True          # False: outputs never carry a gradient
    grad_depends_on_inputs = True  # backward reads the inputs' data
    grad_depends_on_outputs = False  # backward reads the outputs' data

    inputs: list[Variable]
    outputs: list[Variable]
    context: Context

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def xp(self) -> ModuleType:
        return self.context.xp

    def setup(self, inputs: Sequence[Variable]) -> list[tuple[tuple[int, ...], np.dtype]]:
        raise NotImplementedError

    def forward(self, xp: ModuleType, xs: list) -> tuple:
        raise NotImplementedError

    def backward(self, xp: ModuleType, xs: list, ys: list | None, gys: list,
                 need_grads: list[bool]) -> tuple:
        raise DpnbError(f"{self.name} has no gradient")

    def error(self, message: str) -> DpnbError:
        """An error naming this function, to raise from ``setup``."""
        return DpnbError(f"{self.name}: {message}")

    def __call__(self, *inputs: Variable):
        """Add this function to the graph; returns its output variable(s)."""
        for i, x in enumerate(inputs):
            if not isinstance(x, Variable):
                raise self.error(f"input {i} must be an nn.Variable, got {type(x).__name__}; "
                                 "wrap arrays with nn.Variable.from_numpy_array(...)")
        self.context = get_current_context()
        self.inputs = list(inputs)
        specs = self.setup(self.inputs)
        need_grad = self.differentiable and any(x.need_grad for x in inputs)
        self.outputs = []
        for shape, dtype in specs:
            y = Variable.__new__(Variable)
            y._data = NdArray(shape, dtype, self.xp, owner=f"output of {self.name}")
            y._grad, y.need_grad, y.persistent, y.parent = None, need_grad, False, self
            self.outputs.append(y)
        if _auto_forward:
            self._run_forward()
        return self.outputs[0] if len(self.outputs) == 1 else tuple(self.outputs)

    def _run_forward(self) -> None:
        xp = self.xp
        ys = self.forward(xp, [to_module(x.d, xp) for x in self.inputs])
        for y, array in zip(self.outputs, ys):
            if tuple(array.shape) != y.shape:
                raise DpnbError(f"{self.name} computed shape {tuple(array.shape)} but declared "
                                f"{y.shape}; this is a bug in dpnb, please report it")
            y._data.bind(array if array.dtype == y.dtype else array.astype(y.dtype))


def _as_list(callbacks) -> list:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


def _functions_in_order(root: Variable) -> list[Function]:
    """The functions ``root`` depends on, each after all of its inputs' producers."""
    order: list[Function] = []
    seen: set[int] = set()
    stack: list[tuple[Function, bool]] = [(root.parent, False)] if root.parent else []
    while stack:
        fn, expanded = stack.pop()
        if expanded:
            order.append(fn)
            continue
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        stack.append((fn, True))
        stack.extend((x.parent, False) for x in reversed(fn.inputs)
                     if x.parent is not None and id(x.parent) not in seen)
    return order


def _last_uses(order: list[Function]) -> dict[int, int]:
    """For each variable, the position of the last function in ``order`` reading it."""
    return {id(x): step for step, fn in enumerate(order) for x in fn.inputs}


def _read_by_backward(order: list[Function]) -> set[int]:
    """The variables whose data a backward pass over ``order`` will read."""
    needs = _grad_requirements(order)
    read: set[int] = set()
    for fn in order:
        if any(needs[id(y)] for y in fn.outputs):
            if fn.grad_depends_on_inputs:
                read.update(id(x) for x in fn.inputs)
            if fn.grad_depends_on_outputs:
                read.update(id(y) for y in fn.outputs)
    return read


def _grad_requirements(order: list[Function]) -> dict[int, bool]:
    """Which variables need a gradient now: leaves by their ``need_grad``,
    intermediates when a differentiable function links them to such a leaf."""
    needs: dict[int, bool] = {}
    for fn in order:
        for x in fn.inputs:
            if x.parent is None:
                needs[id(x)] = x.need_grad
        flows = fn.differentiable and any(needs[id(x)] for x in fn.inputs)
        for y in fn.outputs:
            needs[id(y)] = flows
    return needs


def _accumulate_leaf(v: Variable, gx) -> None:
    """Add ``gx`` into a leaf's gradient: leaf gradients accumulate until zeroed."""
    if not v.need_grad:
        return
    grad = v.grad
    gx = to_module(gx, grad.xp)
    if not grad.allocated:
        grad.bind(gx.astype(grad.dtype, copy=True).reshape(grad.shape))
    else:
        grad.data[...] += gx
