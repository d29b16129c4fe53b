"""nnabla's ``nnabla.backward_function.fused_batch_normalization``:
``FusedBatchNormalizationBackward``, the gradient of fused batch normalization as a
function of its own, made by differentiating dpnb's composite of the normalization."""
from __future__ import annotations

from collections.abc import Sequence

from .. import functions as F
from ..context import Context, context_scope
from ..errors import DpnbError
from ..functions.graph_module import GraphFunction
from ..graph import Variable
from . import _nothing
from .batch_normalization import gradient_of, normalization_on


class FusedBatchNormalizationBackward:
    """nnabla's class: made with fused batch normalization's arguments (but output_stat),
    ``is_add`` set where the forward had a residual z; called on ``(dy, x, beta, gamma,
    mean, variance, y[, z])``, it passes dy where y is positive (the relu; y is read for
    that mask only, with no gradient) and gives the gradients of x, beta and gamma, and
    of z (the masked dy) with ``is_add``."""

    def __init__(self, ctx: Context | None, axes: Sequence[int] = (1,),
                 decay_rate: float = 0.9, eps: float = 1e-05, batch_stat: bool = True,
                 nonlinearity: str = "relu"):
        if nonlinearity not in ("relu", ""):
            raise DpnbError(f"FusedBatchNormalizationBackward: nonlinearity must be 'relu' or "
                            f"'' (none), got {nonlinearity!r}")
        self.ctx = ctx
        self.axes, self.decay_rate, self.eps = list(axes), decay_rate, eps
        self.batch_stat, self.nonlinearity = batch_stat, nonlinearity
        self.is_add = False

    def __call__(self, dy: Variable, x: Variable, beta: Variable, gamma: Variable,
                 mean: Variable, variance: Variable, y: Variable, *z: Variable):
        if len(z) != int(bool(self.is_add)):
            raise DpnbError(f"FusedBatchNormalizationBackward: with is_add={self.is_add} it "
                            f"takes {8 if self.is_add else 7} variables (dy, x, beta, gamma, "
                            f"mean, variance, y{', z' if self.is_add else ''}), got {7 + len(z)}")
        relu, add = self.nonlinearity == "relu", bool(self.is_add)
        with context_scope(self.ctx) if self.ctx is not None else _nothing():
            norm = normalization_on(F.batch_normalization, (x, beta, gamma, mean, variance),
                                    self.axes, self.decay_rate, self.eps, self.batch_stat)

            def build(F, xs):
                dv = xs[0] * F.greater_scalar(xs[6], 0.0) if relu else xs[0]
                return gradient_of(norm, F, dv, xs[1:6], [0, 1, 2]) + ([dv] if add else [])
            shapes = [x.shape, beta.shape, gamma.shape] + ([z[0].shape] if add else [])
            return GraphFunction("FusedBatchNormalizationBackward", build, shapes)(
                dy, x, beta, gamma, mean, variance, y, *z)
