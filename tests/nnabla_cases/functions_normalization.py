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
    # Instance normalization.
    Case("instance_normalization", lambda lib, x, b, g: lib.F.instance_normalization(x, b, g),
         (u(2, 3, 4), u(1, 3, 1), u(1, 3, 1))),
    Case("instance_normalization per-sample beta gamma",
         lambda lib, x, b, g: lib.F.instance_normalization(x, b, g),
         (u(2, 3, 4), u(2, 3, 1), u(1, 3, 1))),
    Case("instance_normalization none output_stat",
         lambda lib, x: lib.F.instance_normalization(x, None, None, output_stat=True),
         (u(2, 2, 5),)),
    Case("instance_normalization channel_axis 2 batch_axis 1 eps",
         lambda lib, x, g: lib.F.instance_normalization(x, None, g, channel_axis=2,
                                                        batch_axis=1, eps=0.05),
         (u(4, 2, 3), u(1, 1, 3))),
    Case("instance_normalization channel_axis -1 batch_axis list",
         lambda lib, x, b: lib.F.instance_normalization(x, b, None, channel_axis=-1,
                                                        batch_axis=[0, 1], output_stat=True),
         (u(2, 2, 4, 2), u(1, 1, 1, 2))),
    Case("PF.instance_normalization", lambda lib, x: lib.PF.instance_normalization(x),
         (u(2, 3, 4),)),
    Case("PF.instance_normalization channel_axis 2 no_bias output_stat",
         lambda lib, x: lib.PF.instance_normalization(x, channel_axis=2, no_bias=True,
                                                      output_stat=True), (u(2, 4, 3),)),
    Case("PF.instance_normalization no_scale name",
         lambda lib, x: lib.PF.instance_normalization(x, no_scale=True, name="inorm"),
         (u(2, 3, 4),)),
    # Group normalization.
    Case("group_normalization", lambda lib, x, b, g: lib.F.group_normalization(x, b, g, 2),
         (u(2, 4, 3), u(1, 4, 1), u(1, 4, 1))),
    Case("group_normalization none output_stat",
         lambda lib, x: lib.F.group_normalization(x, None, None, 3, output_stat=True),
         (u(2, 6, 2),)),
    Case("group_normalization channel_axis 2 eps",
         lambda lib, x, g: lib.F.group_normalization(x, None, g, 2, channel_axis=2, eps=0.1),
         (u(2, 3, 4), u(1, 1, 4))),
    Case("group_normalization batch_axis list output_stat",
         lambda lib, x, b: lib.F.group_normalization(x, b, None, 2, channel_axis=2,
                                                     batch_axis=[0, 1], output_stat=True),
         (u(2, 3, 4, 2), u(1, 1, 4, 1))),
    Case("group_normalization no batch_axis",
         lambda lib, x: lib.F.group_normalization(x, None, None, 1, batch_axis=[]),
         (u(2, 2, 3),)),
    Case("group_normalization channel_axis -1",
         lambda lib, x: lib.F.group_normalization(x, None, None, 2, channel_axis=-1),
         (u(3, 2, 4),)),
    Case("PF.group_normalization", lambda lib, x: lib.PF.group_normalization(x, 2),
         (u(2, 4, 3),)),
    Case("PF.group_normalization channel_axis 2 output_stat no_scale",
         lambda lib, x: lib.PF.group_normalization(x, 3, channel_axis=2, output_stat=True,
                                                   no_scale=True), (u(2, 2, 6),)),
]
