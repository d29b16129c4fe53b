"""``nn.grad``: gradients as variables of the graph, which can be differentiated again
(gradient penalties, Hessian-vector products, MAML), as nnabla's ``nnabla.grad``.

It takes nnabla's arguments and hands the walk to ``graph_module.differentiate``: from
the outputs back to the inputs, last function first, each function adds its backward as
functions; a variable read by several functions gets the sum of their gradients
(``F.add2``).  First-order ``loss.backward()`` does not come here: it stays on the
array-level backward."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import functions as F
from .errors import DpnbValueError
from .functions.graph_module import GradientSeed, differentiate
from .graph import Function, Variable
from .ndarray import NdArray

__all__ = ["grad"]

_GRAD_OUTPUT_TYPES = (type(None), int, float, np.ndarray, NdArray, Variable)


def grad(outputs: Variable | Sequence[Variable], inputs: Variable | Sequence[Variable],
         grad_outputs=None, persistent_outputs: Sequence[bool] = (),
         bind_grad_output: bool = False) -> list[Variable]:
    """The gradients of the sum of ``outputs`` with respect to each of ``inputs``, as
    variables of a graph (forward them to compute; differentiate them again).

    ``grad_outputs`` weigh the outputs as ``backward(grad=...)`` does: None (ones), a
    number, an array, an NdArray, or a variable (then differentiable too), or one of
    those per output.  ``persistent_outputs`` (default: all True) set the outputs'
    ``persistent`` flags, so that clearing passes keep them.  An input the outputs do not
    depend on, or that has ``need_grad`` False, gets zeros (a constant of its shape).
    With ``bind_grad_output`` each gradient variable's data is its input's ``grad``:
    forwarding the gradients fills ``x.g`` (a solver can then update from them)."""
    outputs = _as_list(outputs, "outputs")
    inputs = _as_list(inputs, "inputs")
    seeds = _seeds(outputs, grad_outputs)
    persistent = list(persistent_outputs)
    if persistent and len(persistent) != len(outputs):
        raise DpnbValueError(f"nn.grad: persistent_outputs needs one flag per output "
                             f"({len(outputs)}) or none, got {len(persistent)}")
    for o, p in zip(outputs, persistent or [True] * len(outputs)):
        o.persistent = bool(p)

    found = differentiate(outputs, seeds, inputs)
    grads = [F.constant(0.0, x.shape) if g is None else g for x, g in zip(inputs, found)]
    if bind_grad_output:
        grads = [BoundToGrad(x)(g) for x, g in zip(inputs, grads)]
    return grads


class BoundToGrad(Function):
    """The gradient of ``x`` unchanged, written into ``x.grad`` at every forward and
    sharing its array after: nnabla's ``bind_grad_output``.  Writing rather than rebinding
    keeps a parameter's gradient a view into the flat storage its solver updates from."""

    no_nnabla_spec = "an input's gradient bound to its grad (nn.grad(bind_grad_output=True))"
    grad_depends_on_inputs = False

    def __init__(self, x: Variable):
        self.x = x

    def output_specs(self, inputs):
        return [(inputs[0].shape, inputs[0].dtype)]

    def forward_arrays(self, xp, xs):
        self.x.grad.data = xs[0]
        return (self.x.grad.data,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        return [gys[0]]


class SeedAfterOutput(Function):
    """A gradient given as a variable, unchanged, computed after the output it weighs (read
    for the order only): forwarding the gradients computes the outputs first, whatever
    ``grad_outputs`` is, as nnabla's GradEndFunction orders them, so a gradient graph reads
    what that forward drew or counted (a dropout's mask, mean_subtraction's count)."""

    no_nnabla_spec = "a variable grad_output of nn.grad, ordered after its output"
    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        return [(inputs[1].shape, inputs[1].dtype)]

    def forward_arrays(self, xp, xs):
        return (xs[1].copy(),)  # a variable of its own, as F.identity's

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (None, gys[0])

    def backward_graph(self, F, xs, ys, gys, need_grads):
        return [None, gys[0]]


def _as_list(values, name: str) -> list[Variable]:
    values = [values] if isinstance(values, Variable) else list(values)
    for i, v in enumerate(values):
        if not isinstance(v, Variable):
            raise DpnbValueError(f"nn.grad: each of {name} must be an nn.Variable; item {i} is "
                                 f"a {type(v).__name__}")
    return values


def _seeds(outputs: list[Variable], grad_outputs) -> list[Variable]:
    """The gradient each output starts from, as a variable (nnabla's ``grad_outputs``)."""
    if grad_outputs is None:
        given = [None] * len(outputs)
    elif isinstance(grad_outputs, (int, float, np.ndarray, NdArray, Variable)):
        given = [grad_outputs] * len(outputs) if len(outputs) == 1 else [grad_outputs]
    else:
        given = list(grad_outputs)
    if len(given) != len(outputs):
        raise DpnbValueError(f"nn.grad: grad_outputs needs one entry per output "
                             f"({len(outputs)}), got {len(given)}")
    seeds = []
    for i, (o, g) in enumerate(zip(outputs, given)):
        if not isinstance(g, _GRAD_OUTPUT_TYPES) or isinstance(g, bool):
            raise DpnbValueError(f"nn.grad: grad_outputs[{i}] must be None, a number, a NumPy "
                                 f"array, an NdArray or an nn.Variable, got {type(g).__name__}")
        if isinstance(g, (np.ndarray, NdArray, Variable)) and tuple(g.shape) != o.shape:
            raise DpnbValueError(f"nn.grad: grad_outputs[{i}] has shape {tuple(g.shape)}, but "
                                 f"output {i} has shape {o.shape}; they must be the same")
        if isinstance(g, Variable):
            seeds.append(SeedAfterOutput()(o, g))
            continue
        given = 1.0 if g is None else g.data if isinstance(g, NdArray) else g
        value = np.broadcast_to(np.asarray(given, o.dtype), o.shape).copy()  # the output's type
        seeds.append(GradientSeed(value)(o))
    return seeds
