"""Reduction cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(1)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


CASES = [
    Case("sum axes 0 2 keepdims", lambda lib, x: lib.F.sum(x, axis=(0, 2), keepdims=True), (u(2, 3, 4),)),
    Case("max with_index", lambda lib, x: lib.F.max(x, axis=1, with_index=True), (u(3, 4),)),
]
