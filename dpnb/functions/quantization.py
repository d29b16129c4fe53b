"""Quantization and pruning, simulated in floating point as nnabla's are: fixed-point,
power-of-two and min-max quantization, ONNX's linear (de)quantization, and pruning by
magnitude.  Their gradients are straight-through estimates, as nnabla's: the output
gradient passes unchanged, or masked to where the input lies in the representable range
(``ste_fine_grained``); they are not the forward's derivative (which is zero)."""
from __future__ import annotations

import numpy as np

from ..graph import Function, Variable
from .base import (Unary, argument_error, broadcast_shape, computed_into, default_outputs,
                   flag_of, number_of, round_half_away, sum_to)
from .specs import FunctionSpec, attrs, call, public, without_params

__all__ = ["prune", "fixed_point_quantize", "pow2_quantize", "min_max_quantize",
           "quantize_linear", "dequantize_linear"]


# -- pruning -----------------------------------------------------------------------

class Prune(Unary):
    """x with its smallest magnitudes zeroed: those below the one at ``rate`` of the way
    through |x| sorted (rate 1 zeroes all); the gradient passes straight through."""

    nnabla_spec = FunctionSpec("Prune", "prune_param", ("rate",), attrs("rate"),
                               call("prune", "rate"))

    grad_depends_on_inputs = False

    def __init__(self, rate: float):
        self.rate = rate

    def forward_arrays(self, xp, xs):
        (x,) = xs
        if self.rate == 1.0 or x.size == 0:
            return (xp.zeros_like(x),)
        magnitude = xp.abs(x)
        threshold = xp.sort(magnitude, axis=None)[int((x.size - 1) * self.rate)]
        return (xp.where(magnitude < threshold, 0, x).astype(x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


def prune(x: Variable, rate: float = 0.9, n_outputs: int = -1, outputs=None) -> Variable:
    """x with the fraction ``rate`` of its elements of least magnitude set to zero."""
    default_outputs("F.prune", n_outputs, None)
    rate = number_of("F.prune", "rate", rate)
    if not 0.0 <= rate <= 1.0:
        raise argument_error("F.prune", f"rate must be in [0, 1], got {rate}")
    return computed_into("F.prune", Prune(rate)(x), outputs)


# -- fixed-point and power-of-two quantization ------------------------------------------

class FixedPointQuantize(Unary):
    """x rounded (halves away from zero) to a multiple of ``delta`` and saturated to the
    n-bit range: +-(2^(n-1) - 1) delta signed, [0, (2^n - 1) delta] unsigned."""

    nnabla_spec = FunctionSpec("FixedPointQuantize", "fixed_point_quantize_param",
                               ("sign", "n", "delta", "ste_fine_grained"),
                               attrs("sign", "n", "delta", "ste_fine_grained"),
                               call("fixed_point_quantize", "sign", "n", "delta",
                                    "ste_fine_grained"))

    def __init__(self, sign: bool, n: int, delta: float, ste_fine_grained: bool):
        self.sign, self.n, self.delta = sign, n, delta
        self.ste_fine_grained = self.grad_depends_on_inputs = ste_fine_grained
        self.high = ((1 << (n - 1)) - 1 if sign else (1 << n) - 1) * delta
        self.low = -self.high if sign else 0.0

    def forward_arrays(self, xp, xs):
        (x,) = xs
        q = round_half_away(xp, x / self.delta) * self.delta
        return (xp.clip(q, self.low, self.high).astype(x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not self.ste_fine_grained:
            return (gys[0],)
        x = xs[0]
        return (gys[0] * ((x >= self.low) & (x <= self.high)),)


def fixed_point_quantize(x: Variable, sign: bool = True, n: int = 8, delta: float = 2**-4,
                         quantize: bool = True, ste_fine_grained: bool = True,
                         outputs=None) -> Variable:
    """x quantized to n-bit fixed point of step ``delta`` (x itself where not ``quantize``);
    the gradient passes straight, within the range only with ``ste_fine_grained``."""
    owner = "F.fixed_point_quantize"
    if not flag_of(owner, "quantize", quantize):
        return x
    n = number_of(owner, "n", n, integer=True)
    delta = number_of(owner, "delta", delta)
    if n < 1 or delta <= 0:
        raise argument_error(owner, f"n must be >= 1 and delta > 0, got n={n}, delta={delta}")
    y = FixedPointQuantize(flag_of(owner, "sign", sign), n, delta,
                           flag_of(owner, "ste_fine_grained", ste_fine_grained))(x)
    return computed_into(owner, y, outputs)


class Pow2Quantize(Unary):
    """|x| rounded to a power of two in the log domain and saturated to [2^(m - (2^k - 1)),
    2^m] (k: the bits left after the sign and the zero); with ``with_zero`` magnitudes
    below the least one over sqrt(2) become 0.  Unsigned, negative x gives 0 (with zero)
    or the least magnitude."""

    nnabla_spec = FunctionSpec("Pow2Quantize", "pow2_quantize_param",
                               ("sign", "with_zero", "n", "m", "ste_fine_grained"),
                               attrs("sign", "with_zero", "n", "m", "ste_fine_grained"),
                               call("pow2_quantize", "sign", "with_zero", "n", "m",
                                    "ste_fine_grained"))

    def __init__(self, sign: bool, with_zero: bool, n: int, m: int, ste_fine_grained: bool):
        self.sign, self.with_zero, self.n, self.m = sign, with_zero, n, m
        self.ste_fine_grained = self.grad_depends_on_inputs = ste_fine_grained
        bits = n - sign - with_zero
        self.high = 2.0 ** m
        self.low = 2.0 ** (m - ((1 << bits) - 1))

    def forward_arrays(self, xp, xs):
        (x,) = xs
        magnitude = xp.abs(x)
        with np.errstate(divide="ignore"):  # log2(0) = -inf, which gives 2^-inf = 0
            q = 2.0 ** round_half_away(xp, xp.log2(magnitude))
        q = xp.minimum(q, self.high)
        least = xp.where(magnitude < self.low * 2**-0.5, 0.0, self.low) if self.with_zero \
            else self.low
        q = xp.where(q < self.low, least, q)
        if self.sign:
            q = xp.where(x < 0, -q, q)
        else:
            q = xp.where(x < 0, 0.0 if self.with_zero else self.low, q)
        return (q.astype(x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not self.ste_fine_grained:
            return (gys[0],)
        x = xs[0]
        # |x| rounds above 2^m in the log domain from 2^(m + 1/2) on
        inside = xp.abs(x) < self.high * 2**0.5
        if not self.sign:
            inside = inside & (x >= 0)
        return (gys[0] * inside,)


def pow2_quantize(x: Variable, sign: bool = True, with_zero: bool = True, n: int = 8,
                  m: int = 1, quantize: bool = True, ste_fine_grained: bool = True,
                  outputs=None) -> Variable:
    """x quantized to n-bit powers of two up to 2^m (x itself where not ``quantize``); the
    gradient passes straight, within the range only with ``ste_fine_grained``."""
    owner = "F.pow2_quantize"
    if not flag_of(owner, "quantize", quantize):
        return x
    sign, with_zero = flag_of(owner, "sign", sign), flag_of(owner, "with_zero", with_zero)
    n = number_of(owner, "n", n, integer=True)
    m = number_of(owner, "m", m, integer=True)
    if n < 1 + sign + with_zero:
        raise argument_error(owner, f"n must be >= {1 + sign + with_zero} (the sign and the "
                                    f"zero take a bit each), got {n}")
    y = Pow2Quantize(sign, with_zero, n, m, flag_of(owner, "ste_fine_grained",
                                                  ste_fine_grained))(x)
    return computed_into(owner, y, outputs)


# -- min-max quantization ----------------------------------------------------------

def _nudged_range(xp, qr_min, qr_max, ql_min, ql_max):
    """The range [qr_min, qr_max] moved so that real 0 falls on a level (the zero point,
    rounded halves away from zero, within the levels), and the step between levels."""
    scale = (qr_max - qr_min) / (ql_max - ql_min)
    zero_point = ql_min - qr_min / scale
    zero_point = xp.where(zero_point <= ql_min, ql_min,
                          xp.where(zero_point >= ql_max, ql_max,
                                   round_half_away(xp, zero_point)))
    return (ql_min - zero_point) * scale, (ql_max - zero_point) * scale, scale


class NudgedRange(Function):
    """The nudged bounds of min-max quantization, for its backward as a graph: they only
    decide which elements the gradient passes, so they carry none."""

    no_nnabla_spec = "a part of MinMaxQuantize's backward graph"
    differentiable = False

    def output_specs(self, inputs):
        return [(inputs[0].shape, inputs[0].dtype)] * 2

    def forward_arrays(self, xp, xs):
        return _nudged_range(xp, *xs)[:2]


class MinMaxQuantize(Function):
    """x saturated to [qr_min, qr_max] nudged (see ``_nudged_range``) and rounded to one of
    the levels ql_min .. ql_max between.  Forward first sets qr_min and qr_max in place to
    x's min and max (``x_min_max``), or their moving average too (``ema``), then widens
    qr_max to qr_min + eps where the range is narrower; as nnabla's."""

    nnabla_spec = FunctionSpec("MinMaxQuantize", "min_max_quantize_param",
                               ("decay", "x_min_max", "ema", "ste_fine_grained", "eps"),
                               attrs("decay", "x_min_max", "ema", "ste_fine_grained", "eps"),
                               call("min_max_quantize", "decay", "x_min_max", "ema",
                                    "ste_fine_grained", "eps"))

    updated_inputs = (1, 2)  # qr_min and qr_max

    def __init__(self, decay: float, x_min_max: bool, ema: bool, ste_fine_grained: bool,
                 eps: float):
        self.decay, self.x_min_max, self.ema = decay, x_min_max, ema
        self.ste_fine_grained, self.eps = ste_fine_grained, eps

    def output_specs(self, inputs):
        x, *ranges = inputs
        shape = ranges[0].shape
        for name, v in zip(("qr_min", "qr_max", "ql_min", "ql_max"), ranges):
            if v.shape != shape or broadcast_shape(self, x.shape, shape) != x.shape:
                raise self.error(f"qr_min, qr_max, ql_min and ql_max must have one shape that "
                                 f"broadcasts to x's {x.shape}; got {name} of shape {v.shape} "
                                 f"(ql_min's {shape})")
        self.reduced = tuple(i for i, s in enumerate(shape) if s == 1)
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x, qr_min, qr_max, ql_min, ql_max = xs
        if self.x_min_max:
            x_min = x.min(axis=self.reduced, keepdims=True)
            x_max = x.max(axis=self.reduced, keepdims=True)
            if self.ema:
                x_min = self.decay * qr_min + (1 - self.decay) * x_min
                x_max = self.decay * qr_max + (1 - self.decay) * x_max
            qr_min, qr_max = x_min.astype(qr_min.dtype), x_max.astype(qr_max.dtype)
        qr_max = xp.where(qr_max - qr_min < self.eps, qr_min + self.eps, qr_max)
        qr_max = qr_max.astype(qr_min.dtype)
        self.update_input(1, qr_min)
        self.update_input(2, qr_max)
        low, high, scale = _nudged_range(xp, qr_min, qr_max, ql_min, ql_max)
        y = round_half_away(xp, (xp.clip(x, low, high) - low) / scale) * scale + low
        return (y.astype(x.dtype),)

    def _masked(self, xp, gy, x, low, high, need_grads):
        """The straight-through gradients, from the nudged range forward left."""
        gx = gy * ((x >= low) & (x <= high)) if self.ste_fine_grained else gy
        if self.x_min_max or self.ema:  # the range follows x: it is not learned
            return [gx, None, None, None, None]
        return [gx, sum_to(gy * (x < low), low.shape), sum_to(gy * (x > high), high.shape),
                None, None]

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        low, high, _ = _nudged_range(xp, *xs[1:])
        grads = self._masked(xp, gys[0], xs[0], low, high, need_grads)
        return tuple(g if need else None for g, need in zip(grads, need_grads))

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """backward's, with the nudged range from the ranges as the graph finds them."""
        from .graph_module import on_variables
        low, high = NudgedRange()(*xs[1:])
        grads = on_variables(lambda xp, *a: [g for g in self._masked(xp, *a, need_grads)
                                             if g is not None], gys[0], xs[0], low, high)
        grads += [None] * (len(xs) - len(grads))
        return [g if need else None for g, need in zip(grads, need_grads)]


def min_max_quantize(x: Variable, qr_min: Variable, qr_max: Variable, ql_min: Variable,
                     ql_max: Variable, decay: float = 0.999, x_min_max: bool = False,
                     ema: bool = False, ste_fine_grained: bool = True, eps: float = 0.01,
                     quantize: bool = True, outputs=None) -> Variable:
    """x quantized uniformly to the levels ql_min .. ql_max over the range [qr_min, qr_max]
    (x itself where not ``quantize``); see MinMaxQuantize for how the range is kept."""
    owner = "F.min_max_quantize"
    if not flag_of(owner, "quantize", quantize):
        return x
    decay = number_of(owner, "decay", decay)
    eps = number_of(owner, "eps", eps)
    if eps <= 0:
        raise argument_error(owner, f"eps must be > 0, got {eps}")
    y = MinMaxQuantize(decay, flag_of(owner, "x_min_max", x_min_max), flag_of(owner, "ema", ema),
                       flag_of(owner, "ste_fine_grained", ste_fine_grained), eps)(
        x, qr_min, qr_max, ql_min, ql_max)
    return computed_into(owner, y, outputs)


# -- ONNX's linear quantization ----------------------------------------------------

_DTYPES = {1: np.int8, 2: np.uint8}  # by nnabla's codes (NumPy's type numbers)
_DTYPE_CODES = {np.dtype(t): code for code, t in _DTYPES.items()}
_ROUND_MODES = ("HALF_AWAY_FROM_ZERO", "HALF_TO_EVEN")


def _scaled_shapes(fn: Function, inputs) -> list:
    x, scale, zero_point = inputs
    for name, v in (("scale", scale), ("zero_point", zero_point)):
        if broadcast_shape(fn, x.shape, v.shape) != x.shape:
            raise fn.error(f"{name} must broadcast to x's shape {x.shape}, got {v.shape}")
    return [(x.shape, x.dtype)]


class QuantizeLinear(Function):
    """round(x / scale) + zero_point saturated to the integer type's range (less its
    least value with ``narrow_range``), held as floats.  Forward rounds and saturates
    zero_point itself in place first, as nnabla's; its gradient is gy / scale."""

    nnabla_spec = FunctionSpec(
        "QuantizeLinear", "quantize_linear_param", ("round_mode", "narrow_range", "dtype"),
        attrs("round_mode", "narrow_range", "dtype"),
        lambda xs, p, n: public("quantize_linear")(*xs, p["round_mode"], p["narrow_range"],
                                                   _DTYPES.get(p["dtype"], p["dtype"])))

    updated_inputs = (2,)  # zero_point
    grad_skips_inputs = (0, 2)

    def __init__(self, round_mode: str, narrow_range: bool, dtype: np.dtype):
        self.round_mode, self.narrow_range = round_mode, narrow_range
        self.dtype = _DTYPE_CODES[dtype]
        info = np.iinfo(dtype)
        self.low, self.high = info.min + narrow_range, info.max

    def output_specs(self, inputs):
        return _scaled_shapes(self, inputs)

    def _rounded(self, xp, v):
        """v rounded as ``round_mode`` says."""
        return round_half_away(xp, v) if self.round_mode == "HALF_AWAY_FROM_ZERO" \
            else xp.round(v)

    def forward_arrays(self, xp, xs):
        x, scale, zero_point = xs
        zero_point = xp.clip(self._rounded(xp, zero_point), self.low, self.high)
        self.update_input(2, zero_point.astype(xs[2].dtype))
        y = xp.clip(self._rounded(xp, x / scale) + zero_point, self.low, self.high)
        return (y.astype(x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xs[1] if need_grads[0] else None, None, None)


def quantize_linear(x: Variable, scale: Variable, zero_point: Variable,
                    round_mode: str = "HALF_AWAY_FROM_ZERO", narrow_range: bool = False,
                    dtype=np.int8) -> Variable:
    """x quantized linearly to ``dtype`` (np.int8 or np.uint8) with ``scale`` and
    ``zero_point``, as ONNX's QuantizeLinear; the values stay floats."""
    owner = "F.quantize_linear"
    if round_mode not in _ROUND_MODES:
        raise argument_error(owner, f"round_mode must be one of {_ROUND_MODES}, got "
                                    f"{round_mode!r}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype not in _DTYPE_CODES:
        raise argument_error(owner, f"dtype must be np.int8 or np.uint8, got {dtype!r}")
    return QuantizeLinear(round_mode, flag_of(owner, "narrow_range", narrow_range), dtype)(
        x, scale, zero_point)


class DequantizeLinear(Function):
    """(x - zero_point) * scale; its gradient is gy * scale."""

    nnabla_spec = without_params("DequantizeLinear", "dequantize_linear")

    grad_skips_inputs = (0, 2)

    def output_specs(self, inputs):
        return _scaled_shapes(self, inputs)

    def forward_arrays(self, xp, xs):
        x, scale, zero_point = xs
        return (((x - zero_point) * scale).astype(x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * xs[1] if need_grads[0] else None, None, None)


def dequantize_linear(x: Variable, scale: Variable, zero_point: Variable, n_outputs: int = -1,
                      outputs=None) -> Variable:
    """x mapped back from quantized levels, as ONNX's DequantizeLinear."""
    default_outputs("F.dequantize_linear", n_outputs, outputs)
    return DequantizeLinear()(x, scale, zero_point)
