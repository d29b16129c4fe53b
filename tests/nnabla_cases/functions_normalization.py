"""Normalization cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(2)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


CASES = [
    Case("PF.batch_normalization", lambda lib, x: lib.PF.batch_normalization(x), (u(4, 3, 2),)),
]
