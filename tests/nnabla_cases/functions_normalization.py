"""Normalization cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(2)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


CASES = [
    Case("PF.batch_normalization", lambda lib, x: lib.PF.batch_normalization(x), (u(4, 3, 2),)),
    # Layer normalization.
    Case("layer_normalization", lambda lib, x, b, g: lib.F.layer_normalization(x, b, g),
         (u(2, 3, 4), u(1, 3, 4), u(1, 3, 4))),
    Case("layer_normalization no beta gamma",
         lambda lib, x: lib.F.layer_normalization(x, None, None), (u(3, 5),)),
    Case("layer_normalization gamma only",
         lambda lib, x, g: lib.F.layer_normalization(x, None, g), (u(3, 5), u(1, 5))),
    Case("layer_normalization beta only",
         lambda lib, x, b: lib.F.layer_normalization(x, b, None), (u(3, 5), u(1, 5))),
    Case("layer_normalization batch_axis list eps output_stat",
         lambda lib, x, b, g: lib.F.layer_normalization(x, b, g, batch_axis=[0, 2], eps=0.1,
                                                        output_stat=True),
         (u(2, 3, 2), u(1, 3, 1), u(1, 3, 1))),
    Case("layer_normalization batch_axis -1",
         lambda lib, x, b, g: lib.F.layer_normalization(x, b, g, batch_axis=-1),
         (u(5, 3), u(5, 1), u(5, 1))),
    Case("layer_normalization batch_axis empty",
         lambda lib, x: lib.F.layer_normalization(x, None, None, batch_axis=[]), (u(2, 3),)),
    Case("PF.layer_normalization", lambda lib, x: lib.PF.layer_normalization(x), (u(2, 3, 4),)),
    Case("PF.layer_normalization batch_axis 1 output_stat",
         lambda lib, x: lib.PF.layer_normalization(x, batch_axis=1, output_stat=True),
         (u(2, 3, 2),)),
    Case("PF.layer_normalization no_scale no_bias",
         lambda lib, x: lib.PF.layer_normalization(x, no_scale=True, no_bias=True),
         (u(3, 4),)),
    Case("PF.layer_normalization no_bias fix_parameters name",
         lambda lib, x: lib.PF.layer_normalization(x, no_bias=True, fix_parameters=True,
                                                   name="ln1"),
         (u(3, 4),), fd=False),  # fixed gamma gets no gradient; fd would vary it too
]
