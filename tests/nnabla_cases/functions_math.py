"""Elementwise math cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


CASES = [
    Case("exp", lambda lib, x: lib.F.exp(x), (u(2, 3),)),
    Case("add2 broadcast", lambda lib, a, b: lib.F.add2(a, b), (u(2, 3), u(1, 3))),
    Case("pow2", lambda lib, a, b: lib.F.pow2(a, b), (u(2, 3, low=0.5, high=2), u(2, 3))),
]
