"""Batched linear algebra: batch_inv, batch_det, batch_logdet and batch_cholesky, each
over a batch of square matrices of shape (B, N, N), as nnabla's."""
from __future__ import annotations

import numpy as np

from ..graph import Function, Variable
from .base import default_outputs

__all__ = ["batch_inv", "batch_det", "batch_logdet", "batch_cholesky"]


def _t(a):
    """Each matrix of a batch transposed."""
    return a.transpose(0, 2, 1)


class _Batched(Function):
    """Base of the functions of a (B, N, N) batch of square matrices."""

    def square(self, x: Variable) -> tuple[int, int, int]:
        if x.ndim != 3 or x.shape[1] != x.shape[2]:
            raise self.error(f"needs a batch of square matrices of shape (B, N, N), got shape "
                             f"{x.shape}; reshape a single matrix to (1, N, N)")
        return x.shape


class BatchInv(_Batched):
    """The inverse of each matrix."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def setup(self, inputs):
        (x,) = inputs
        return [(self.square(x), x.dtype)]

    def forward(self, xp, xs):
        try:
            return (xp.linalg.inv(xs[0]),)
        except np.linalg.LinAlgError:
            raise self.error("a matrix of the batch is singular; only invertible matrices have "
                             "an inverse") from None

    def backward(self, xp, xs, ys, gys, need_grads):
        yt = _t(ys[0])
        return (-(yt @ gys[0] @ yt),)


def batch_inv(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The inverse of each matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_inv", n_outputs, outputs)
    return BatchInv()(x)


class BatchDet(_Batched):
    """The determinant of each matrix, shape (B,)."""

    grad_depends_on_outputs = True

    def setup(self, inputs):
        (x,) = inputs
        return [(self.square(x)[:1], x.dtype)]

    def forward(self, xp, xs):
        return (xp.linalg.det(xs[0]).astype(xs[0].dtype, copy=False),)

    def backward(self, xp, xs, ys, gys, need_grads):
        scale = (gys[0] * ys[0])[:, None, None]
        return (scale * _t(xp.linalg.inv(xs[0])),)


def batch_det(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The determinant of each matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_det", n_outputs, outputs)
    return BatchDet()(x)


class BatchLogdet(_Batched):
    """log |det| of each matrix, shape (B,)."""

    def setup(self, inputs):
        (x,) = inputs
        return [(self.square(x)[:1], x.dtype)]

    def forward(self, xp, xs):
        return (xp.linalg.slogdet(xs[0])[1].astype(xs[0].dtype, copy=False),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0][:, None, None] * _t(xp.linalg.inv(xs[0])),)


def batch_logdet(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The log of the absolute determinant of each matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_logdet", n_outputs, outputs)
    return BatchLogdet()(x)


class BatchCholesky(_Batched):
    """The Cholesky factor of each symmetric positive definite matrix, read from its
    lower triangle: L (or U = L^T when ``upper``) with L L^T = X.  The gradient is the
    symmetric one, as nnabla's."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def __init__(self, upper: bool):
        self.upper = bool(upper)

    def setup(self, inputs):
        (x,) = inputs
        return [(self.square(x), x.dtype)]

    def forward(self, xp, xs):
        try:
            lower = xp.linalg.cholesky(xs[0])
        except np.linalg.LinAlgError:
            raise self.error("a matrix of the batch is not positive definite; the Cholesky "
                             "factor needs symmetric positive definite matrices") from None
        return (_t(lower).copy() if self.upper else lower,)

    def backward(self, xp, xs, ys, gys, need_grads):
        lower, g = (_t(ys[0]), _t(gys[0])) if self.upper else (ys[0], gys[0])
        phi = xp.tril(_t(lower) @ g)
        n = phi.shape[-1]
        phi[:, xp.arange(n), xp.arange(n)] *= 0.5
        inv = xp.linalg.inv(lower)
        s = _t(inv) @ phi @ inv
        return ((s + _t(s)) * 0.5,)


def batch_cholesky(x: Variable, upper: bool = False, n_outputs: int = -1,
                   outputs=None) -> Variable:
    """The lower (``upper``: upper) triangular Cholesky factor of each symmetric positive
    definite matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_cholesky", n_outputs, outputs)
    return BatchCholesky(upper)(x)
