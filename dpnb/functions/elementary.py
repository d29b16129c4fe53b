"""Elementary functions of one variable, elementwise: exp and log, abs, the
trigonometric and hyperbolic functions and their inverses, sinc, erf, and the
rounding ones (floor, ceil, round, sign), whose gradient passes straight through
as in nnabla."""
from __future__ import annotations

import math

import numpy as np

from ..graph import Variable
from .base import Unary, default_outputs
from .specs import FunctionSpec, attrs, call, no_params, unary, without_params

__all__ = ["exp", "log", "abs", "sign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
           "cosh", "asinh", "acosh", "atanh", "sinc", "erf", "floor", "ceil", "round"]


class Exp(Unary):
    """exp(x); its gradient is its output."""

    nnabla_spec = without_params("Exp", "exp")

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (xp.exp(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ys[0],)


def exp(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise natural exponential."""
    default_outputs("F.exp", n_outputs, outputs)
    return Exp()(x)


class Log(Unary):
    """Natural logarithm."""

    nnabla_spec = without_params("Log", "log")

    def forward_arrays(self, xp, xs):
        return (xp.log(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xs[0],)


def log(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise natural logarithm."""
    default_outputs("F.log", n_outputs, outputs)
    return Log()(x)


class Abs(Unary):
    """|x|; at 0 the gradient is +1, as in nnabla."""

    nnabla_spec = without_params("Abs", "abs")

    def forward_arrays(self, xp, xs):
        return (xp.abs(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (xp.where(xs[0] >= 0, gys[0], -gys[0]),)


def abs(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise absolute value."""
    default_outputs("F.abs", n_outputs, outputs)
    return Abs()(x)


class Sin(Unary):
    """sin(x)."""

    nnabla_spec = without_params("Sin", "sin")

    def forward_arrays(self, xp, xs):
        return (xp.sin(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * xp.cos(xs[0]),)


def sin(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise sine."""
    default_outputs("F.sin", n_outputs, outputs)
    return Sin()(x)


class Cos(Unary):
    """cos(x)."""

    nnabla_spec = without_params("Cos", "cos")

    def forward_arrays(self, xp, xs):
        return (xp.cos(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (-gys[0] * xp.sin(xs[0]),)


def cos(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise cosine."""
    default_outputs("F.cos", n_outputs, outputs)
    return Cos()(x)


class Tan(Unary):
    """tan(x); its gradient 1 + y**2 comes from the output."""

    nnabla_spec = without_params("Tan", "tan")

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (xp.tan(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * (1 + ys[0] * ys[0]),)


def tan(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise tangent."""
    default_outputs("F.tan", n_outputs, outputs)
    return Tan()(x)


class ASin(Unary):
    """arcsin(x), for |x| <= 1."""

    nnabla_spec = without_params("ASin", "asin")

    def forward_arrays(self, xp, xs):
        return (xp.arcsin(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xp.sqrt(1 - xs[0] * xs[0]),)


def asin(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise inverse sine."""
    default_outputs("F.asin", n_outputs, outputs)
    return ASin()(x)


class ACos(Unary):
    """arccos(x), for |x| <= 1."""

    nnabla_spec = without_params("ACos", "acos")

    def forward_arrays(self, xp, xs):
        return (xp.arccos(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (-gys[0] / xp.sqrt(1 - xs[0] * xs[0]),)


def acos(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise inverse cosine."""
    default_outputs("F.acos", n_outputs, outputs)
    return ACos()(x)


class ATan(Unary):
    """arctan(x)."""

    nnabla_spec = without_params("ATan", "atan")

    def forward_arrays(self, xp, xs):
        return (xp.arctan(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / (1 + xs[0] * xs[0]),)


def atan(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise inverse tangent."""
    default_outputs("F.atan", n_outputs, outputs)
    return ATan()(x)


class Sinh(Unary):
    """sinh(x)."""

    nnabla_spec = without_params("Sinh", "sinh")

    def forward_arrays(self, xp, xs):
        return (xp.sinh(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * xp.cosh(xs[0]),)


def sinh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise hyperbolic sine."""
    default_outputs("F.sinh", n_outputs, outputs)
    return Sinh()(x)


class Cosh(Unary):
    """cosh(x)."""

    nnabla_spec = without_params("Cosh", "cosh")

    def forward_arrays(self, xp, xs):
        return (xp.cosh(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * xp.sinh(xs[0]),)


def cosh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise hyperbolic cosine."""
    default_outputs("F.cosh", n_outputs, outputs)
    return Cosh()(x)


class ASinh(Unary):
    """arsinh(x)."""

    nnabla_spec = without_params("ASinh", "asinh")

    def forward_arrays(self, xp, xs):
        return (xp.arcsinh(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xp.sqrt(xs[0] * xs[0] + 1),)


def asinh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise inverse hyperbolic sine."""
    default_outputs("F.asinh", n_outputs, outputs)
    return ASinh()(x)


class ACosh(Unary):
    """arcosh(x), for x >= 1."""

    nnabla_spec = without_params("ACosh", "acosh")

    def forward_arrays(self, xp, xs):
        return (xp.arccosh(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xp.sqrt(xs[0] * xs[0] - 1),)


def acosh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise inverse hyperbolic cosine."""
    default_outputs("F.acosh", n_outputs, outputs)
    return ACosh()(x)


class ATanh(Unary):
    """artanh(x), for |x| < 1."""

    nnabla_spec = without_params("ATanh", "atanh")

    def forward_arrays(self, xp, xs):
        return (xp.arctanh(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / (1 - xs[0] * xs[0]),)


def atanh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise inverse hyperbolic tangent."""
    default_outputs("F.atanh", n_outputs, outputs)
    return ATanh()(x)


class Sinc(Unary):
    """sin(x) / x (unnormalised, unlike numpy.sinc), 1 at x = 0 where the gradient is 0.
    Near 0, where cos(x) - sin(x)/x cancels, the slope is its series: accurate, and a
    polynomial, so that its graph (nn.grad) differentiates right at 0 too."""

    nnabla_spec = without_params("Sinc", "sinc")

    def forward_arrays(self, xp, xs):
        (x,) = xs
        zero = x == 0
        safe = xp.where(zero, 1, x)
        return (xp.where(zero, 1, xp.sin(safe) / safe),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        small = xp.abs(x) < 0.02  # there the series (to x^5) is closer than the formula
        safe = xp.where(small, 1, x)
        slope = (xp.cos(safe) - xp.sin(safe) / safe) / safe
        series = x * (x * x * (1 / 30 - x * x / 840) - 1 / 3)
        return (gys[0] * xp.where(small, series, slope),)


def sinc(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise sin(x) / x, with 1 at 0."""
    default_outputs("F.sinc", n_outputs, outputs)
    return Sinc()(x)


_SERIES_TERMS = 80     # of erf's power series, enough to 1e-16 for |x| < 3


_FRACTION_DEPTH = 60   # of erfc's continued fraction, enough to 1e-16 for |x| >= 3


def _erf(xp, x):
    """erf by array operations only (NumPy has none; CuPy's lives elsewhere), in float64:
    its power series 2/sqrt(pi) exp(-z^2) sum_n (2 z^2)^n z / (1 3 ... (2n+1)) below
    |x| = 3, where every term is positive, and above it 1 - erfc(z) by the continued
    fraction erfc(z) = exp(-z^2) / sqrt(pi) / (z + (1/2) / (z + 1 / (z + (3/2) / ...)))."""
    z = xp.abs(x.astype(np.float64))
    small = xp.minimum(z, 3.0)
    square = small * small
    term = small.copy()
    total = small.copy()
    for n in range(1, _SERIES_TERMS):
        term *= 2 * square / (2 * n + 1)
        total += term
    series = 2 / math.sqrt(math.pi) * xp.exp(-square) * total
    large = xp.maximum(z, 3.0)
    fraction = large.copy()
    for k in range(_FRACTION_DEPTH, 0, -1):
        fraction = large + (k / 2) / fraction
    tail = 1 - xp.exp(-large * large) / (math.sqrt(math.pi) * fraction)
    return (xp.sign(x) * xp.where(z < 3, series, tail)).astype(x.dtype)


class Erf(Unary):
    """The error function 2/sqrt(pi) int_0^x exp(-t^2) dt."""

    nnabla_spec = without_params("Erf", "erf")

    def forward_arrays(self, xp, xs):
        return (_erf(xp, xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        return (gys[0] * (2 / math.sqrt(math.pi)) * xp.exp(-x * x),)


def erf(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise error function."""
    default_outputs("F.erf", n_outputs, outputs)
    return Erf()(x)


class _StraightThrough(Unary):
    """Base of the piecewise-constant functions whose backward passes the output
    gradient through unchanged (the straight-through estimator), as nnabla's do."""

    grad_depends_on_inputs = False

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


class Floor(_StraightThrough):
    """The largest integer <= x."""

    nnabla_spec = FunctionSpec("Floor", "floor_param", (), no_params, unary("floor"))

    def forward_arrays(self, xp, xs):
        return (xp.floor(xs[0]),)


def floor(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise floor; the gradient passes straight through."""
    default_outputs("F.floor", n_outputs, outputs)
    return Floor()(x)


class Ceil(_StraightThrough):
    """The smallest integer >= x."""

    nnabla_spec = FunctionSpec("Ceil", "ceil_param", (), no_params, unary("ceil"))

    def forward_arrays(self, xp, xs):
        return (xp.ceil(xs[0]),)


def ceil(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise ceiling; the gradient passes straight through."""
    default_outputs("F.ceil", n_outputs, outputs)
    return Ceil()(x)


class Round(_StraightThrough):
    """The nearest integer, halves away from zero (C's round, not NumPy's to-even)."""

    nnabla_spec = FunctionSpec("Round", "round_param", (), no_params, unary("round"))

    def forward_arrays(self, xp, xs):
        (x,) = xs
        whole = xp.trunc(x)
        return (xp.where(xp.abs(x - whole) >= 0.5, whole + xp.sign(x), whole),)


def round(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise rounding, halves away from zero; the gradient passes straight through."""
    default_outputs("F.round", n_outputs, outputs)
    return Round()(x)


class Sign(_StraightThrough):
    """1 for x > 0, -1 for x < 0 and alpha at 0."""

    nnabla_spec = FunctionSpec("Sign", "sign_param", ("alpha",), attrs("alpha"),
                               call("sign", "alpha"))

    def __init__(self, alpha: float):
        self.alpha = float(alpha)

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (xp.where(x > 0, 1, xp.where(x < 0, -1, self.alpha)).astype(x.dtype),)


def sign(x: Variable, alpha: float = 1.0, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise sign, ``alpha`` at 0; the gradient passes straight through."""
    default_outputs("F.sign", n_outputs, outputs)
    return Sign(alpha)(x)
