"""Arithmetic and elementwise math."""
from __future__ import annotations

import numpy as np

from ..graph import Variable
from .base import Binary, Scalar, Unary


__all__ = [
    "add2", "sub2", "mul2", "div2", "pow2",
    "add_scalar", "mul_scalar", "pow_scalar", "r_sub_scalar", "r_div_scalar", "r_pow_scalar",
    "exp", "log",
]


class Add2(Binary):
    """x0 + x1, with NumPy broadcasting."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] + xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return self.reduce_grads((gy, gy), need_grads)


def add2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise sum (broadcasting)."""
    return Add2()(x0, x1)


class Sub2(Binary):
    """x0 - x1, with NumPy broadcasting."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] - xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return self.reduce_grads((gy, -gy if need_grads[1] else None), need_grads)


def sub2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise difference (broadcasting)."""
    return Sub2()(x0, x1)


class Mul2(Binary):
    """x0 * x1, with NumPy broadcasting."""

    def forward(self, xp, xs):
        return (xs[0] * xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        g0 = gy * x1 if need_grads[0] else None
        g1 = gy * x0 if need_grads[1] else None
        return self.reduce_grads((g0, g1), need_grads)


def mul2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise product (broadcasting)."""
    return Mul2()(x0, x1)


class Div2(Binary):
    """x0 / x1, with NumPy broadcasting."""

    def forward(self, xp, xs):
        return (xs[0] / xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        g0 = gy / x1 if need_grads[0] else None
        g1 = -gy * x0 / (x1 * x1) if need_grads[1] else None
        return self.reduce_grads((g0, g1), need_grads)


def div2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise quotient (broadcasting)."""
    return Div2()(x0, x1)


class Pow2(Binary):
    """x0 ** x1, with NumPy broadcasting."""

    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (xs[0] ** xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (y,), (gy,) = xs, ys, gys
        g0 = gy * x1 * x0 ** (x1 - 1) if need_grads[0] else None
        g1 = gy * y * xp.log(x0) if need_grads[1] else None
        return self.reduce_grads((g0, g1), need_grads)


def pow2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise power x0 ** x1 (broadcasting); the gradient to x1 needs x0 > 0."""
    return Pow2()(x0, x1)


class AddScalar(Scalar):
    """x + val."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] + self.val,)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


def add_scalar(x: Variable, val: float = 1, inplace: bool = False) -> Variable:
    """Add a number to every element."""
    return AddScalar(val)(x)


class MulScalar(Scalar):
    """x * val."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] * self.val,)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * self.val,)


def mul_scalar(x: Variable, val: float = 1, inplace: bool = False) -> Variable:
    """Multiply every element by a number."""
    return MulScalar(val)(x)


class PowScalar(Scalar):
    """x ** val."""

    def forward(self, xp, xs):
        return (xs[0] ** self.val,)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * self.val * xs[0] ** (self.val - 1),)


def pow_scalar(x: Variable, val: float = 1, inplace: bool = False) -> Variable:
    """Raise every element to the power ``val``."""
    return PowScalar(val)(x)


class RSubScalar(Scalar):
    """val - x."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (self.val - xs[0],)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (-gys[0],)


def r_sub_scalar(x: Variable, val: float = 1) -> Variable:
    """A number minus every element (``val - x``)."""
    return RSubScalar(val)(x)


class RDivScalar(Scalar):
    """val / x."""

    def forward(self, xp, xs):
        return (self.val / xs[0],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        return (-gys[0] * self.val / (x * x),)


def r_div_scalar(x: Variable, val: float = 1) -> Variable:
    """A number divided by every element (``val / x``)."""
    return RDivScalar(val)(x)


class RPowScalar(Scalar):
    """val ** x."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (self.val ** xs[0],)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ys[0] * float(np.log(self.val)),)


def r_pow_scalar(x: Variable, val: float = 1) -> Variable:
    """A number raised to every element (``val ** x``); differentiable for val > 0."""
    return RPowScalar(val)(x)


class Exp(Unary):
    """exp(x); its gradient is its output."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (xp.exp(xs[0]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ys[0],)


def exp(x: Variable) -> Variable:
    """Elementwise natural exponential."""
    return Exp()(x)


class Log(Unary):
    """Natural logarithm."""

    def forward(self, xp, xs):
        return (xp.log(xs[0]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xs[0],)


def log(x: Variable) -> Variable:
    """Elementwise natural logarithm."""
    return Log()(x)
