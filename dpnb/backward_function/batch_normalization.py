"""nnabla's ``nnabla.backward_function.batch_normalization``: ``BatchNormalizationBackward``,
the gradient of batch normalization as a function of its own (of the output gradient
and the forward's inputs), made by differentiating dpnb's composite of the
normalization, so that it too is differentiable to any order."""
from __future__ import annotations

from collections.abc import Sequence

from .. import functions as F
from ..context import Context, context_scope
from ..errors import DpnbError
from ..functions.graph_module import GraphFunction, differentiate
from ..graph import Function, Variable, auto_forward
from . import _nothing


def normalization_on(build, operands: Sequence[Variable | None], *args) -> Function:
    """The normalization function ``build`` makes on stand-ins of ``operands``' shapes
    (never computed: its composite is what is used)."""
    with auto_forward(False):
        stand_ins = [None if v is None else Variable(v.shape, dtype=v.dtype) for v in operands]
        y = build(*stand_ins, *args)
    return (y[0] if isinstance(y, tuple) else y).parent


def gradient_of(norm: Function, F, seed: Variable, inputs: list, wanted: Sequence[int]) -> list:
    """The gradients, weighed by ``seed``, of the first output of ``norm``'s composite on
    ``inputs`` with respect to the inputs at ``wanted``, as variables: taken through
    identities that need a gradient, so that they do not depend on the inputs'
    ``need_grad``."""
    proxies = [F.identity(v) for v in inputs]
    for i in wanted:
        proxies[i].need_grad = True
    y = norm.composite(F, proxies)[0]
    found = differentiate([y], [seed], [proxies[i] for i in wanted], stop=proxies)
    return [F.constant(0.0, proxies[i].shape) if g is None else g
            for i, g in zip(wanted, found)]


class BatchNormalizationBackward:
    """nnabla's class: made with batch normalization's arguments (and which of beta and
    gamma it has), called on ``(dy, x, [beta], [gamma], mean, variance)``; gives the
    gradients of x, and of beta and gamma where given."""

    def __init__(self, ctx: Context | None, axes: Sequence[int] = (1,),
                 decay_rate: float = 0.9, eps: float = 1e-05, batch_stat: bool = True,
                 no_scale: bool = False, no_bias: bool = False):
        self.ctx = ctx
        self.axes, self.decay_rate, self.eps = list(axes), decay_rate, eps
        self.batch_stat, self.no_scale, self.no_bias = batch_stat, no_scale, no_bias

    def __call__(self, dy: Variable, x: Variable, *rest: Variable):
        count = 2 + (not self.no_bias) + (not self.no_scale)
        if len(rest) != count:
            raise DpnbError(f"BatchNormalizationBackward: after dy and x it takes "
                            f"{'' if self.no_bias else 'beta, '}"
                            f"{'' if self.no_scale else 'gamma, '}mean and variance "
                            f"({count} variables), got {len(rest)}")
        params = list(rest)
        beta = None if self.no_bias else params.pop(0)
        gamma = None if self.no_scale else params.pop(0)
        mean, variance = params
        with context_scope(self.ctx) if self.ctx is not None else _nothing():
            norm = normalization_on(F.batch_normalization, (x, beta, gamma, mean, variance),
                                    self.axes, self.decay_rate, self.eps, self.batch_stat)
            inputs = [x, *rest]
            wanted = list(range(count - 1))  # x, beta, gamma: those before the statistics

            def build(F, xs):
                return gradient_of(norm, F, xs[0], xs[1:], wanted)
            fn = GraphFunction("BatchNormalizationBackward", build,
                               [inputs[i].shape for i in wanted])
            return fn(dy, *inputs)
