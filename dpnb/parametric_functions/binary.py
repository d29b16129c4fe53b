"""Binary affine and convolution layers (BinaryConnect, XNOR-Net's binary weights), with
nnabla's scopes, parameter names and shapes: the float weight ``W`` that trains, the
binarized ``Wb`` (and scale ``alpha``) that forward writes, and the bias ``b``."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import functions as F
from ..functions.base import int_tuple
from ..graph import Variable
from ..initializer import ConstantInitializer, UniformInitializer, calc_uniform_lim_glorot
from ..ndarray import as_shape
from ..parameter import get_parameter_or_create
from ._common import check_input, scope
from .convolutional import _channels

__all__ = ["binary_connect_affine", "binary_connect_convolution", "binary_weight_affine",
           "binary_weight_convolution"]

Init = Callable | np.ndarray | None


def _parameters(w_shape: tuple, out_shape: tuple, glorot: float, w_init: Init, wb_init: Init,
                b_init: Init, fix_parameters: bool, rng, with_bias: bool, scaled: bool) -> list:
    """``W`` and ``Wb`` (Glorot-uniform by default), ``alpha`` (zeros) where ``scaled``, and
    ``b`` (zeros) with ``with_bias``, created in nnabla's order; None for an absent bias."""
    w_init = UniformInitializer(glorot, rng=rng) if w_init is None else w_init
    wb_init = UniformInitializer(glorot, rng=rng) if wb_init is None else wb_init
    params = [get_parameter_or_create("W", w_shape, w_init, True, not fix_parameters),
              get_parameter_or_create("Wb", w_shape, wb_init, False)]
    if scaled:
        params.append(get_parameter_or_create("alpha", out_shape, ConstantInitializer(0), False))
    b = None
    if with_bias:
        b_init = ConstantInitializer() if b_init is None else b_init
        b = get_parameter_or_create("b", out_shape, b_init, True, not fix_parameters)
    return params + [b]


def _affine(fn_name: str, scope_name: str, scaled: bool, inp, n_outmaps, base_axis,
            quantize_zero_to, w_init, wb_init, b_init, fix_parameters, rng, with_bias, name):
    with scope(name, scope_name):
        check_input(fn_name, inp, base_axis + 1)
        outmaps = as_shape(n_outmaps, f"{fn_name}'s n_outmaps")
        inmaps = int(np.prod(inp.shape[base_axis:]))
        params = _parameters((inmaps,) + outmaps, outmaps,
                             calc_uniform_lim_glorot(inmaps, int(np.prod(outmaps))), w_init,
                             wb_init, b_init, fix_parameters, rng, with_bias, scaled)
        return getattr(F, fn_name)(inp, *params, base_axis, quantize_zero_to)


def binary_connect_affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
                          quantize_zero_to: float = 1.0, w_init: Init = None,
                          wb_init: Init = None, b_init: Init = None, fix_parameters: bool = False,
                          rng: np.random.RandomState | None = None, with_bias: bool = True,
                          name: str | None = None) -> Variable:
    """BinaryConnect affine layer: ``bicon_affine/W`` and ``bicon_affine/Wb`` (inputs,
    *n_outmaps), Glorot-uniform, and ``bicon_affine/b`` (*n_outmaps), zero by default."""
    return _affine("binary_connect_affine", "bicon_affine", False, inp, n_outmaps, base_axis,
                   quantize_zero_to, w_init, wb_init, b_init, fix_parameters, rng, with_bias,
                   name)


def binary_weight_affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
                         quantize_zero_to: float = 1.0, w_init: Init = None,
                         wb_init: Init = None, b_init: Init = None, fix_parameters: bool = False,
                         rng: np.random.RandomState | None = None, with_bias: bool = True,
                         name: str | None = None) -> Variable:
    """Binary weight affine layer: ``bwn_affine/W`` and ``bwn_affine/Wb`` (inputs,
    *n_outmaps), Glorot-uniform, ``bwn_affine/alpha`` and ``bwn_affine/b`` (*n_outmaps),
    zero by default."""
    return _affine("binary_weight_affine", "bwn_affine", True, inp, n_outmaps, base_axis,
                   quantize_zero_to, w_init, wb_init, b_init, fix_parameters, rng, with_bias,
                   name)


def _convolution(fn_name: str, scope_name: str, scaled: bool, inp, outmaps, kernel, pad,
                 stride, dilation, group, quantize_zero_to, w_init, wb_init, b_init, base_axis,
                 fix_parameters, rng, with_bias, name):
    with scope(name, scope_name):
        kernel = int_tuple(f"PF.{fn_name}", "kernel", kernel, None, 1, 1)
        inmaps = _channels(fn_name, inp, kernel, base_axis, False)
        outmaps = int(outmaps)
        # nnabla's weight has all the input channels, whatever the group
        params = _parameters((outmaps, inmaps) + kernel, (outmaps,),
                             calc_uniform_lim_glorot(inmaps, outmaps, kernel), w_init, wb_init,
                             b_init, fix_parameters, rng, with_bias, scaled)
        return getattr(F, fn_name)(inp, *params, base_axis, pad, stride, dilation, group,
                                   quantize_zero_to)


def binary_connect_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None,
                               stride=None, dilation=None, group: int = 1,
                               quantize_zero_to: float = 1.0, w_init: Init = None,
                               wb_init: Init = None, b_init: Init = None, base_axis: int = 1,
                               fix_parameters: bool = False,
                               rng: np.random.RandomState | None = None,
                               with_bias: bool = True, name: str | None = None) -> Variable:
    """BinaryConnect convolution layer: ``bicon_conv/W`` and ``bicon_conv/Wb`` (outmaps,
    inmaps, *kernel), Glorot-uniform, and ``bicon_conv/b`` (outmaps), zero by default."""
    return _convolution("binary_connect_convolution", "bicon_conv", False, inp, outmaps, kernel,
                        pad, stride, dilation, group, quantize_zero_to, w_init, wb_init, b_init,
                        base_axis, fix_parameters, rng, with_bias, name)


def binary_weight_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None,
                              stride=None, dilation=None, group: int = 1,
                              quantize_zero_to: float = 1.0, w_init: Init = None,
                              wb_init: Init = None, b_init: Init = None, base_axis: int = 1,
                              fix_parameters: bool = False,
                              rng: np.random.RandomState | None = None,
                              with_bias: bool = True, name: str | None = None) -> Variable:
    """Binary weight convolution layer: ``bwn_conv/W`` and ``bwn_conv/Wb`` (outmaps, inmaps,
    *kernel), Glorot-uniform, ``bwn_conv/alpha`` and ``bwn_conv/b`` (outmaps), zero by
    default."""
    return _convolution("binary_weight_convolution", "bwn_conv", True, inp, outmaps, kernel,
                        pad, stride, dilation, group, quantize_zero_to, w_init, wb_init, b_init,
                        base_axis, fix_parameters, rng, with_bias, name)
