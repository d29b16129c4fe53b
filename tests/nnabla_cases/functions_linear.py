"""The fully connected layer's cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(11)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


CASES = [
    Case("affine", lambda lib, x, w, b: lib.F.affine(x, w, b), (u(2, 3), u(3, 4), u(4))),
    Case("affine no bias base_axis 2", lambda lib, x, w: lib.F.affine(x, w, base_axis=2),
         (u(2, 2, 3, 2), u(6, 2, 2))),
    Case("affine base_axis -1", lambda lib, x, w, b: lib.F.affine(x, w, b, base_axis=-1),
         (u(2, 3, 4), u(4, 3), u(3))),
    Case("PF.affine", lambda lib, x: lib.PF.affine(x, 3), (u(2, 4),)),
    Case("PF.affine n_outmaps tuple named", lambda lib, x: lib.PF.affine(x, (2, 3), name="fc"),
         (u(2, 2, 2),)),
    Case("PF.affine base_axis 2 no bias",
         lambda lib, x: lib.PF.affine(x, 3, base_axis=2, with_bias=False), (u(2, 2, 3),)),
]
