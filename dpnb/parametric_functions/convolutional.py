"""Convolution layers."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..graph import Variable
from ..initializer import UniformInitializer, calc_uniform_lim_glorot
from ._common import check_input, scope, weight_and_bias

__all__ = ["convolution"]


def convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None, stride=None,
                dilation=None, group: int = 1, channel_last: bool = False,
                w_init: Callable | np.ndarray | None = None,
                b_init: Callable | np.ndarray | None = None, base_axis: int = 1,
                fix_parameters: bool = False, rng: np.random.RandomState | None = None,
                with_bias: bool = True, apply_w: Callable | None = None,
                apply_b: Callable | None = None, name: str | None = None) -> Variable:
    """Convolution layer: parameters ``conv/W`` (outmaps, inmaps/group, *kernel; channels
    last with ``channel_last``) and ``conv/b`` (outmaps), Glorot-uniform and zero by default."""
    with scope(name, "conv"):
        check_input("convolution", inp, base_axis + 1 + len(kernel))
        outmaps = int(outmaps)
        kernel = tuple(int(k) for k in kernel)
        inmaps = inp.shape[-1] if channel_last else inp.shape[base_axis]
        if group < 1 or inmaps % group or outmaps % group:
            raise DpnbError(f"PF.convolution: input channels ({inmaps}) and outmaps ({outmaps}) "
                            f"must both be divisible by group ({group})")
        filter_shape = kernel + (inmaps // group,) if channel_last else (inmaps // group,) + kernel
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, outmaps, kernel), rng=rng)
        w, b = weight_and_bias("convolution", (outmaps,) + filter_shape, (outmaps,), w_init,
                                b_init, fix_parameters, with_bias, apply_w, apply_b)
        return F.convolution(inp, w, b, base_axis, pad, stride, dilation, group, channel_last)
