"""Canonical polyadic (CP) decomposition by alternating least squares, as nnabla's
``nnabla.utils.factorization.cpd.ALS``: the same start (uniform factors from ``rng``,
RandomState(313) by default), update, normalization and stopping rule, so that
PF.cpd3_convolution starts from nnabla's factors."""
from __future__ import annotations

import string

import numpy as np


def _product(factors: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """The tensor sum_r weights[r] * (outer product of the factors' columns r)."""
    letters = string.ascii_letters[:len(factors)]
    spec = ",".join(f"{a}z" for a in letters) + ",z->" + letters
    return np.einsum(spec, *factors, weights)


class ALS:
    """Alternating least squares for the CP decomposition of an N-D array."""

    def solve(self, X: np.ndarray, rank: int, max_iter: int = 500,
              stopping_criterion: float = 1e-5, lambda_reg: float = 0.0,
              dtype=np.float32, rng: np.random.RandomState | None = None) -> tuple:
        """(factors, lambda): one (X.shape[n], rank) factor per axis, columns normalized
        (by their norm on the first sweep, by their largest value if above 1 after) and
        ``lambda`` the weights they were divided by.  Each sweep solves every factor in
        turn by least squares (ridge ``lambda_reg``); it stops after ``max_iter`` sweeps or
        once the explained share of ||X||^2 changes by less than ``stopping_criterion``
        (never checked where that is negative)."""
        rng = np.random.RandomState(313) if rng is None else rng
        ndim = X.ndim
        norm_x = np.sum(X ** 2)
        factors: list = [None] + [np.array(rng.rand(X.shape[n], rank), dtype=dtype)
                                  for n in range(1, ndim)]
        letters = string.ascii_letters[:ndim]
        criterion, weights = 0.0, None
        for sweep in range(max_iter):
            previous = criterion
            for n in range(ndim):
                others = [o for o in range(ndim) if o != n]
                gram = np.ones((rank, rank))
                for o in others:
                    gram = gram * (factors[o].T @ factors[o])
                spec = (letters + "," + ",".join(f"{letters[o]}z" for o in others)
                        + f"->{letters[n]}z")
                projected = np.einsum(spec, X, *(factors[o] for o in others))
                solved = projected @ np.linalg.pinv(gram + np.eye(rank) * lambda_reg)
                if sweep == 0:
                    weights = np.sqrt((solved ** 2).sum(axis=0))
                else:
                    weights = np.maximum(solved.max(axis=0), 1.0)
                factors[n] = solved / weights
            if stopping_criterion < 0:
                continue
            approx = _product(factors, weights)
            residual = norm_x + np.sum(approx ** 2) - 2 * np.sum(X * approx)
            criterion = 1.0 - residual / norm_x
            if sweep > 0 and abs(previous - criterion) < stopping_criterion:
                break
        return factors, weights
