"""Comparisons and logic, elementwise: equal, greater, logical_and ... and where.

As in nnabla, every comparison and logical function returns 0/1 in a float array (the
inputs' float dtype, else the context's) and has no gradient: its output carries none,
so a graph that also uses it elsewhere still back-propagates through the rest."""
from __future__ import annotations

import numpy as np

from ..graph import Function, Variable
from .base import Binary, Scalar, Unary, default_outputs
from .specs import FunctionSpec, bool_val, float_val, scalar, without_params

__all__ = [
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    "equal_scalar", "not_equal_scalar", "greater_scalar", "greater_equal_scalar",
    "less_scalar", "less_equal_scalar",
    "logical_and", "logical_or", "logical_xor", "logical_not",
    "logical_and_scalar", "logical_or_scalar", "logical_xor_scalar",
    "isnan", "isinf", "where",
]


def _float_dtype(fn: Function, dtypes) -> np.dtype:
    """The dtype of a 0/1 result: the inputs' float type, else the context's."""
    kind = np.result_type(*dtypes)
    return kind if np.issubdtype(kind, np.floating) else np.dtype(fn.context.dtype)


class _Test:
    """Mixin of the 0/1 functions: a float output that carries no gradient."""

    differentiable = False

    def output_specs(self, inputs):
        ((shape, _),) = super().output_specs(inputs)
        self.dtype = _float_dtype(self, [x.dtype for x in inputs])
        return [(shape, self.dtype)]

    def result(self, mask):
        """The boolean ``mask`` as the output array."""
        return (mask.astype(self.dtype),)


class _BinaryTest(_Test, Binary):
    """Base of the 0/1 functions of two variables, with NumPy broadcasting."""


class _ScalarTest(_Test, Scalar):
    """Base of the 0/1 functions of a variable and a number ``val``."""


class _UnaryTest(_Test, Unary):
    """Base of the 0/1 functions of one variable."""


class Equal(_BinaryTest):
    """0/1: x0 == x1."""

    nnabla_spec = without_params("Equal", "equal")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] == xs[1])


def equal(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 == x1, else 0 (broadcasting)."""
    default_outputs("F.equal", n_outputs, outputs)
    return Equal()(x0, x1)


class NotEqual(_BinaryTest):
    """0/1: x0 != x1."""

    nnabla_spec = without_params("NotEqual", "not_equal")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] != xs[1])


def not_equal(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 != x1, else 0 (broadcasting)."""
    default_outputs("F.not_equal", n_outputs, outputs)
    return NotEqual()(x0, x1)


class Greater(_BinaryTest):
    """0/1: x0 > x1."""

    nnabla_spec = without_params("Greater", "greater")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] > xs[1])


def greater(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 > x1, else 0 (broadcasting)."""
    default_outputs("F.greater", n_outputs, outputs)
    return Greater()(x0, x1)


class GreaterEqual(_BinaryTest):
    """0/1: x0 >= x1."""

    nnabla_spec = without_params("GreaterEqual", "greater_equal")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] >= xs[1])


def greater_equal(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 >= x1, else 0 (broadcasting)."""
    default_outputs("F.greater_equal", n_outputs, outputs)
    return GreaterEqual()(x0, x1)


class Less(_BinaryTest):
    """0/1: x0 < x1."""

    nnabla_spec = without_params("Less", "less")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] < xs[1])


