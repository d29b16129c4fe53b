"""Comparison and logic cases (see functions.py).

nnabla's comparisons and logical functions have no backward (it raises), so their
cases record the forward only (grad=False); where is differentiable in x_true and
x_false."""
import numpy as np

from .functions import Case

R = np.random.RandomState(1)


def small_ints(*shape, low=-1, high=3):
    """Float32 inputs with few distinct integer values: plenty of ties and zeros."""
    return R.randint(low, high, shape).astype(np.float32)


def u(*shape):
    """Uniform float32 inputs."""
    return R.uniform(-1.0, 1.0, shape).astype(np.float32)


A, B = small_ints(3, 4), small_ints(3, 4)
ROW, COLUMN = small_ints(1, 4), small_ints(3, 1)
INT_A, INT_B = R.randint(-1, 3, (3, 4)).astype(np.int32), R.randint(-1, 3, (3, 4)).astype(np.int32)
SPECIAL = np.array([[np.nan, 1.0, -np.inf], [np.inf, 0.0, np.nan]], np.float32)
MASK = np.array([[1.0, 0.0, 2.0], [0.0, -1.0, 0.0]], np.float32)

BINARY = ["equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
          "logical_and", "logical_or", "logical_xor"]
SCALAR = ["equal_scalar", "not_equal_scalar", "greater_scalar", "greater_equal_scalar",
          "less_scalar", "less_equal_scalar"]
LOGICAL_SCALAR = ["logical_and_scalar", "logical_or_scalar", "logical_xor_scalar"]


def _binary(name):
    return lambda lib, a, b: getattr(lib.F, name)(a, b)


def _scalar(name, *args, **kw):
    return lambda lib, x: getattr(lib.F, name)(x, *args, **kw)


CASES = (
    [Case(name, _binary(name), (A, B), grad=False) for name in BINARY]
    + [Case(f"{name} broadcast", _binary(name), (A, ROW), grad=False) for name in BINARY]
    + [Case(f"{name} both broadcast", _binary(name), (COLUMN, ROW), grad=False)
       for name in BINARY]
    + [Case(f"{name} int", _binary(name), (INT_A, INT_B), grad=False) for name in BINARY]
    + [Case(f"{name} default", _scalar(name), (A,), grad=False) for name in SCALAR]
    + [Case(f"{name} val=0", _scalar(name, 0), (A,), grad=False) for name in SCALAR]
    + [Case(f"{name} val=-0.5", _scalar(name, val=-0.5), (u(3, 4),), grad=False)
       for name in SCALAR]
    + [Case(f"{name} val={val}", _scalar(name, val), (A,), grad=False)
       for name in LOGICAL_SCALAR for val in (True, False)]
    + [Case(f"{name} val=2", _scalar(name, 2), (A,), grad=False) for name in LOGICAL_SCALAR]
    + [
        Case("logical_not", lambda lib, x: lib.F.logical_not(x), (A,), grad=False),
        Case("logical_not int", lambda lib, x: lib.F.logical_not(x), (INT_A,), grad=False),
        Case("isnan", lambda lib, x: lib.F.isnan(x), (SPECIAL,), grad=False),
        Case("isinf", lambda lib, x: lib.F.isinf(x), (SPECIAL,), grad=False),
        Case("isnan finite", lambda lib, x: lib.F.isnan(x), (u(2, 3),), grad=False),
        # condition is an input too: nnabla leaves its gradient untouched (zero), and a
        # step of eps would flip its zeros, so its case skips finite differences
        Case("where", lambda lib, c, t, f: lib.F.where(c, t, f), (MASK, u(2, 3), u(2, 3)),
             fd=False),
        Case("where x_true and x_false", lambda lib, c, t, f: lib.F.where(c, t, f),
             (MASK, u(2, 3), u(2, 3)), need_grad=(False, True, True)),
        Case("where lower-rank condition", lambda lib, c, t, f: lib.F.where(c, t, f),
             (MASK, u(2, 3, 2), u(2, 3, 2)), need_grad=(False, True, True)),
        Case("where one-axis condition", lambda lib, c, t, f: lib.F.where(c, t, f),
             (np.array([0.0, 3.0], np.float32), u(2, 3), u(2, 3)),
             need_grad=(False, True, True)),
        Case("where greater_scalar", lambda lib, c, t, f: lib.F.where(
            lib.F.greater_scalar(c, 0.2), t, f), (u(2, 3), u(2, 3), u(2, 3)),
            need_grad=(False, True, True)),
    ]
)
