"""Batch normalization."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable
from .nn import _workspace

__all__ = ["batch_normalization"]

_ROLES = ("beta", "gamma", "mean", "variance")


class BatchNormalization(Function):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, per index of ``axes``.

    With ``batch_stat`` the statistics are the batch's (biased variance), and
    the running ``mean``/``variance`` inputs are updated in place during forward
    as nnabla does: ``r = decay * r + (1 - decay) * s``, the variance entering
    with the unbiased factor M / (M - 1).  Without it the running statistics
    normalize, as at inference.  Gradients flow to x, beta and gamma only."""

    def __init__(self, roles: Sequence[str], axes: Sequence[int], decay_rate: float, eps: float,
                 batch_stat: bool, output_stat: bool):
        self.roles = tuple(roles)  # which of beta, gamma, mean, variance follow x in the inputs
        self.axes = axes
        self.decay_rate = float(decay_rate)
        self.eps = float(eps)
        self.batch_stat = bool(batch_stat)
        self.output_stat = bool(output_stat)

    def setup(self, inputs):
        x = inputs[0]
        axes = sorted({a + x.ndim if a < 0 else a for a in self.axes})
        if not axes or not all(0 <= a < x.ndim for a in axes) or len(axes) != len(self.axes):
            raise self.error(f"axes must be distinct axes of the {x.ndim}-D input "
                             f"(shape {x.shape}), got {list(self.axes)}")
        self.reduce_axes = tuple(a for a in range(x.ndim) if a not in axes)
        self.stat_shape = tuple(s if a in axes else 1 for a, s in enumerate(x.shape))
        for role, v in zip(self.roles, inputs[1:]):
            if v.shape != self.stat_shape:
                raise self.error(f"{role} must have shape {self.stat_shape} (1 except on axes "
                                 f"{axes}) for an input of shape {x.shape}, got {v.shape}")
            if role in ("mean", "variance") and self.batch_stat and v.parent is not None:
                raise self.error(f"{role} is updated in place with batch_stat=True, so it must be "
                                 "a leaf variable (a parameter), not the output of a function")
        if self.output_stat and not self.batch_stat:
            raise self.error("output_stat=True needs batch_stat=True: there are no batch "
                             "statistics to output otherwise")
        if not self.batch_stat and not {"mean", "variance"} <= set(self.roles):
            raise self.error("batch_stat=False normalizes with the running mean and variance, "
                             "so both must be given, got None")
        self.count = x.size // max(1, int(np.prod(self.stat_shape)))
        # With the kept axes next to each other (the usual channel axis), x is seen as
        # (before, kept, after) and the statistics are products along its contiguous rows.
        first, stop = axes[0], axes[-1] + 1
        self.rows_shape = None
        if axes == list(range(first, stop)):
            self.rows_shape = tuple(int(np.prod(x.shape[i:j]))
                                    for i, j in ((0, first), (first, stop), (stop, x.ndim)))
        dtype = x.dtype
        outputs = [(x.shape, dtype)]
        if self.output_stat:
            outputs += [(self.stat_shape, dtype), (self.stat_shape, dtype)]
        return outputs

    def _unpack(self, xs) -> dict:
        return dict(zip(self.roles, xs[1:]))

    def _sum(self, xp, a):
        """The sum of ``a`` over the reduced axes (shape ``stat_shape``)."""
        if self.rows_shape is None:
            return a.sum(axis=self.reduce_axes, keepdims=True)
        rows = a.reshape(self.rows_shape)
        # A product with ones reduces the contiguous rows faster than sum over strided axes.
        sums = xp.matmul(rows, xp.ones(self.rows_shape[2], a.dtype))
        return sums.sum(axis=0).reshape(self.stat_shape)

    def _dot(self, xp, a, b):
        """The sum of ``a * b`` over the reduced axes, without ``a * b`` as a temporary."""
        if self.rows_shape is None:
            return (a * b).sum(axis=self.reduce_axes, keepdims=True)
        rows_a = a.reshape(self.rows_shape)[:, :, None, :]
        rows_b = b.reshape(self.rows_shape)[:, :, :, None]
        return xp.matmul(rows_a, rows_b).sum(axis=0).reshape(self.stat_shape)

    def _scale(self, params, inv_std):
        """gamma / std: the factor on x - mean."""
        gamma = params.get("gamma")
        return inv_std if gamma is None else gamma * inv_std

    def forward(self, xp, xs):
        x, params = xs[0], self._unpack(xs)
        beta = params.get("beta")
        if self.batch_stat:
            mean = self._sum(xp, x) / self.count
            y = x - mean
            var = self._dot(xp, y, y) / self.count
            self._update_running(mean, var)
        else:
            mean, var = params["mean"], params["variance"]
        inv_std = 1 / xp.sqrt(var + self.eps)
        scale = self._scale(params, inv_std)
        if self.batch_stat:
            y *= scale
        else:
            # One pass fewer: x * scale + (beta - mean * scale).
            y = x * scale
            beta = -mean * scale if beta is None else beta - mean * scale
        if beta is not None:
            y += beta
        # Kept for backward: a copy of the running mean, which a later forward may update.
        self.mean = mean if self.batch_stat else mean.copy()
        self.inv_std = inv_std
        if self.output_stat:
            return y, mean, var
        return (y,)

    def _update_running(self, mean, var) -> None:
        """Fold the batch statistics into the running ones (a no-op where those are None)."""
        unbiased = self.count / max(self.count - 1, 1)
        running = dict(zip(self.roles, self.inputs[1:]))
        for role, batch_value in (("mean", mean), ("variance", var * unbiased)):
            if role in running:
                r = running[role]
                r.d = self.decay_rate * r.d + (1 - self.decay_rate) * batch_value

    def backward(self, xp, xs, ys, gys, need_grads):
        x, params = xs[0], self._unpack(xs)
        gy = gys[0]
        need = dict(zip(self.roles, need_grads[1:]))
        batch_terms = self.batch_stat and need_grads[0]
        grads = dict.fromkeys(_ROLES)
        if need.get("beta") or batch_terms:
            grads["beta"] = self._sum(xp, gy)
        if need.get("gamma") or batch_terms:
            centred = xp.subtract(x, self.mean, out=_workspace(xp, x.shape, x.dtype))
            grads["gamma"] = self._dot(xp, gy, centred) * self.inv_std
        gx = None
        if need_grads[0]:
            scale = self._scale(params, self.inv_std)
            gx = gy * scale
            if self.batch_stat:
                # Through the batch mean and variance (and the stat outputs, if any):
                # gx += coef * (x - mean) + shift.
                coef = -scale * self.inv_std * grads["gamma"] / self.count
                shift = -scale * grads["beta"] / self.count
                if self.output_stat:
                    coef += 2 * gys[2] / self.count
                    shift += gys[1] / self.count
                centred *= coef
                gx += centred
                gx += shift
        return (gx,) + tuple(grads[role] if need[role] else None for role in self.roles)


def batch_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                        mean: Variable | None, variance: Variable | None,
                        axes: Sequence[int] = (1,), decay_rate: float = 0.9, eps: float = 1e-05,
                        batch_stat: bool = True, output_stat: bool = False
                        ) -> Variable | tuple[Variable, Variable, Variable]:
    """Batch normalization over all axes but ``axes``; beta/gamma/mean/variance have
    size 1 except on ``axes``.  None drops beta (no bias) or gamma (no scale), and,
    with batch_stat=True, the running mean/variance update.  With ``output_stat``
    returns (y, batch_mean, batch_var)."""
    axes = [axes] if isinstance(axes, int) else list(axes)
    given = [(role, v) for role, v in zip(_ROLES, (beta, gamma, mean, variance)) if v is not None]
    fn = BatchNormalization([role for role, _ in given], axes, decay_rate, eps, batch_stat,
                            output_stat)
    return fn(x, *(v for _, v in given))
