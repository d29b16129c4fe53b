"""Finite-difference gradient checks in float64, shared by the function tests."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from nnabla_cases.functions import central_differences

import dpnb as nn


def check_grad(build: Callable[..., "nn.Variable"], inputs: Sequence[np.ndarray],
               need_grad: Sequence[bool] | None = None, eps: float = 1e-6,
               atol: float = 1e-6, rtol: float = 1e-5, seed: int = 0) -> "nn.Variable":
    """Compare the analytic gradients of ``build(*variables)`` with central
    differences of ``sum(output * w)`` for a fixed random ``w``.

    ``inputs`` must be float64 for the inputs checked; returns the output
    variable (forwarded) so callers can also check its values."""
    need_grad = [True] * len(inputs) if need_grad is None else list(need_grad)
    xs = [nn.Variable.from_numpy_array(np.array(a), need_grad=n) for a, n in zip(inputs, need_grad)]
    y = build(*xs)
    y.forward()
    w = np.random.RandomState(seed).randn(*y.shape)
    for x in xs:
        if x.need_grad:
            x.g = 0
    y.backward(w)

    def objective() -> float:
        y.forward()
        return float(np.sum(np.asarray(y.d, dtype=np.float64) * w))

    for i, x in enumerate(xs):
        if not x.need_grad:
            continue
        assert x.dtype == np.float64, f"input {i} must be float64 for a gradient check"
        numeric = central_differences(x.d, objective, eps)
        np.testing.assert_allclose(x.g, numeric, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {i}")
    y.forward()
    return y
