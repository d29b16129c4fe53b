"""Variables' and NdArrays' arithmetic operators and subscripts, installed on ``Variable``
and ``NdArray`` by this package (as Chainer does), so that the graph below does not know
the functions: ``x + y`` is ``add2``, ``x + 1`` is ``add_scalar``, ``2 - x`` is
``r_sub_scalar``, ``x @ y`` is NumPy's matmul, ``x[key]`` is ``get_item``, as in nnabla.
With an NdArray on either side, the function computes at once and gives an NdArray
(``param.data -= param.grad * 0.001``); ``+=`` and its kin change an NdArray in place.
"""
from __future__ import annotations

import numpy as np

from ..context import get_current_context
from ..graph import Variable, install_reshape
from ..ndarray import NdArray
from .array import reshape
from .linalg import matmul
from .math import (add2, add_scalar, div2, mul2, mul_scalar, pow2, pow_scalar, r_div_scalar,
                   r_pow_scalar, r_sub_scalar, sub2)
from .subscript import get_item, set_item

_OPERANDS = (Variable, NdArray)


def _add(x: Variable, other) -> Variable:
    return add2(x, other) if isinstance(other, _OPERANDS) else add_scalar(x, other)


def _sub(x: Variable, other) -> Variable:
    return sub2(x, other) if isinstance(other, _OPERANDS) else add_scalar(x, -other)


def _mul(x: Variable, other) -> Variable:
    return mul2(x, other) if isinstance(other, _OPERANDS) else mul_scalar(x, other)


def _truediv(x: Variable, other) -> Variable:
    return div2(x, other) if isinstance(other, _OPERANDS) else mul_scalar(x, 1.0 / other)


def _pow(x: Variable, other) -> Variable:
    return pow2(x, other) if isinstance(other, _OPERANDS) else pow_scalar(x, other)


def _neg(x: Variable) -> Variable:
    return mul_scalar(x, -1.0)


OPERATORS = {
    "__add__": _add, "__radd__": _add,
    "__sub__": _sub, "__rsub__": r_sub_scalar,
    "__mul__": _mul, "__rmul__": _mul,
    "__truediv__": _truediv, "__rtruediv__": r_div_scalar,
    "__pow__": _pow, "__rpow__": r_pow_scalar,
    "__neg__": _neg,
    "__matmul__": matmul, "__rmatmul__": lambda x, other: matmul(other, x),
}


def _in_float(operator):
    """``operator`` on an NdArray of integers computes in the context's float type, as
    nnabla's (``NdArray`` of int32 ``/ 2`` holds halves)."""
    def on_arrays(x: NdArray, *other):
        if not np.issubdtype(x.dtype, np.floating):
            x = NdArray.from_numpy_array(x.data.astype(get_current_context().dtype))
        return operator(x, *other)
    return on_arrays


def _in_place(operator):
    """``x op= other`` on an NdArray: the result written into x's array, x returned."""
    def update(x: NdArray, other) -> NdArray:
        x.data[...] = operator(x, other).data
        return x
    return update


IN_PLACE = {"__iadd__": "__add__", "__isub__": "__sub__", "__imul__": "__mul__",
            "__itruediv__": "__truediv__", "__ipow__": "__pow__"}


def install_variable_operators() -> None:
    """Give ``Variable`` and ``NdArray`` their arithmetic operators and subscripts, and
    ``Variable`` the Reshape behind ``reshape``."""
    for name, operator in OPERATORS.items():
        setattr(Variable, name, operator)
        setattr(NdArray, name, _in_float(operator))
    for name, operator in IN_PLACE.items():
        setattr(NdArray, name, _in_place(OPERATORS[operator]))
    for cls in (Variable, NdArray):
        cls.__getitem__ = get_item
        cls.__setitem__ = set_item
    install_reshape(reshape)
