"""nnabla's ``nnabla.function``: ``PythonFunction``, the base class of functions users
write in Python, on variables (``setup_impl``, ``forward_impl``, ``backward_impl``), as
in nnabla; dpnb runs each call as a graph function like its own.  nnabla's function
classes (``Affine``, ``Reshape`` ...) are here too, by their type names."""
from __future__ import annotations

import contextlib
import functools

from .context import Context, context_scope
from .formats.function_messages import function_instance
from .formats.function_specs import exported_types
from .graph import Function, Variable

__all__ = ["Function", "PythonFunction"]


def __getattr__(name: str):
    """nnabla's function classes by type name: ``Affine(ctx, base_axis=1)`` makes the
    function with its parameters set (nnabla's defaults for the others), to call on
    variables as ``f(x, w, b, n_outputs=1, auto_forward=False)``."""
    if name in exported_types():
        return functools.partial(function_instance, name)
    raise AttributeError(f"module 'nnabla.function' has no attribute {name!r}")


class PythonFunction:
    """Subclass it and implement ``min_outputs()``, ``setup_impl(inputs, outputs)`` (give
    the outputs their shapes with ``reset_shape``), ``forward_impl(inputs, outputs)`` and
    ``backward_impl(inputs, outputs, propagate_down, accum)``; ``name``, ``args`` and
    the ``grad_depends_*`` answers may be overridden.  Calling an instance on variables
    adds the function to the graph (or computes it, in ``auto_forward`` mode)."""

    def __init__(self, ctx: Context | None = None):
        self.ctx = ctx

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def args(self) -> dict:
        """The function's arguments, as ``info.args`` shows them."""
        return {}

    def min_outputs(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must say its number of outputs "
                                  "in min_outputs()")

    def grad_depends_output_data(self, i: int, o: int) -> bool:
        """Whether input ``i``'s gradient reads output ``o``'s data."""
        return True

    def grad_depends_input_data(self, i: int, j: int) -> bool:
        """Whether input ``i``'s gradient reads input ``j``'s data."""
        return True

    def setup_impl(self, inputs: list[Variable], outputs: list[Variable]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must shape its outputs in setup_impl")

    def forward_impl(self, inputs: list[Variable], outputs: list[Variable]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must compute in forward_impl")

    def backward_impl(self, inputs: list[Variable], outputs: list[Variable],
                      propagate_down: list[bool], accum: list[bool]) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no backward_impl")

    def __call__(self, *inputs: Variable, n_outputs: int = -1):
        scope = context_scope(self.ctx) if self.ctx is not None else contextlib.nullcontext()
        with scope:
            return CallOfPython(self, n_outputs if n_outputs >= 0 else self.min_outputs())(
                *inputs)


def _stand_in(array, grad=None) -> Variable:
    """A variable over ``array`` (and ``grad``), no copy: what the user's methods receive."""
    v = Variable(array.shape, dtype=array.dtype)
    v.data.bind(array)
    if grad is not None:
        v.grad.bind(grad)
    return v


class CallOfPython(Function):
    """One call of a ``PythonFunction`` in a graph: its methods run on stand-in variables
    over the arrays a graph pass hands to this function."""

    no_graph_backward = ("its backward is Python code on arrays (backward_impl); register a "
                         "backward function built from functions for its name with "
                         "nnabla.backward_functions.register(name, func)")

    def __init__(self, impl: PythonFunction, n_outputs: int):
        self.impl = impl
        self.n_outputs = n_outputs

    @property
    def name(self) -> str:
        return self.impl.name

    def output_specs(self, inputs):
        n_in = len(inputs)
        self.grad_depends_on_inputs = any(self.impl.grad_depends_input_data(i, j)
                                          for i in range(n_in) for j in range(n_in))
        self.grad_depends_on_outputs = any(self.impl.grad_depends_output_data(i, o)
                                           for i in range(n_in) for o in range(self.n_outputs))
        outputs = [Variable(()) for _ in range(self.n_outputs)]
        self.impl.setup_impl(list(inputs), outputs)
        return [(y.shape, y.dtype) for y in outputs]

    def forward_arrays(self, xp, xs):
        outputs = [Variable(y.shape, dtype=y.dtype) for y in self.outputs]
        self.impl.forward_impl([_stand_in(x) for x in xs], outputs)
        return tuple(y.data.data for y in outputs)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        inputs = [_stand_in(x if x is not None else xp.zeros(v.shape, v.dtype),
                            xp.zeros(v.shape, v.dtype))
                  for x, v in zip(xs or [None] * len(self.inputs), self.inputs)]
        outputs = [_stand_in(y if y is not None else xp.zeros(v.shape, v.dtype), gy.copy())
                   for y, gy, v in zip(ys or [None] * len(gys), gys, self.outputs)]
        self.impl.backward_impl(inputs, outputs, list(need_grads), [False] * len(inputs))
        return tuple(x.grad.data if need else None for x, need in zip(inputs, need_grads))
