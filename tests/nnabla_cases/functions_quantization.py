"""Quantization and pruning cases (see functions.py).

Their gradients are straight-through estimates, not the forward's derivative (zero
almost everywhere), so every case skips the finite-difference check (fd=False).  The
inputs keep away from rounding ties and range edges, where float32 and float64 could
round apart."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def spread(*shape, scale=2.0):
    """Float32 inputs of either sign, none within 1e-3 of zero."""
    x = R.randn(*shape) * scale
    return np.where(np.abs(x) < 1e-3, 0.5, x).astype(np.float32)


def const(value, shape):
    return np.full(shape, value, np.float32)


X = spread(2, 3, 4)
SCALE = (R.rand(1, 3, 1) + 0.1).astype(np.float32)
ZERO_POINT = np.array([[[-3.0], [0.0], [5.0]]], np.float32)
LEVELS_LOW, LEVELS_HIGH = const(0.0, (1, 3, 1)), const(255.0, (1, 3, 1))
RANGE_LOW = np.array([[[-0.5], [-1.0], [-0.2]]], np.float32)
RANGE_HIGH = np.array([[[0.5], [2.0], [-0.195]]], np.float32)  # the last narrower than eps


def min_max(**kw):
    """A case of F.min_max_quantize with per-channel ranges; the ranges learn only where
    they do not follow x."""
    learned = not (kw.get("x_min_max") or kw.get("ema"))
    label = " ".join(["min_max_quantize"] + [f"{k}={v}" for k, v in kw.items()])
    return Case(label, lambda lib, x, a, b, c, d: lib.F.min_max_quantize(x, a, b, c, d, **kw),
                (X, RANGE_LOW, RANGE_HIGH, LEVELS_LOW, LEVELS_HIGH), fd=False,
                need_grad=(True, learned, learned, False, False))


CASES = [
    Case("prune", lambda lib, x: lib.F.prune(x), (X,), fd=False),
    Case("prune rate=0.5", lambda lib, x: lib.F.prune(x, 0.5), (X,), fd=False),
    Case("prune rate=1", lambda lib, x: lib.F.prune(x, rate=1.0), (X,), fd=False),
    Case("fixed_point_quantize", lambda lib, x: lib.F.fixed_point_quantize(x), (X,), fd=False),
    Case("fixed_point_quantize unsigned n=3 delta=0.3 coarse STE",
         lambda lib, x: lib.F.fixed_point_quantize(x, sign=False, n=3, delta=0.3,
                                                   ste_fine_grained=False), (X,), fd=False),
    Case("fixed_point_quantize signed n=4 delta=0.25",
         lambda lib, x: lib.F.fixed_point_quantize(x, True, 4, 0.25), (X,), fd=False),
    Case("pow2_quantize", lambda lib, x: lib.F.pow2_quantize(x), (X,), fd=False),
    Case("pow2_quantize n=3 m=0", lambda lib, x: lib.F.pow2_quantize(x, n=3, m=0), (X,),
         fd=False),
    Case("pow2_quantize unsigned without zero n=4",
         lambda lib, x: lib.F.pow2_quantize(x, sign=False, with_zero=False, n=4), (X,),
         fd=False),
    Case("pow2_quantize unsigned with zero coarse STE",
         lambda lib, x: lib.F.pow2_quantize(x, sign=False, n=4, ste_fine_grained=False), (X,),
         fd=False),
    min_max(),
    min_max(ste_fine_grained=False),
    min_max(x_min_max=True),
    min_max(x_min_max=True, ema=True, decay=0.9),
    min_max(ema=True),
    Case("PF.min_max_quantize", lambda lib, x: lib.PF.min_max_quantize(x), (X,), fd=False),
    Case("PF.min_max_quantize levels 0..127 x_min_max ema fixed named",
         lambda lib, x: lib.PF.min_max_quantize(x, 0, 127, 0.9, True, True, fix_parameters=True,
                                                name="q"), (X,), fd=False),
    Case("quantize_linear", lambda lib, x, s, z: lib.F.quantize_linear(x, s, z),
         (X, SCALE, ZERO_POINT), fd=False, need_grad=(True, False, False)),
    Case("quantize_linear half to even narrow uint8",
         lambda lib, x, s, z: lib.F.quantize_linear(x, s, z, "HALF_TO_EVEN", True, np.uint8),
         (X * 40, SCALE, ZERO_POINT + 100.5), fd=False, need_grad=(True, False, False)),
    Case("dequantize_linear", lambda lib, x, s, z: lib.F.dequantize_linear(x, s, z),
         (np.round(X * 10), SCALE, ZERO_POINT), need_grad=(True, False, False)),
]
