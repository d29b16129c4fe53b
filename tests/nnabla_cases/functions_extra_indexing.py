"""Masked filling, gathering and scattering cases (see functions.py): bool_fill,
bool_gather and bool_scatter.  Masks take no gradient."""
import numpy as np

from .functions import Case

R = np.random.RandomState(12)


def u(*shape):
    return R.uniform(-1, 1, shape).astype(np.float32)


MASK = np.array([[1, 0, 1], [0, 0, 1]], np.float32)
INT_MASK = np.array([[1, 0, 1], [0, 1, 0]], np.int64)
NO_GRAD = (True, False)

CASES = [
    Case("bool_fill", lambda lib, d, m: lib.F.bool_fill(d, m), (u(2, 3), MASK), need_grad=NO_GRAD),
    Case("bool_fill value", lambda lib, d, m: lib.F.bool_fill(d, m, value=2.5),
         (u(2, 3), INT_MASK)),
    Case("bool_fill broadcast mask", lambda lib, d, m: lib.F.bool_fill(d, m, -1.0),
         (u(2, 3, 4), np.array([[[1], [0], [1]]], np.float32)), need_grad=NO_GRAD),
    Case("bool_fill trailing mask", lambda lib, d, m: lib.F.bool_fill(d, m, 3),
         (u(2, 3), np.array([0, 1, 1], np.float32)), need_grad=NO_GRAD),
    Case("bool_gather", lambda lib, x, m: lib.F.bool_gather(x, m), (u(2, 3), MASK),
         need_grad=NO_GRAD),
    Case("bool_gather rows", lambda lib, x, m: lib.F.bool_gather(x, m), (u(2, 3, 2), INT_MASK)),
    Case("bool_gather 1d mask", lambda lib, x, m: lib.F.bool_gather(x, m),
         (u(4, 2, 2), np.array([0, 1, 1, 0], np.float32)), need_grad=NO_GRAD),
    Case("bool_scatter", lambda lib, x, m: lib.F.bool_scatter(x, m), (u(3), MASK),
         need_grad=NO_GRAD),
    Case("bool_scatter rows", lambda lib, x, m: lib.F.bool_scatter(x, m), (u(3, 2), INT_MASK)),
    Case("bool_scatter output", lambda lib, x, m, o: lib.F.bool_scatter(x, m, o),
         (u(3, 2), MASK, u(2, 3, 2)), need_grad=(True, False, True)),
    Case("bool_gather then bool_scatter",
         lambda lib, x, m: lib.F.bool_scatter(lib.F.bool_gather(x, m) * 2.0, m),
         (u(2, 3, 2), MASK), need_grad=NO_GRAD),
]
