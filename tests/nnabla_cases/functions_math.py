"""Elementwise math cases (see functions.py).

The piecewise-constant functions (floor, ceil, round, sign) pass their gradient straight
through in nnabla, and clip_grad_* change only the backward: their analytic gradients
are not the forward's derivative, so they skip the finite-difference check (fd=False)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def away(*shape, low=0.2, high=1.0):
    """Float32 inputs of either sign with |x| in [low, high): away from kinks at 0."""
    return (R.choice([-1, 1], shape) * R.uniform(low, high, shape)).astype(np.float32)


def grid(*shape, scale=0.5, offset=0.25):
    """Distinct float32 values ``scale`` apart around ``offset``, shuffled: no ties."""
    n = int(np.prod(shape))
    return ((R.permutation(n).reshape(shape) - n / 2) * scale + offset).astype(np.float32)


HALVES = np.array([[-2.5, -1.5, -0.5], [0.5, 1.5, 2.5]], np.float32)
OFF_GRID = np.array([[-2.7, -1.2, -0.3], [0.4, 1.6, 2.2]], np.float32)
WITH_ZERO = np.array([[-0.7, 0.0, 0.4], [1.3, -2.1, 0.0]], np.float32)
WITH_NAN = np.array([[np.nan, 0.5, -1.5], [2.0, np.nan, -0.25]], np.float32)
WITH_INF = np.array([[np.inf, 0.5, -np.inf], [2.0, -1.0, np.inf]], np.float32)
WITH_BOTH = np.array([[np.nan, np.inf, -np.inf], [2.0, np.nan, -0.25]], np.float32)
TIES_A = np.array([[1.0, 2.0, -3.0], [0.5, 0.5, 4.0]], np.float32)
TIES_B = np.array([[1.0, -1.0, 4.0], [0.5, 2.0, -4.0]], np.float32)
NUMERATORS = np.array([[-3.5, 3.5, -3.5], [3.5, 2.5, -0.75]], np.float32)
DIVISORS = np.array([[2.0, 2.0, -2.0], [-2.0, 1.5, 0.5]], np.float32)
INT_NUMERATORS = np.array([[-7, 7, -7], [7, 5, -1]], np.int32)
INT_DIVISORS = np.array([[3, 3, -3], [-3, 2, 4]], np.int32)
BYTES = np.array([[1, 5, 200], [255, 3, 17]], np.uint8)


def unary(name, x, **kw):
    """A case of F.<name>(x, **kw)."""
    label = " ".join([name] + [f"{k}={v}" for k, v in kw.items()])
    return Case(label, lambda lib, v: getattr(lib.F, name)(v, **kw), (x,))


CASES = [
    Case("exp", lambda lib, x: lib.F.exp(x), (u(2, 3),)),
    Case("add2 broadcast", lambda lib, a, b: lib.F.add2(a, b), (u(2, 3), u(1, 3))),
    Case("pow2", lambda lib, a, b: lib.F.pow2(a, b), (u(2, 3, low=0.5, high=2), u(2, 3))),
    Case("pow2 broadcast", lambda lib, a, b: lib.F.pow2(a, b),
         (u(2, 3, low=0.5, high=2), u(2, 1))),
    unary("log", u(2, 3, low=0.3, high=2.0)),
    Case("sub2 broadcast", lambda lib, a, b: lib.F.sub2(a, b), (u(2, 3), u(2, 1))),
    Case("mul2 broadcast", lambda lib, a, b: lib.F.mul2(a, b), (u(2, 3), u(1, 3))),
    Case("div2 broadcast", lambda lib, a, b: lib.F.div2(a, b), (u(2, 3), away(1, 3, low=0.5))),
    Case("bc_add2", lambda lib, a, b: lib.F.bc_add2(a, b), (u(2, 3), u(1, 3))),
    Case("bc_add2 both broadcast", lambda lib, a, b: lib.F.bc_add2(a, b), (u(2, 1), u(1, 3))),
    Case("add_n one input", lambda lib, a: lib.F.add_n(a), (u(2, 3),)),
    Case("add_n three inputs", lambda lib, a, b, c: lib.F.add_n(a, b, c),
         (u(2, 3), u(2, 3), u(2, 3))),
    Case("mul_n one input", lambda lib, a: lib.F.mul_n(a), (u(2, 3),)),
    Case("mul_n three inputs", lambda lib, a, b, c: lib.F.mul_n(a, b, c),
         (away(2, 3), away(2, 3), away(2, 3))),
    Case("add_scalar", lambda lib, x: lib.F.add_scalar(x, 1.5), (u(2, 3),)),
    Case("mul_scalar", lambda lib, x: lib.F.mul_scalar(x, -2.0), (u(2, 3),)),
    Case("pow_scalar", lambda lib, x: lib.F.pow_scalar(x, 2.5), (u(2, 3, low=0.3, high=2.0),)),
    Case("r_sub_scalar", lambda lib, x: lib.F.r_sub_scalar(x, 3.0), (u(2, 3),)),
    Case("r_div_scalar", lambda lib, x: lib.F.r_div_scalar(x, 2.0), (away(2, 3, low=0.5),)),
    Case("r_pow_scalar", lambda lib, x: lib.F.r_pow_scalar(x, 1.7), (u(2, 3),)),
    unary("abs", away(2, 3)),
    # at the kink nnabla takes the slope +1: a convention, not a derivative
    Case("abs at zero", lambda lib, x: lib.F.abs(x), (WITH_ZERO,), fd=False),
    unary("sin", u(2, 3, low=-3, high=3)),
    unary("cos", u(2, 3, low=-3, high=3)),
    unary("tan", u(2, 3, low=-1.2, high=1.2)),
    unary("asin", u(2, 3, low=-0.9, high=0.9)),
    unary("acos", u(2, 3, low=-0.9, high=0.9)),
    unary("atan", u(2, 3, low=-3, high=3)),
    unary("sinh", u(2, 3, low=-2, high=2)),
    unary("cosh", u(2, 3, low=-2, high=2)),
    unary("asinh", u(2, 3, low=-3, high=3)),
    unary("acosh", u(2, 3, low=1.2, high=3)),
    unary("atanh", u(2, 3, low=-0.8, high=0.8)),
    unary("sinc", u(2, 3, low=-4, high=4)),
    Case("sinc at zero", lambda lib, x: lib.F.sinc(x), (WITH_ZERO,)),
    unary("erf", u(2, 3, low=-2.5, high=2.5)),
    Case("atan2", lambda lib, a, b: lib.F.atan2(a, b), (away(2, 3), away(2, 3))),
    Case("atan2 broadcast", lambda lib, a, b: lib.F.atan2(a, b), (away(2, 3), away(1, 3))),
    # straight-through gradients: fd=False (see the module docstring)
    Case("floor", lambda lib, x: lib.F.floor(x), (OFF_GRID,), fd=False),
    Case("ceil", lambda lib, x: lib.F.ceil(x), (OFF_GRID,), fd=False),
    Case("round", lambda lib, x: lib.F.round(x), (OFF_GRID,), fd=False),
    Case("round halves", lambda lib, x: lib.F.round(x), (HALVES,), fd=False),
    Case("sign", lambda lib, x: lib.F.sign(x), (WITH_ZERO,), fd=False),
    Case("sign alpha=0.3", lambda lib, x: lib.F.sign(x, alpha=0.3), (WITH_ZERO,), fd=False),
    Case("sign alpha=-1", lambda lib, x: lib.F.sign(x, -1.0), (WITH_ZERO,), fd=False),
    Case("maximum2", lambda lib, a, b: lib.F.maximum2(a, b),
         (grid(2, 3), grid(2, 3, scale=0.3, offset=0.1))),
    Case("maximum2 broadcast", lambda lib, a, b: lib.F.maximum2(a, b),
         (grid(2, 3), np.array([[0.4], [-0.6]], np.float32))),
    # ties: which input gets the gradient is nnabla's convention, not a derivative
    Case("maximum2 ties", lambda lib, a, b: lib.F.maximum2(a, b), (TIES_A, TIES_B), fd=False),
    Case("minimum2", lambda lib, a, b: lib.F.minimum2(a, b),
         (grid(2, 3), grid(2, 3, scale=0.3, offset=0.1))),
    Case("minimum2 broadcast", lambda lib, a, b: lib.F.minimum2(a, b),
         (np.array([[0.4, -0.1, 0.9]], np.float32), grid(2, 3))),
    Case("minimum2 ties", lambda lib, a, b: lib.F.minimum2(a, b), (TIES_A, TIES_B), fd=False),
    Case("maximum_scalar default", lambda lib, x: lib.F.maximum_scalar(x), (grid(2, 3),)),
    Case("maximum_scalar val=-0.4", lambda lib, x: lib.F.maximum_scalar(x, -0.4), (grid(2, 3),)),
    Case("maximum_scalar ties", lambda lib, x: lib.F.maximum_scalar(x, 0.5), (TIES_A,), fd=False),
    Case("minimum_scalar default", lambda lib, x: lib.F.minimum_scalar(x), (grid(2, 3),)),
    Case("minimum_scalar val=0.6", lambda lib, x: lib.F.minimum_scalar(x, val=0.6), (grid(2, 3),)),
    Case("minimum_scalar ties", lambda lib, x: lib.F.minimum_scalar(x, 0.5), (TIES_A,), fd=False),
    # mod2 has no backward in nnabla
    Case("mod2 float", lambda lib, a, b: lib.F.mod2(a, b), (NUMERATORS, DIVISORS), grad=False),
    Case("mod2 float fmod", lambda lib, a, b: lib.F.mod2(a, b, fmod=True),
         (NUMERATORS, DIVISORS), grad=False),
    Case("mod2 int", lambda lib, a, b: lib.F.mod2(a, b), (INT_NUMERATORS, INT_DIVISORS),
         grad=False),
    Case("mod2 int fmod", lambda lib, a, b: lib.F.mod2(a, b, True),
         (INT_NUMERATORS, INT_DIVISORS), grad=False),
    Case("bit_shift", lambda lib, x, s: lib.F.bit_shift(x, s),
         (BYTES, np.array([[1, 2, 1], [4, 9, 8]], np.uint8)),
         grad=False),
    Case("bit_shift RIGHT", lambda lib, x, s: lib.F.bit_shift(x, s, "RIGHT"),
         (BYTES, np.array([[1, 2, 1], [4, 9, 0]], np.uint8)),
         grad=False),
    Case("bit_shift uint32 broadcast", lambda lib, x, s: lib.F.bit_shift(x, s, direction="LEFT"),
         (np.array([[1, 5, 200], [70000, 3, 17]], np.uint32), np.array([[3, 0, 12]], np.uint32)),
         grad=False),
    Case("bit_shift float shift", lambda lib, x, s: lib.F.bit_shift(x, s, "RIGHT"),
         (np.array([[16, 5, 200]], np.uint16), np.array([[1.7, 2.2, 3.0]], np.float32)),
         grad=False),
    Case("reset_nan default", lambda lib, x: lib.F.reset_nan(x), (WITH_NAN,)),
    Case("reset_nan val=3", lambda lib, x: lib.F.reset_nan(x, val=3.0), (WITH_NAN,)),
    Case("reset_inf default", lambda lib, x: lib.F.reset_inf(x), (WITH_INF,)),
    Case("reset_inf val=-2", lambda lib, x: lib.F.reset_inf(x, -2.0), (WITH_INF,)),
    # the other special value passes through: an objective of NaN or inf, so fd=False
    Case("reset_nan keeps inf", lambda lib, x: lib.F.reset_nan(x, 1.0), (WITH_BOTH,), fd=False),
    Case("reset_inf keeps nan", lambda lib, x: lib.F.reset_inf(x, 1.0), (WITH_BOTH,), fd=False),
    Case("clip_by_value numbers", lambda lib, x: lib.F.clip_by_value(x, -0.5, 0.7), (grid(2, 3),)),
    Case("clip_by_value variables", lambda lib, x, lo, hi: lib.F.clip_by_value(x, lo, hi),
         (grid(2, 3), grid(2, 3, scale=0.2) - 0.63, grid(2, 3, scale=0.2) + 0.55)),
    Case("clip_by_value number and variable",
         lambda lib, x, hi: lib.F.clip_by_value(x, -1.0, hi),
         (grid(2, 3), grid(2, 3, scale=0.2) + 0.55)),
    Case("clip_by_norm clips", lambda lib, x: lib.F.clip_by_norm(x, 0.5), (u(2, 3),)),
    Case("clip_by_norm passes", lambda lib, x: lib.F.clip_by_norm(x, 10.0), (u(2, 3),)),
    Case("clip_by_norm axis=1", lambda lib, x: lib.F.clip_by_norm(x, 0.9, axis=1),
         (np.array([[0.2, -0.3, 0.1], [1.0, -0.8, 0.6]], np.float32),)),
    Case("clip_by_norm axis=(0, 2)", lambda lib, x: lib.F.clip_by_norm(x, 0.8, axis=(0, 2)),
         (u(2, 3, 2),)),
    Case("clip_by_norm axis=-1", lambda lib, x: lib.F.clip_by_norm(x, 0.7, axis=-1),
         (u(3, 4),)),
    Case("clip_by_norm variable", lambda lib, x, c: lib.F.clip_by_norm(x, c, axis=(0, 1)),
         (u(2, 3), np.array([[0.6]], np.float32))),
    Case("clip_grad_by_value", lambda lib, x, lo, hi: lib.F.clip_grad_by_value(x, lo, hi),
         (u(2, 3), np.full((2, 3), -0.4, np.float32), u(2, 3, low=0.1, high=0.6)), fd=False),
    Case("clip_grad_by_norm default", lambda lib, x: lib.F.clip_grad_by_norm(x), (u(2, 3),),
         fd=False),
    Case("clip_grad_by_norm clip_norm=0.5", lambda lib, x: lib.F.clip_grad_by_norm(x, 0.5),
         (u(2, 3),), fd=False),
    Case("clip_grad_by_norm axes=(1,)",
         lambda lib, x: lib.F.clip_grad_by_norm(x, 2.0, axes=(1,)), (u(2, 3),), fd=False),
    Case("clip_grad_by_norm axes=[0, 2]",
         lambda lib, x: lib.F.clip_grad_by_norm(x, 3.0, axes=[0, 2]), (u(2, 3, 2),), fd=False),
    Case("clip_grad_by_norm axes=(-1,)",
         lambda lib, x: lib.F.clip_grad_by_norm(x, 1.5, axes=(-1,)), (u(2, 3),), fd=False),
    Case("clip_grad_by_norm axes=()",
         lambda lib, x: lib.F.clip_grad_by_norm(x, 2.0, axes=()), (u(2, 3),), fd=False),
]
