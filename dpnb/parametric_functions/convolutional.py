"""Convolution and deconvolution layers (plain, grouped, depthwise) over any number of
spatial axes, with nnabla's parameter names, shapes and Glorot-uniform default weights."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..functions.base import base_axis_of, int_tuple
from ..graph import Variable
from ..initializer import UniformInitializer, calc_uniform_lim_glorot
from ._common import check_input, scope, weight_and_bias

__all__ = ["convolution", "deconvolution", "depthwise_convolution", "depthwise_deconvolution",
           "deformable_convolution"]

Init = Callable | np.ndarray | None


def _channels(fn_name: str, inp: Variable, kernel: tuple[int, ...], base_axis: int,
              channel_last: bool) -> int:
    """The input's channels, after checking it has them and the kernel's spatial axes."""
    check_input(fn_name, inp, 1 + len(kernel))
    axis = base_axis_of(f"PF.{fn_name}", base_axis, inp.ndim)
    return inp.shape[-1] if channel_last else inp.shape[axis]


def _check_group(fn_name: str, inmaps: int, outmaps: int, group: int) -> None:
    if not isinstance(group, (int, np.integer)) or group < 1 or inmaps % group or outmaps % group:
        raise DpnbError(f"PF.{fn_name}: input channels ({inmaps}) and outmaps ({outmaps}) "
                        f"must both be divisible by group ({group})")


def _convolution_parameters(fn_name: str, inp: Variable, outmaps: int, kernel, base_axis: int,
                            channel_last: bool, group: int, w_init: Init, b_init: Init,
                            rng, fix_parameters: bool, with_bias: bool, apply_w, apply_b):
    """A convolution layer's W (outmaps, inmaps/group, *kernel; channels last with
    ``channel_last``), Glorot-uniform by default, and b (outmaps), after the checks."""
    kernel = int_tuple(f"PF.{fn_name}", "kernel", kernel, None, 1, 1)
    inmaps = _channels(fn_name, inp, kernel, base_axis, channel_last)
    outmaps = int(outmaps)
    _check_group(fn_name, inmaps, outmaps, group)
    filter_shape = kernel + (inmaps // group,) if channel_last else (inmaps // group,) + kernel
    if w_init is None:
        w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, outmaps, kernel), rng=rng)
    return weight_and_bias(fn_name, (outmaps,) + filter_shape, (outmaps,), w_init, b_init,
                           fix_parameters, with_bias, apply_w, apply_b)


def convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None, stride=None,
                dilation=None, group: int = 1, channel_last: bool = False,
                w_init: Init = None, b_init: Init = None, base_axis: int = 1,
                fix_parameters: bool = False, rng: np.random.RandomState | None = None,
                with_bias: bool = True, apply_w: Callable | None = None,
                apply_b: Callable | None = None, name: str | None = None) -> Variable:
    """Convolution layer: parameters ``conv/W`` (outmaps, inmaps/group, *kernel; channels
    last with ``channel_last``) and ``conv/b`` (outmaps), Glorot-uniform
    (``calc_uniform_lim_glorot(inmaps, outmaps, kernel)``) and zero by default."""
    with scope(name, "conv"):
        w, b = _convolution_parameters("convolution", inp, outmaps, kernel, base_axis,
                                       channel_last, group, w_init, b_init, rng, fix_parameters,
                                       with_bias, apply_w, apply_b)
        return F.convolution(inp, w, b, base_axis, pad, stride, dilation, group, channel_last)


def deformable_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], offset: Variable,
                           mask: Variable | None = None, pad=None, stride=None, dilation=None,
                           group: int = 1, deformable_group: int = 1, channel_last: bool = False,
                           w_init: Init = None, b_init: Init = None, base_axis: int = 1,
                           fix_parameters: bool = False,
                           rng: np.random.RandomState | None = None, with_bias: bool = True,
                           apply_w: Callable | None = None, apply_b: Callable | None = None,
                           name: str | None = None) -> Variable:
    """2-D deformable convolution layer (DCNv2 with ``mask``): parameters
    ``deformable_conv/W`` (outmaps, inmaps/group, *kernel) and ``deformable_conv/b``
    (outmaps), Glorot-uniform and zero by default; ``offset`` and ``mask`` come from
    another layer."""
    with scope(name, "deformable_conv"):
        w, b = _convolution_parameters("deformable_convolution", inp, outmaps, kernel,
                                       base_axis, channel_last, group, w_init, b_init, rng,
                                       fix_parameters, with_bias, apply_w, apply_b)
        return F.deformable_convolution(inp, w, offset, mask, b, base_axis, pad, stride,
                                        dilation, group, deformable_group, channel_last)


def deconvolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None, stride=None,
                  dilation=None, group: int = 1, channel_last: bool = False,
                  output_padding=None, w_init: Init = None, b_init: Init = None,
                  base_axis: int = 1, fix_parameters: bool = False,
                  rng: np.random.RandomState | None = None, with_bias: bool = True,
                  apply_w: Callable | None = None, apply_b: Callable | None = None,
                  name: str | None = None) -> Variable:
    """Deconvolution layer: parameters ``deconv/W`` (inmaps, outmaps/group, *kernel; channels
    last with ``channel_last``) and ``deconv/b`` (outmaps), Glorot-uniform
    (``calc_uniform_lim_glorot(outmaps, inmaps, kernel)``) and zero by default."""
    with scope(name, "deconv"):
        kernel = int_tuple("PF.deconvolution", "kernel", kernel, None, 1, 1)
        inmaps = _channels("deconvolution", inp, kernel, base_axis, channel_last)
        outmaps = int(outmaps)
        _check_group("deconvolution", inmaps, outmaps, group)
        w_shape = ((inmaps,) + kernel + (outmaps // group,) if channel_last
                   else (inmaps, outmaps // group) + kernel)
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(outmaps, inmaps, kernel), rng=rng)
        w, b = weight_and_bias("deconvolution", w_shape, (outmaps,), w_init, b_init,
                               fix_parameters, with_bias, apply_w, apply_b)
        return F.deconvolution(inp, w, b, base_axis, pad, stride, dilation, group, channel_last,
                               output_padding)


def depthwise_convolution(inp: Variable, kernel: Sequence[int], pad=None, stride=None,
                          dilation=None, multiplier: int = 1, w_init: Init = None,
                          b_init: Init = None, base_axis: int = 1, fix_parameters: bool = False,
                          rng: np.random.RandomState | None = None, with_bias: bool = True,
                          name: str | None = None) -> Variable:
    """Depthwise convolution layer: ``depthwise_conv/W`` (C * multiplier, *kernel) and
    ``depthwise_conv/b`` (C * multiplier), Glorot-uniform
    (``calc_uniform_lim_glorot(C * multiplier, C, kernel)``) and zero by default."""
    with scope(name, "depthwise_conv"):
        kernel = int_tuple("PF.depthwise_convolution", "kernel", kernel, None, 1, 1)
        channels = _channels("depthwise_convolution", inp, kernel, base_axis, False)
        if not isinstance(multiplier, (int, np.integer)) or multiplier < 1:
            raise DpnbError(f"PF.depthwise_convolution: multiplier must be an int >= 1, got "
                            f"{multiplier!r}")
        outmaps = channels * int(multiplier)
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(outmaps, channels, kernel),
                                        rng=rng)
        # nnabla's depthwise layers take no apply_w / apply_b.
        w, b = weight_and_bias("depthwise_convolution", (outmaps,) + kernel, (outmaps,), w_init,
                               b_init, fix_parameters, with_bias, None, None)
        return F.depthwise_convolution(inp, w, b, base_axis, pad, stride, dilation, multiplier)


def depthwise_deconvolution(inp: Variable, kernel: Sequence[int], pad=None, stride=None,
                            dilation=None, divisor: int = 1, w_init: Init = None,
                            b_init: Init = None, base_axis: int = 1,
                            fix_parameters: bool = False,
                            rng: np.random.RandomState | None = None, with_bias: bool = True,
                            name: str | None = None) -> Variable:
    """Depthwise deconvolution layer: ``depthwise_deconv/W`` (C, *kernel) and
    ``depthwise_deconv/b`` (C / divisor), Glorot-uniform
    (``calc_uniform_lim_glorot(C, C, kernel)``) and zero by default."""
    with scope(name, "depthwise_deconv"):
        kernel = int_tuple("PF.depthwise_deconvolution", "kernel", kernel, None, 1, 1)
        channels = _channels("depthwise_deconvolution", inp, kernel, base_axis, False)
        if not isinstance(divisor, (int, np.integer)) or divisor < 1 or channels % divisor:
            raise DpnbError(f"PF.depthwise_deconvolution: divisor must be an int >= 1 that "
                            f"divides the input's {channels} channels, got {divisor!r}")
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(channels, channels, kernel),
                                        rng=rng)
        w, b = weight_and_bias("depthwise_deconvolution", (channels,) + kernel,
                               (channels // int(divisor),), w_init, b_init, fix_parameters,
                               with_bias, None, None)
        return F.depthwise_deconvolution(inp, w, b, base_axis, pad, stride, dilation, divisor)
