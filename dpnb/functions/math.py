"""Arithmetic, elementwise: the binary and scalar operators, powers, atan2, extrema,
clipping of values and of gradients, n-ary sums and products, NaN/inf resets, and
the noise of virtual adversarial training.  Functions of one variable (exp, log,
trigonometric, rounding ...) are in elementary.py."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DpnbValueError
from ..graph import Function, Variable
from .base import (
    Binary,
    Scalar,
    Unary,
    argument_error,
    axes_of,
    base_axis_of,
    broadcast_shape,
    default_outputs,
    variadic_keywords,
)
from .reduction import sum as reduce_sum
from .specs import (FunctionSpec, and_inplace_false, attrs, binary, call, float_val, inplace_false,
                    none_to, scalar, without_params)

__all__ = [
    "add2", "sub2", "mul2", "div2", "pow2", "bc_add2", "add_n", "mul_n",
    "add_scalar", "mul_scalar", "pow_scalar", "r_sub_scalar", "r_div_scalar", "r_pow_scalar",
    "atan2", "maximum2", "minimum2", "maximum_scalar", "minimum_scalar", "mod2", "bit_shift",
    "clip_by_value", "clip_by_norm", "clip_grad_by_value", "clip_grad_by_norm",
    "reset_nan", "reset_inf", "vat_noise",
]


# -- binary operators --------------------------------------------------------

class Add2(Binary):
    """x0 + x1, with NumPy broadcasting."""

    nnabla_spec = FunctionSpec("Add2", "add2_param", ("inplace",), inplace_false, binary("add2"))

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0] + xs[1],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return self.reduce_grads((gy, gy), need_grads)


def add2(x0: Variable, x1: Variable, inplace: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """Elementwise sum (broadcasting)."""
    default_outputs("F.add2", n_outputs, outputs)
    return Add2()(x0, x1)


class BcAdd2(Add2):
    """x0 + x1 with broadcasting, under nnabla's name for it."""

    nnabla_spec = FunctionSpec("BcAdd2", "bc_add2_param", ("inplace",), inplace_false,
                               binary("bc_add2"))


def bc_add2(x0: Variable, x1: Variable, inplace: bool = False, n_outputs: int = -1,
            outputs=None) -> Variable:
    """Elementwise sum with broadcasting (what nnabla's ``+`` uses; the same as add2)."""
    default_outputs("F.bc_add2", n_outputs, outputs)
    return BcAdd2()(x0, x1)


class Sub2(Binary):
    """x0 - x1, with NumPy broadcasting."""

    nnabla_spec = FunctionSpec("Sub2", "sub2_param", ("inplace",), inplace_false, binary("sub2"))

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0] - xs[1],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return self.reduce_grads((gy, -gy if need_grads[1] else None), need_grads)


