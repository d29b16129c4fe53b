"""Variables' arithmetic operators, installed on ``Variable`` by this package (as Chainer
does), so that the graph below does not know the functions: ``x + y`` is ``add2``,
``x + 1`` is ``add_scalar``, ``2 - x`` is ``r_sub_scalar``, as in nnabla."""
from __future__ import annotations

from ..graph import Variable, install_reshape
from .array import reshape
from .math import (add2, add_scalar, div2, mul2, mul_scalar, pow2, pow_scalar, r_div_scalar,
                   r_pow_scalar, r_sub_scalar, sub2)


def _add(x: Variable, other) -> Variable:
    return add2(x, other) if isinstance(other, Variable) else add_scalar(x, other)


def _sub(x: Variable, other) -> Variable:
    return sub2(x, other) if isinstance(other, Variable) else add_scalar(x, -other)


def _mul(x: Variable, other) -> Variable:
    return mul2(x, other) if isinstance(other, Variable) else mul_scalar(x, other)


def _truediv(x: Variable, other) -> Variable:
    return div2(x, other) if isinstance(other, Variable) else mul_scalar(x, 1.0 / other)


def _pow(x: Variable, other) -> Variable:
    return pow2(x, other) if isinstance(other, Variable) else pow_scalar(x, other)


def _neg(x: Variable) -> Variable:
    return mul_scalar(x, -1.0)


OPERATORS = {
    "__add__": _add, "__radd__": _add,
    "__sub__": _sub, "__rsub__": r_sub_scalar,
    "__mul__": _mul, "__rmul__": _mul,
    "__truediv__": _truediv, "__rtruediv__": r_div_scalar,
    "__pow__": _pow, "__rpow__": r_pow_scalar,
    "__neg__": _neg,
}


def install_variable_operators() -> None:
    """Give ``Variable`` its arithmetic operators and the Reshape behind ``reshape``."""
    for name, operator in OPERATORS.items():
        setattr(Variable, name, operator)
    install_reshape(reshape)