def less(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 < x1, else 0 (broadcasting)."""
    default_outputs("F.less", n_outputs, outputs)
    return Less()(x0, x1)


class LessEqual(_BinaryTest):
    """0/1: x0 <= x1."""

    nnabla_spec = without_params("LessEqual", "less_equal")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] <= xs[1])


def less_equal(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 <= x1, else 0 (broadcasting)."""
    default_outputs("F.less_equal", n_outputs, outputs)
    return LessEqual()(x0, x1)


class EqualScalar(_ScalarTest):
    """0/1: x0 == val."""

    nnabla_spec = FunctionSpec("EqualScalar", "equal_scalar_param", ("val",), float_val,
                               scalar("equal_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] == self.val)


def equal_scalar(x0: Variable, val: float = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 == val, else 0."""
    default_outputs("F.equal_scalar", n_outputs, outputs)
    return EqualScalar(val)(x0)


class NotEqualScalar(_ScalarTest):
    """0/1: x0 != val."""

    nnabla_spec = FunctionSpec("NotEqualScalar", "not_equal_scalar_param", ("val",), float_val,
                               scalar("not_equal_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] != self.val)


def not_equal_scalar(x0: Variable, val: float = 1, n_outputs: int = -1,
                     outputs=None) -> Variable:
    """1 where x0 != val, else 0."""
    default_outputs("F.not_equal_scalar", n_outputs, outputs)
    return NotEqualScalar(val)(x0)


class GreaterScalar(_ScalarTest):
    """0/1: x0 > val."""

    nnabla_spec = FunctionSpec("GreaterScalar", "greater_scalar_param", ("val",), float_val,
                               scalar("greater_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] > self.val)


def greater_scalar(x0: Variable, val: float = 1, n_outputs: int = -1,
                   outputs=None) -> Variable:
    """1 where x0 > val, else 0."""
    default_outputs("F.greater_scalar", n_outputs, outputs)
    return GreaterScalar(val)(x0)


class GreaterEqualScalar(_ScalarTest):
    """0/1: x0 >= val."""

    nnabla_spec = FunctionSpec("GreaterEqualScalar", "greater_equal_scalar_param", ("val",),
                               float_val, scalar("greater_equal_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] >= self.val)


def greater_equal_scalar(x0: Variable, val: float = 1, n_outputs: int = -1,
                         outputs=None) -> Variable:
    """1 where x0 >= val, else 0."""
    default_outputs("F.greater_equal_scalar", n_outputs, outputs)
    return GreaterEqualScalar(val)(x0)


class LessScalar(_ScalarTest):
    """0/1: x0 < val."""

    nnabla_spec = FunctionSpec("LessScalar", "less_scalar_param", ("val",), float_val,
                               scalar("less_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] < self.val)


def less_scalar(x0: Variable, val: float = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 < val, else 0."""
    default_outputs("F.less_scalar", n_outputs, outputs)
    return LessScalar(val)(x0)


class LessEqualScalar(_ScalarTest):
    """0/1: x0 <= val."""

    nnabla_spec = FunctionSpec("LessEqualScalar", "less_equal_scalar_param", ("val",), float_val,
                               scalar("less_equal_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] <= self.val)


def less_equal_scalar(x0: Variable, val: float = 1, n_outputs: int = -1,
                      outputs=None) -> Variable:
    """1 where x0 <= val, else 0."""
    default_outputs("F.less_equal_scalar", n_outputs, outputs)
    return LessEqualScalar(val)(x0)


class LogicalAnd(_BinaryTest):
    """0/1: x0 and x1 (nonzero is true)."""

    nnabla_spec = without_params("LogicalAnd", "logical_and")

    def forward_arrays(self, xp, xs):
        return self.result(xp.logical_and(xs[0], xs[1]))


def logical_and(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where both are nonzero, else 0 (broadcasting)."""
    default_outputs("F.logical_and", n_outputs, outputs)
    return LogicalAnd()(x0, x1)


class LogicalOr(_BinaryTest):
    """0/1: x0 or x1 (nonzero is true)."""

    nnabla_spec = without_params("LogicalOr", "logical_or")

    def forward_arrays(self, xp, xs):
        return self.result(xp.logical_or(xs[0], xs[1]))


def logical_or(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where either is nonzero, else 0 (broadcasting)."""
    default_outputs("F.logical_or", n_outputs, outputs)
    return LogicalOr()(x0, x1)


class LogicalXor(_BinaryTest):
    """0/1: x0 xor x1 (nonzero is true)."""

    nnabla_spec = without_params("LogicalXor", "logical_xor")

    def forward_arrays(self, xp, xs):
        return self.result(xp.logical_xor(xs[0], xs[1]))


def logical_xor(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where exactly one is nonzero, else 0 (broadcasting)."""
    default_outputs("F.logical_xor", n_outputs, outputs)
    return LogicalXor()(x0, x1)


class LogicalAndScalar(_ScalarTest):
    """0/1: x0 and val."""

    nnabla_spec = FunctionSpec("LogicalAndScalar", "logical_and_scalar_param", ("val",), bool_val,
                               scalar("logical_and_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xp.logical_and(xs[0], bool(self.val)))


def logical_and_scalar(x0: Variable, val: bool, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 is nonzero and ``val`` is true, else 0."""
    default_outputs("F.logical_and_scalar", n_outputs, outputs)
    return LogicalAndScalar(val)(x0)


class LogicalOrScalar(_ScalarTest):
    """0/1: x0 or val."""

    nnabla_spec = FunctionSpec("LogicalOrScalar", "logical_or_scalar_param", ("val",), bool_val,
                               scalar("logical_or_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xp.logical_or(xs[0], bool(self.val)))


def logical_or_scalar(x0: Variable, val: bool, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 is nonzero or ``val`` is true, else 0."""
    default_outputs("F.logical_or_scalar", n_outputs, outputs)
    return LogicalOrScalar(val)(x0)


class LogicalXorScalar(_ScalarTest):
    """0/1: x0 xor val."""

    nnabla_spec = FunctionSpec("LogicalXorScalar", "logical_xor_scalar_param", ("val",), bool_val,
                               scalar("logical_xor_scalar"))

    def forward_arrays(self, xp, xs):
        return self.result(xp.logical_xor(xs[0], bool(self.val)))


def logical_xor_scalar(x0: Variable, val: bool, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where exactly one of x0 != 0 and ``val`` is true, else 0."""
    default_outputs("F.logical_xor_scalar", n_outputs, outputs)
    return LogicalXorScalar(val)(x0)


class LogicalNot(_UnaryTest):
    """0/1: not x0 (x0 == 0)."""

    nnabla_spec = without_params("LogicalNot", "logical_not")

    def forward_arrays(self, xp, xs):
        return self.result(xs[0] == 0)


def logical_not(x0: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 is 0, else 0."""
    default_outputs("F.logical_not", n_outputs, outputs)
    return LogicalNot()(x0)


class IsNaN(_UnaryTest):
    """0/1: x0 is NaN."""

    nnabla_spec = without_params("IsNaN", "isnan")

    def forward_arrays(self, xp, xs):
        return self.result(xp.isnan(xs[0]))


def isnan(x0: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 is NaN, else 0."""
    default_outputs("F.isnan", n_outputs, outputs)
    return IsNaN()(x0)


class IsInf(_UnaryTest):
    """0/1: x0 is infinite."""

    nnabla_spec = without_params("IsInf", "isinf")

    def forward_arrays(self, xp, xs):
        return self.result(xp.isinf(xs[0]))


def isinf(x0: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """1 where x0 is -inf or inf, else 0."""
    default_outputs("F.isinf", n_outputs, outputs)
    return IsInf()(x0)


class Where(Function):
    """x_true where condition is nonzero, else x_false.  x_true and x_false have one
    shape, which starts with condition's (condition spreads over the remaining axes,
    as nnabla does, rather than NumPy's trailing alignment); condition gets no gradient."""

    nnabla_spec = without_params("Where", "where")

    def output_specs(self, inputs):
        condition, x_true, x_false = inputs
        if x_true.shape != x_false.shape:
            raise self.error(f"x_true and x_false must have one shape, got {x_true.shape} and "
                             f"{x_false.shape}; broadcast them to one shape first")
        lead = x_true.shape[:condition.ndim]
        if condition.ndim > x_true.ndim or lead != condition.shape:
            raise self.error(f"the shape of x_true and x_false, {x_true.shape}, must start with "
                             f"condition's shape {condition.shape}; reshape or broadcast "
                             "condition to their leading axes")
        self.spread = condition.shape + (1,) * (x_true.ndim - condition.ndim)
        return [(x_true.shape, np.result_type(x_true.dtype, x_false.dtype))]

    def forward_arrays(self, xp, xs):
        condition, x_true, x_false = xs
        return (xp.where(condition.reshape(self.spread) != 0, x_true, x_false),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        chosen = xs[0].reshape(self.spread) != 0
        return (None,
                gy * chosen if need_grads[1] else None,
                gy * ~chosen if need_grads[2] else None)


def where(condition: Variable, x_true: Variable, x_false: Variable, n_outputs: int = -1,
          outputs=None) -> Variable:
    """Elementwise choice between x_true (condition nonzero) and x_false; differentiable
    in x_true and x_false."""
    default_outputs("F.where", n_outputs, outputs)
    return Where()(condition, x_true, x_false)