def sub2(x0: Variable, x1: Variable, inplace: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """Elementwise difference (broadcasting)."""
    default_outputs("F.sub2", n_outputs, outputs)
    return Sub2()(x0, x1)


class Mul2(Binary):
    """x0 * x1, with NumPy broadcasting."""

    nnabla_spec = FunctionSpec("Mul2", "mul2_param", ("inplace",), inplace_false, binary("mul2"))

    def forward_arrays(self, xp, xs):
        return (xs[0] * xs[1],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        g0 = gy * x1 if need_grads[0] else None
        g1 = gy * x0 if need_grads[1] else None
        return self.reduce_grads((g0, g1), need_grads)


def mul2(x0: Variable, x1: Variable, inplace: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """Elementwise product (broadcasting)."""
    default_outputs("F.mul2", n_outputs, outputs)
    return Mul2()(x0, x1)


class Div2(Binary):
    """x0 / x1, with NumPy broadcasting."""

    nnabla_spec = FunctionSpec("Div2", "div2_param", ("inplace",), inplace_false, binary("div2"))

    def forward_arrays(self, xp, xs):
        return (xs[0] / xs[1],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        g0 = gy / x1 if need_grads[0] else None
        g1 = -gy * x0 / (x1 * x1) if need_grads[1] else None
        return self.reduce_grads((g0, g1), need_grads)


def div2(x0: Variable, x1: Variable, inplace: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """Elementwise quotient (broadcasting)."""
    default_outputs("F.div2", n_outputs, outputs)
    return Div2()(x0, x1)


class Pow2(Binary):
    """x0 ** x1, with NumPy broadcasting."""

    nnabla_spec = FunctionSpec("Pow2", "pow2_param", ("inplace",), inplace_false, binary("pow2"))

    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (xs[0] ** xs[1],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (y,), (gy,) = xs, ys, gys
        g0 = gy * x1 * x0 ** (x1 - 1) if need_grads[0] else None
        g1 = gy * y * xp.log(x0) if need_grads[1] else None
        return self.reduce_grads((g0, g1), need_grads)


def pow2(x0: Variable, x1: Variable, inplace: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """Elementwise power x0 ** x1 (broadcasting); the gradient to x1 needs x0 > 0."""
    default_outputs("F.pow2", n_outputs, outputs)
    return Pow2()(x0, x1)


class ATan2(Binary):
    """The angle of the point (x1, x0): arctan(x0 / x1) in the right quadrant."""

    nnabla_spec = without_params("ATan2", "atan2")

    def forward_arrays(self, xp, xs):
        return (xp.arctan2(xs[0], xs[1]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        scale = gy / (x0 * x0 + x1 * x1)
        return self.reduce_grads((scale * x1, -scale * x0), need_grads)


def atan2(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise arctan(x0 / x1) over all four quadrants (broadcasting)."""
    default_outputs("F.atan2", n_outputs, outputs)
    return ATan2()(x0, x1)


class Maximum2(Binary):
    """The larger of x0 and x1; on a tie the gradient goes to x1, as in nnabla."""

    nnabla_spec = without_params("Maximum2", "maximum2")

    def forward_arrays(self, xp, xs):
        return (xp.maximum(xs[0], xs[1]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        first = x0 > x1
        return self.reduce_grads((gy * first, gy * ~first), need_grads)


def maximum2(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise maximum of two variables (broadcasting)."""
    default_outputs("F.maximum2", n_outputs, outputs)
    return Maximum2()(x0, x1)


class Minimum2(Binary):
    """The smaller of x0 and x1; on a tie the gradient goes to x1, as in nnabla."""

    nnabla_spec = without_params("Minimum2", "minimum2")

    def forward_arrays(self, xp, xs):
        return (xp.minimum(xs[0], xs[1]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        first = x0 < x1
        return self.reduce_grads((gy * first, gy * ~first), need_grads)


def minimum2(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise minimum of two variables (broadcasting)."""
    default_outputs("F.minimum2", n_outputs, outputs)
    return Minimum2()(x0, x1)


class Mod2(Binary):
    """The remainder of x0 / x1: C's fmod (sign of x0) for float inputs or ``fmod``,
    else Python's mod (sign of x1).  No gradient, as in nnabla."""

    nnabla_spec = FunctionSpec("Mod2", "mod2_param", ("fmod",), attrs("fmod"),
                               call("mod2", "fmod"))

    differentiable = False

    def __init__(self, fmod: bool):
        self.fmod = bool(fmod)

    def output_specs(self, inputs):
        self.truncating = self.fmod or np.issubdtype(inputs[0].dtype, np.floating)
        return super().output_specs(inputs)

    def forward_arrays(self, xp, xs):
        return ((xp.fmod if self.truncating else xp.mod)(xs[0], xs[1]),)


def mod2(x0: Variable, x1: Variable, fmod: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """Elementwise remainder (broadcasting): numpy.fmod where x0 is float or ``fmod``,
    else numpy.mod; not differentiable."""
    default_outputs("F.mod2", n_outputs, outputs)
    return Mod2(fmod)(x0, x1)


class BitShift(Binary):
    """x shifted bitwise by ``shift`` (cast to x's unsigned type) to the LEFT or RIGHT;
    shifts of the bit width or more give 0.  Integer-valued: no gradient."""

    nnabla_spec = FunctionSpec("BitShift", "bit_shift_param", ("direction",), attrs("direction"),
                               call("bit_shift", "direction"))

    differentiable = False

    def __init__(self, direction: str):
        self.direction = direction

    def output_specs(self, inputs):
        if self.direction not in ("LEFT", "RIGHT"):
            raise self.error(f"direction must be 'LEFT' or 'RIGHT', got {self.direction!r}")
        x, shift = inputs
        if not np.issubdtype(x.dtype, np.unsignedinteger):
            raise self.error(f"x must have an unsigned integer dtype, got {np.dtype(x.dtype)}; "
                             "make it with e.g. nn.Variable.from_numpy_array(a.astype(np.uint8))")
        return [(broadcast_shape(self, x.shape, shift.shape), x.dtype)]

    def forward_arrays(self, xp, xs):
        x, shift = xs
        shift = shift.astype(x.dtype)
        return ((xp.left_shift if self.direction == "LEFT" else xp.right_shift)(x, shift),)


def bit_shift(x: Variable, shift: Variable, direction: str = "LEFT", n_outputs: int = -1,
              outputs=None) -> Variable:
    """Elementwise bit shift of an unsigned integer variable (broadcasting)."""
    default_outputs("F.bit_shift", n_outputs, outputs)
    return BitShift(direction)(x, shift)


# -- n-ary sums and products ----------------------------------------------------

class _NAry(Function):
    """Base of the functions of one or more inputs of one shape, combined elementwise;
    ``set_active_input_mask`` leaves some inputs out, as nnabla's AddN and MulN do."""

    active: list[bool] | None = None  # the inputs that take part; None: all

    def set_active_input_mask(self, mask) -> None:
        """Compute as if only the inputs where ``mask`` is True were given; the others get
        no gradient."""
        mask = [bool(m) for m in mask]
        if len(mask) != len(self.inputs) or not any(mask):
            raise self.error(f"set_active_input_mask needs one flag per input "
                             f"({len(self.inputs)}), at least one True, got {mask}")
        self.active = mask

    def _taking_part(self, items: list) -> list:
        return items if self.active is None else [v for v, a in zip(items, self.active) if a]

    def _to_every_input(self, grads: tuple) -> tuple:
        """The gradients of the inputs taking part, spread over all inputs (None elsewhere)."""
        if self.active is None:
            return grads
        taking_part = iter(grads)
        return tuple(next(taking_part) if a else None for a in self.active)

    def output_specs(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable, got none")
        shape = inputs[0].shape
        for i, x in enumerate(inputs[1:], 1):
            if x.shape != shape:
                raise self.error(f"every input must have the shape of input 0, {shape}; input "
                                 f"{i} has {x.shape}; broadcast or reshape the inputs first")
        return [(shape, np.result_type(*[x.dtype for x in inputs]))]


class AddN(_NAry):
    """x[0] + ... + x[n-1]."""

    nnabla_spec = without_params("AddN", "add_n")

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        xs = self._taking_part(xs)
        y = xs[0].astype(self.outputs[0].dtype, copy=True)
        for x in xs[1:]:
            y += x
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return self._to_every_input(
            tuple(gys[0] if need else None for need in self._taking_part(need_grads)))


def add_n(*x: Variable, **kw) -> Variable:
    """Elementwise sum of one or more variables of one shape."""
    variadic_keywords("F.add_n", kw, {})
    return AddN()(*x)


class MulN(_NAry):
    """x[0] * ... * x[n-1]; each gradient is the product of the other inputs (exact
    where inputs are zero)."""

    nnabla_spec = without_params("MulN", "mul_n")

    def forward_arrays(self, xp, xs):
        xs = self._taking_part(xs)
        y = xs[0].astype(self.outputs[0].dtype, copy=True)
        for x in xs[1:]:
            y *= x
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        xs, need_grads = self._taking_part(xs), self._taking_part(need_grads)
        # before[i] is the product of xs[:i], after[i] that of xs[i + 1:]
        n = len(xs)
        before, after = [None] * n, [None] * n
        for i in range(1, n):
            before[i] = xs[0] if i == 1 else before[i - 1] * xs[i - 1]
        for i in range(n - 2, -1, -1):
            after[i] = xs[n - 1] if i == n - 2 else after[i + 1] * xs[i + 1]
        grads = []
        for need, parts in zip(need_grads, zip(before, after)):
            g = gys[0] if need else None
            for part in parts:
                if need and part is not None:
                    g = g * part
            grads.append(g)
        return self._to_every_input(tuple(grads))


def mul_n(*x: Variable, **kw) -> Variable:
    """Elementwise product of one or more variables of one shape."""
    variadic_keywords("F.mul_n", kw, {})
    return MulN()(*x)


# -- scalar operators ------------------------------------------------------------

class AddScalar(Scalar):
    """x + val."""

    nnabla_spec = FunctionSpec("AddScalar", "add_scalar_param", ("val", "inplace"),
                               and_inplace_false(float_val), scalar("add_scalar"))

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0] + self.val,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


def add_scalar(x: Variable, val: float = 1, inplace: bool = False, n_outputs: int = -1,
               outputs=None) -> Variable:
    """Add a number to every element."""
    default_outputs("F.add_scalar", n_outputs, outputs)
    return AddScalar(val)(x)


class MulScalar(Scalar):
    """x * val."""

    nnabla_spec = FunctionSpec("MulScalar", "mul_scalar_param", ("val", "inplace"),
                               and_inplace_false(float_val), scalar("mul_scalar"))

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0] * self.val,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * self.val,)


def mul_scalar(x: Variable, val: float = 1, inplace: bool = False, n_outputs: int = -1,
               outputs=None) -> Variable:
    """Multiply every element by a number."""
    default_outputs("F.mul_scalar", n_outputs, outputs)
    return MulScalar(val)(x)


class PowScalar(Scalar):
    """x ** val."""

    nnabla_spec = FunctionSpec("PowScalar", "pow_scalar_param", ("val", "inplace"),
                               and_inplace_false(float_val), scalar("pow_scalar"))

    def forward_arrays(self, xp, xs):
        return (xs[0] ** self.val,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        """val x^(val-1); for val 0 (the last derivative of an integer power) zero, not
        0 * x^-1, which is NaN at x = 0."""
        if self.val == 0:
            return (xp.zeros_like(gys[0]),)
        return (gys[0] * self.val * xs[0] ** (self.val - 1),)


def pow_scalar(x: Variable, val: float = 1, inplace: bool = False, n_outputs: int = -1,
               outputs=None) -> Variable:
    """Raise every element to the power ``val``."""
    default_outputs("F.pow_scalar", n_outputs, outputs)
    return PowScalar(val)(x)


class RSubScalar(Scalar):
    """val - x."""

    nnabla_spec = FunctionSpec("RSubScalar", "r_sub_scalar_param", ("val",), float_val,
                               scalar("r_sub_scalar"))

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (self.val - xs[0],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (-gys[0],)


def r_sub_scalar(x: Variable, val: float = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """A number minus every element (``val - x``)."""
    default_outputs("F.r_sub_scalar", n_outputs, outputs)
    return RSubScalar(val)(x)


class RDivScalar(Scalar):
    """val / x."""

    nnabla_spec = FunctionSpec("RDivScalar", "r_div_scalar_param", ("val",), float_val,
                               scalar("r_div_scalar"))

    def forward_arrays(self, xp, xs):
        return (self.val / xs[0],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        return (-gys[0] * self.val / (x * x),)


def r_div_scalar(x: Variable, val: float = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """A number divided by every element (``val / x``)."""
    default_outputs("F.r_div_scalar", n_outputs, outputs)
    return RDivScalar(val)(x)


class RPowScalar(Scalar):
    """val ** x."""

    nnabla_spec = FunctionSpec("RPowScalar", "r_pow_scalar_param", ("val",), float_val,
                               scalar("r_pow_scalar"))

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (self.val ** xs[0],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ys[0] * float(np.log(self.val)),)


def r_pow_scalar(x: Variable, val: float = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """A number raised to every element (``val ** x``); differentiable for val > 0."""
    default_outputs("F.r_pow_scalar", n_outputs, outputs)
    return RPowScalar(val)(x)


class MaximumScalar(Scalar):
    """max(x, val); where x equals val the gradient is 0, as in nnabla."""

    nnabla_spec = FunctionSpec("MaximumScalar", "maximum_scalar_param", ("val",), float_val,
                               scalar("maximum_scalar"))

    def forward_arrays(self, xp, xs):
        return (xp.maximum(xs[0], self.val),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * (xs[0] > self.val),)


def maximum_scalar(x: Variable, val: float = 1.0, n_outputs: int = -1,
                   outputs=None) -> Variable:
    """Every element raised to at least ``val``."""
    default_outputs("F.maximum_scalar", n_outputs, outputs)
    return MaximumScalar(val)(x)


class MinimumScalar(Scalar):
    """min(x, val); where x equals val the gradient is 0, as in nnabla."""

    nnabla_spec = FunctionSpec("MinimumScalar", "minimum_scalar_param", ("val",), float_val,
                               scalar("minimum_scalar"))

    def forward_arrays(self, xp, xs):
        return (xp.minimum(xs[0], self.val),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * (xs[0] < self.val),)


def minimum_scalar(x: Variable, val: float = 1.0, n_outputs: int = -1,
                   outputs=None) -> Variable:
    """Every element lowered to at most ``val``."""
    default_outputs("F.minimum_scalar", n_outputs, outputs)
    return MinimumScalar(val)(x)


class ResetNaN(Scalar):
    """x with its NaNs replaced by val; they pass no gradient."""

    nnabla_spec = FunctionSpec("ResetNaN", "reset_nan_param", ("val",), float_val,
                               scalar("reset_nan"))

    def forward_arrays(self, xp, xs):
        return (xp.where(xp.isnan(xs[0]), self.val, xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ~xp.isnan(xs[0]),)


def reset_nan(x0: Variable, val: float = 0, n_outputs: int = -1, outputs=None) -> Variable:
    """NaNs replaced by ``val``."""
    default_outputs("F.reset_nan", n_outputs, outputs)
    return ResetNaN(val)(x0)


class ResetInf(Scalar):
    """x with its infinities (either sign) replaced by val; they pass no gradient."""

    nnabla_spec = FunctionSpec("ResetInf", "reset_inf_param", ("val",), float_val,
                               scalar("reset_inf"))

    def forward_arrays(self, xp, xs):
        return (xp.where(xp.isinf(xs[0]), self.val, xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ~xp.isinf(xs[0]),)


def reset_inf(x0: Variable, val: float = 0, n_outputs: int = -1, outputs=None) -> Variable:
    """Infinities (-inf and inf) replaced by ``val``."""
    default_outputs("F.reset_inf", n_outputs, outputs)
    return ResetInf(val)(x0)


# -- functions of one variable ---------------------------------------------------


# -- clipping ---------------------------------------------------------------------

def _is_number(value) -> bool:
    return np.isscalar(value) and not isinstance(value, (str, bytes))


def clip_by_value(x: Variable, min: Variable | float, max: Variable | float) -> Variable:
    """``x`` clipped to [min, max], each a number or a variable (broadcasting):
    minimum(maximum(x, min), max), with those functions' gradients."""
    bounds = []
    for name, bound in (("min", min), ("max", max)):
        if not (_is_number(bound) or isinstance(bound, Variable)):
            raise argument_error("F.clip_by_value", f"{name} must be a number or an "
                                 f"nn.Variable, got {type(bound).__name__}")
        bounds.append(bound)
    low, high = bounds
    y = maximum_scalar(x, low) if _is_number(low) else maximum2(x, low)
    return minimum_scalar(y, high) if _is_number(high) else minimum2(y, high)


def clip_by_norm(x: Variable, clip_norm: Variable | float,
                 axis: int | Sequence[int] | None = None) -> Variable:
    """``x`` scaled down where its L2 norm over ``axis`` (None: all axes) exceeds
    ``clip_norm``: x * clip_norm / max(norm, clip_norm), as a graph of functions."""
    axes = axes_of("F.clip_by_norm", axis, x.ndim, "axis")
    norm = pow_scalar(reduce_sum(pow_scalar(x, 2.0), axes, True), 0.5)
    if isinstance(clip_norm, Variable):
        return x * clip_norm / maximum2(norm, clip_norm)
    if not _is_number(clip_norm) or not clip_norm > 0:  # a ValueError, as nnabla's
        raise DpnbValueError(f"F.clip_by_norm: clip_norm must be a positive number or an "
                             f"nn.Variable, got {clip_norm!r}")
    return x * clip_norm / maximum_scalar(norm, clip_norm)


class ClipGradByValue(Function):
    """The identity forward; backward clips the output gradient to [min, max]
    elementwise (min and max are inputs of x's shape that get no gradient)."""

    nnabla_spec = without_params("ClipGradByValue", "clip_grad_by_value")

    def output_specs(self, inputs):
        x, low, high = inputs
        for name, bound in (("min", low), ("max", high)):
            if bound.shape != x.shape:
                raise self.error(f"{name} must have the shape of x, {x.shape}, got {bound.shape}; "
                                 f"broadcast it first, e.g. F.broadcast({name}, x.shape)")
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xs[0].copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (_, low, high), (gy,) = xs, gys
        return (xp.where(gy > high, high, xp.where(gy < low, low, gy)), None, None)


def clip_grad_by_value(x: Variable, min: Variable, max: Variable, n_outputs: int = -1,
                       outputs=None) -> Variable:
    """``x`` unchanged; its gradient clipped to [min, max] elementwise in backward."""
    default_outputs("F.clip_grad_by_value", n_outputs, outputs)
    return ClipGradByValue()(x, min, max)


class ClipGradByNorm(Unary):
    """The identity forward; backward rescales the output gradient to L2 norm
    clip_norm over ``axes`` (always, not only where it is larger, as in nnabla)."""

    nnabla_spec = FunctionSpec("ClipGradByNorm", "clip_grad_by_norm_param", ("clip_norm", "axes"),
                               attrs(clip_norm=lambda fn: none_to(fn.clip_norm, 1.0),
                                     axes="reduced"),
                               call("clip_grad_by_norm", "clip_norm", "axes"))

    grad_depends_on_inputs = False

    def __init__(self, clip_norm: float, axes):
        self.clip_norm = clip_norm
        self.axes = axes

    def output_specs(self, inputs):
        if not _is_number(self.clip_norm):
            raise self.error(f"clip_norm must be a number, got {type(self.clip_norm).__name__}")
        self.reduced = axes_of(self, self.axes, inputs[0].ndim)
        return super().output_specs(inputs)

    def forward_arrays(self, xp, xs):
        return (xs[0].copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        norm = xp.sqrt((gy * gy).sum(axis=self.reduced, keepdims=True))
        return (gy * (self.clip_norm / norm),)


def clip_grad_by_norm(x: Variable, clip_norm: float | None = None,
                      axes: int | Sequence[int] | None = None, n_outputs: int = -1,
                      outputs=None) -> Variable:
    """``x`` unchanged; in backward its gradient rescaled to L2 norm ``clip_norm``
    (None: 1) over ``axes`` (None: all axes; an empty tuple: each element)."""
    default_outputs("F.clip_grad_by_norm", n_outputs, outputs)
    return ClipGradByNorm(1.0 if clip_norm is None else clip_norm, axes)(x)


class VATNoise(Function):
    """``eps * x / sqrt(sum x^2 + 1e-8)`` over each sample (the axes from ``base_axis``
    on).  Its backward is nnabla's device for virtual adversarial training: x gets a
    zero gradient and ``w``'s data is overwritten by ``eps`` times the output gradient."""

    nnabla_spec = FunctionSpec("VATNoise", "vat_noise_param", ("base_axis", "eps"),
                               attrs("base_axis", "eps"), call("vat_noise", "base_axis", "eps"))

    def __init__(self, base_axis: int, eps: float):
        self.base_axis, self.eps = base_axis, eps

    def output_specs(self, inputs):
        x, w = inputs
        if not _is_number(self.eps):
            raise self.error(f"eps must be a number, got {type(self.eps).__name__}")
        if x.shape != w.shape:
            raise self.error(f"w must have x's shape {x.shape} (it receives the gradient), got "
                             f"{w.shape}")
        self.axes = tuple(range(base_axis_of(self, self.base_axis, x.ndim), x.ndim)) if x.ndim \
            else ()
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x = xs[0]
        norm = xp.sqrt((x * x).sum(axis=self.axes, keepdims=True) + 1e-8)
        return ((self.eps * x / norm).astype(x.dtype, copy=False),)

    no_graph_backward = ("its backward is a device of virtual adversarial training (it writes "
                         "eps times the output gradient into w), not a derivative to build on")

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        self.inputs[1].d = self.eps * gys[0]
        return tuple(xp.zeros_like(x) if need else None for x, need in zip(xs, need_grads))


def vat_noise(x: Variable, w: Variable, base_axis: int = 1, eps: float = 1.0, n_outputs: int = -1,
              outputs=None) -> Variable:
    """The noise ``x`` scaled to L2 norm ``eps`` per sample (axes from ``base_axis`` on);
    backward writes ``eps`` times the output gradient into ``w`` and gives x none."""
    default_outputs("F.vat_noise", n_outputs, outputs)
    return VATNoise(base_axis, eps)(x, w)
