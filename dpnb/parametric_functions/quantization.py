"""Quantized, pruned and incrementally quantized layers with nnabla's parameters, and
min-max quantization with its range as parameters.

The quantized and pruned affine and convolution layers keep nnabla's float weight ``W``
and bias ``b`` (which train) and the quantized ``W_q`` and ``b_q`` that every forward
writes (no gradient), in scopes such as ``fp_quantized_affine``; min-max quantization
keeps its levels ``ql_min``/``ql_max`` (fixed) and range ``qr_min``/``qr_max`` (learned,
or kept from x by forward) in the scope ``min_max_quantize``; the INQ layers keep ``W``,
the indicator ``I`` and ``b``.  Shapes, initializers and their order (``W_q`` draws its
initial values from ``w_init`` after ``W``) are nnabla's, its quirks included: some
convolutions size a weight by ``inp.shape[base_axis]`` even with ``channel_last``."""
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

__all__ = ["min_max_quantize", "fixed_point_quantized_affine",
           "fixed_point_quantized_convolution", "pow2_quantized_affine",
           "pow2_quantized_convolution", "pruned_affine", "pruned_convolution",
           "min_max_quantized_affine", "min_max_quantized_convolution", "inq_affine",
           "inq_convolution"]

Init = Callable | np.ndarray | None
# A quantizer: (float variable, [the array to compute into]) -> the quantized variable.
Quantizer = Callable[[Variable, list], Variable]


def _levels(name: str, value, ndim: int):
    """A level given as a number becomes a fixed parameter of shape (1,) * ndim."""
    if isinstance(value, (int, float)):
        return get_parameter_or_create(name, (1,) * ndim, np.full((1,) * ndim, value),
                                       False, False)
    return value


def min_max_quantize(x: Variable, ql_min=0, ql_max=255, decay: float = 0.999,
                     x_min_max: bool = False, ema: bool = False, ste_fine_grained: bool = True,
                     eps: float = 0.01, qr_min_init: Callable | np.ndarray | None = None,
                     qr_max_init: Callable | np.ndarray | None = None,
                     fix_parameters: bool = False, outputs=None, name: str | None = None):
    """F.min_max_quantize with ``min_max_quantize/qr_min`` and ``qr_max`` (ql_min's shape,
    -6 and 6 by default; stored as trainable unless both ``x_min_max`` and ``ema``) and
    ``ql_min``/``ql_max`` where those are numbers."""
    with scope(name, "min_max_quantize"):
        check_input("min_max_quantize", x, 0)
        ql_min = _levels("ql_min", ql_min, x.ndim)
        ql_max = _levels("ql_max", ql_max, x.ndim)
        trainable = not (x_min_max and ema)
        qr_min = get_parameter_or_create(
            "qr_min", ql_min.shape,
            ConstantInitializer(-6.0) if qr_min_init is None else qr_min_init,
            trainable, not fix_parameters)
        qr_max = get_parameter_or_create(
            "qr_max", ql_min.shape,
            ConstantInitializer(6.0) if qr_max_init is None else qr_max_init,
            trainable, not fix_parameters)
        return F.min_max_quantize(x, qr_min, qr_max, ql_min, ql_max, decay, x_min_max, ema,
                                  ste_fine_grained, eps, outputs=outputs)


# -- the layers' parameters ------------------------------------------------------------

def _quantized(name: str, shape: tuple, init: Init, value: Variable,
               quantizer: Quantizer | None) -> Variable:
    """``quantizer(value)`` computed into the parameter ``name`` (no gradient, initialized
    by ``init`` as nnabla's), or ``value`` itself where there is no quantizer."""
    if quantizer is None:
        return value
    stored = get_parameter_or_create(name, shape, init, False)
    return quantizer(value, [stored.data])


def _quantized_weights(w_shape: tuple, wq_shape: tuple, b_shape: tuple, w_init: Init,
                       b_init: Init, fix_parameters: bool, with_bias: bool,
                       quantize_w: Quantizer | None, quantize_b: Quantizer | None) -> tuple:
    """``W`` and ``W_q``, then ``b`` and ``b_q`` (zero by default, with ``with_bias``), in
    nnabla's order: the weight and bias the layer computes with (None: no bias)."""
    w = get_parameter_or_create("W", w_shape, w_init, True, not fix_parameters)
    w = _quantized("W_q", wq_shape, w_init, w, quantize_w)
    if not with_bias:
        return w, None
    b_init = ConstantInitializer() if b_init is None else b_init
    b = get_parameter_or_create("b", b_shape, b_init, True, not fix_parameters)
    return w, _quantized("b_q", b_shape, b_init, b, quantize_b)


def _affine_shapes(fn_name: str, inp, n_outmaps, base_axis: int) -> tuple:
    """(W's shape, its Glorot-uniform limit, b's shape) of an affine layer."""
    check_input(fn_name, inp, base_axis + 1)
    outmaps = as_shape(n_outmaps, f"PF.{fn_name}'s n_outmaps")
    inmaps = int(np.prod(inp.shape[base_axis:]))
    return (inmaps,) + outmaps, calc_uniform_lim_glorot(inmaps, int(np.prod(outmaps))), outmaps


def _quantized_affine(fn_name: str, inp, n_outmaps, base_axis, w_init, b_init,
                      fix_parameters, rng, with_bias, quantize_w, quantize_b) -> Variable:
    w_shape, glorot, b_shape = _affine_shapes(fn_name, inp, n_outmaps, base_axis)
    w_init = UniformInitializer(glorot, rng=rng) if w_init is None else w_init
    w, b = _quantized_weights(w_shape, w_shape, b_shape, w_init, b_init, fix_parameters,
                              with_bias, quantize_w, quantize_b)
    return F.affine(inp, w, b, base_axis)


def _conv_geometry(fn_name: str, inp, outmaps, kernel, group, base_axis,
                   channel_last: bool) -> tuple:
    """(the kernel, outmaps, the input's channels (channels last with ``channel_last``),
    the weight's shape (O, C/group, *kernel) or (O, *kernel, C/group), the Glorot limit,
    and C at ``base_axis``, which some of nnabla's layers size their weights by)."""
    kernel = int_tuple(f"PF.{fn_name}", "kernel", kernel, None, 1, 1)
    channels = _channels(fn_name, inp, kernel, base_axis, channel_last)
    outmaps = int(outmaps)
    filter_shape = kernel + (channels // group,) if channel_last else (channels // group,) + kernel
    return (kernel, outmaps, (outmaps,) + filter_shape,
            calc_uniform_lim_glorot(channels, outmaps, kernel), inp.shape[base_axis])


def _quantized_convolution(fn_name: str, inp, outmaps, kernel, pad, stride, dilation, group,
                           channel_last, w_init, b_init, base_axis, fix_parameters, rng,
                           with_bias, quantize_w, quantize_b, w_by_base_axis: bool,
                           wq_by_base_axis: bool, pass_channel_last: bool) -> Variable:
    """A quantized convolution layer; ``w_by_base_axis`` / ``wq_by_base_axis``: W / W_q
    sized (O, inp.shape[base_axis] / group, *kernel) whatever ``channel_last``, as some of
    nnabla's are; ``pass_channel_last``: F.convolution is told ``channel_last``."""
    kernel, outmaps, w_shape, glorot, at_axis = _conv_geometry(
        fn_name, inp, outmaps, kernel, group, base_axis, channel_last)
    by_axis = (outmaps, at_axis // group) + kernel
    w_init = UniformInitializer(glorot, rng=rng) if w_init is None else w_init
    w, b = _quantized_weights(by_axis if w_by_base_axis else w_shape,
                              by_axis if wq_by_base_axis else w_shape, (outmaps,), w_init,
                              b_init, fix_parameters, with_bias, quantize_w, quantize_b)
    if pass_channel_last:
        return F.convolution(inp, w, b, base_axis, pad, stride, dilation, group, channel_last)
    return F.convolution(inp, w, b, base_axis, pad, stride, dilation, group)


# -- fixed-point, power-of-two and min-max quantized layers, pruned layers ---------------

def _fixed_point(quantize: bool, sign: bool, n: int, delta: float,
                 ste_fine_grained: bool) -> Quantizer | None:
    if not quantize:
        return None
    return lambda v, into: F.fixed_point_quantize(v, sign, n, delta, True, ste_fine_grained,
                                                  outputs=into)


def _pow2(quantize: bool, sign: bool, with_zero: bool, n: int, m: int,
          ste_fine_grained: bool) -> Quantizer | None:
    if not quantize:
        return None
    return lambda v, into: F.pow2_quantize(v, sign, with_zero, n, m, True, ste_fine_grained,
                                           outputs=into)


def _pruned(prune: bool, rate: float) -> Quantizer | None:
    if not prune:
        return None
    return lambda v, into: F.prune(v, rate, outputs=into)


def _min_max(quantize: bool, ql_min, ql_max, min_max: bool, qr_min_init: Init,
             qr_max_init: Init, ste_fine_grained: bool, eps: float, fix_parameters: bool,
             name: str) -> Quantizer | None:
    """PF.min_max_quantize in the scope ``name`` (``min_max_quantize_w`` or ``_b``), with
    nnabla's fixed decay 0.999 and without its moving average."""
    if not quantize:
        return None
    return lambda v, into: min_max_quantize(
        v, ql_min, ql_max, 0.999, min_max, False, ste_fine_grained, eps, qr_min_init,
        qr_max_init, fix_parameters, outputs=into, name=name)


def fixed_point_quantized_affine(inp: Variable, n_outmaps: int | Sequence[int],
                                 base_axis: int = 1, w_init: Init = None, b_init: Init = None,
                                 fix_parameters: bool = False,
                                 rng: np.random.RandomState | None = None,
                                 with_bias: bool = True, quantize_w: bool = True,
                                 sign_w: bool = True, n_w: int = 8, delta_w: float = 2**-4,
                                 ste_fine_grained_w: bool = True, quantize_b: bool = True,
                                 sign_b: bool = True, n_b: int = 8, delta_b: float = 2**-4,
                                 ste_fine_grained_b: bool = True,
                                 name: str | None = None) -> Variable:
    """Affine layer with fixed-point quantized weight and bias: ``fp_quantized_affine/W``,
    ``W_q`` (inputs, *n_outmaps), ``b``, ``b_q`` (*n_outmaps)."""
    with scope(name, "fp_quantized_affine"):
        return _quantized_affine(
            "fixed_point_quantized_affine", inp, n_outmaps, base_axis, w_init, b_init,
            fix_parameters, rng, with_bias,
            _fixed_point(quantize_w, sign_w, n_w, delta_w, ste_fine_grained_w),
            _fixed_point(quantize_b, sign_b, n_b, delta_b, ste_fine_grained_b))


def fixed_point_quantized_convolution(inp: Variable, outmaps: int, kernel: Sequence[int],
                                      pad=None, stride=None, dilation=None, group: int = 1,
                                      channel_last: bool = False, w_init: Init = None,
                                      b_init: Init = None, base_axis: int = 1,
                                      fix_parameters: bool = False,
                                      rng: np.random.RandomState | None = None,
                                      with_bias: bool = True, quantize_w: bool = True,
                                      sign_w: bool = True, n_w: int = 8,
                                      delta_w: float = 2**-4, ste_fine_grained_w: bool = True,
                                      quantize_b: bool = True, sign_b: bool = True,
                                      n_b: int = 8, delta_b: float = 2**-4,
                                      ste_fine_grained_b: bool = True,
                                      name: str | None = None) -> Variable:
    """Convolution layer with fixed-point quantized weight and bias:
    ``fp_quantized_conv/W`` (outmaps, C/group, *kernel), ``W_q`` (its ``channel_last``
    layout), ``b``, ``b_q`` (outmaps); the convolution itself is channels first, as
    nnabla's."""
    with scope(name, "fp_quantized_conv"):
        return _quantized_convolution(
            "fixed_point_quantized_convolution", inp, outmaps, kernel, pad, stride, dilation,
            group, channel_last, w_init, b_init, base_axis, fix_parameters, rng, with_bias,
            _fixed_point(quantize_w, sign_w, n_w, delta_w, ste_fine_grained_w),
            _fixed_point(quantize_b, sign_b, n_b, delta_b, ste_fine_grained_b),
            w_by_base_axis=True, wq_by_base_axis=False, pass_channel_last=False)


def pow2_quantized_affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
                          w_init: Init = None, b_init: Init = None,
                          fix_parameters: bool = False,
                          rng: np.random.RandomState | None = None, with_bias: bool = True,
                          quantize_w: bool = True, sign_w: bool = True,
                          with_zero_w: bool = False, n_w: int = 8, m_w: int = 2,
                          ste_fine_grained_w: bool = True, quantize_b: bool = True,
                          sign_b: bool = True, with_zero_b: bool = False, n_b: int = 8,
                          m_b: int = 2, ste_fine_grained_b: bool = True,
                          name: str | None = None) -> Variable:
    """Affine layer with power-of-two quantized weight and bias:
    ``pow2_quantized_affine/W``, ``W_q`` (inputs, *n_outmaps), ``b``, ``b_q``
    (*n_outmaps)."""
    with scope(name, "pow2_quantized_affine"):
        return _quantized_affine(
            "pow2_quantized_affine", inp, n_outmaps, base_axis, w_init, b_init,
            fix_parameters, rng, with_bias,
            _pow2(quantize_w, sign_w, with_zero_w, n_w, m_w, ste_fine_grained_w),
            _pow2(quantize_b, sign_b, with_zero_b, n_b, m_b, ste_fine_grained_b))


def pow2_quantized_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None,
                               stride=None, dilation=None, group: int = 1,
                               w_init: Init = None, b_init: Init = None, base_axis: int = 1,
                               fix_parameters: bool = False,
                               rng: np.random.RandomState | None = None,
                               with_bias: bool = True, quantize_w: bool = True,
                               with_zero_w: bool = False, sign_w: bool = True, n_w: int = 8,
                               m_w: int = 2, ste_fine_grained_w: bool = True,
                               quantize_b: bool = True, with_zero_b: bool = False,
                               sign_b: bool = True, n_b: int = 8, m_b: int = 2,
                               ste_fine_grained_b: bool = True,
                               name: str | None = None) -> Variable:
    """Convolution layer with power-of-two quantized weight and bias:
    ``pow2_quantized_conv/W``, ``W_q`` (outmaps, C/group, *kernel), ``b``, ``b_q``
    (outmaps)."""
    with scope(name, "pow2_quantized_conv"):
        return _quantized_convolution(
            "pow2_quantized_convolution", inp, outmaps, kernel, pad, stride, dilation, group,
            False, w_init, b_init, base_axis, fix_parameters, rng, with_bias,
            _pow2(quantize_w, sign_w, with_zero_w, n_w, m_w, ste_fine_grained_w),
            _pow2(quantize_b, sign_b, with_zero_b, n_b, m_b, ste_fine_grained_b),
            w_by_base_axis=True, wq_by_base_axis=True, pass_channel_last=False)


def pruned_affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
                  w_init: Init = None, b_init: Init = None, fix_parameters: bool = False,
                  rng: np.random.RandomState | None = None, with_bias: bool = True,
                  prune_w: bool = True, rate_w: float = 0.9, prune_b: bool = True,
                  rate_b: float = 0.9, name: str | None = None) -> Variable:
    """Affine layer with pruned weight and bias: ``pruned_affine/W``, ``W_q`` (inputs,
    *n_outmaps), ``b``, ``b_q`` (*n_outmaps)."""
    with scope(name, "pruned_affine"):
        return _quantized_affine("pruned_affine", inp, n_outmaps, base_axis, w_init, b_init,
                                 fix_parameters, rng, with_bias, _pruned(prune_w, rate_w),
                                 _pruned(prune_b, rate_b))


def pruned_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None,
                       stride=None, dilation=None, group: int = 1, channel_last: bool = False,
                       w_init: Init = None, b_init: Init = None, base_axis: int = 1,
                       fix_parameters: bool = False, rng: np.random.RandomState | None = None,
                       with_bias: bool = True, prune_w: bool = True, rate_w: float = 0.9,
                       prune_b: bool = True, rate_b: float = 0.9,
                       name: str | None = None) -> Variable:
    """Convolution layer with pruned weight and bias: ``pruned_conv/W`` (outmaps,
    C/group, *kernel; channels last with ``channel_last``), ``W_q``, ``b``, ``b_q``
    (outmaps)."""
    with scope(name, "pruned_conv"):
        return _quantized_convolution(
            "pruned_convolution", inp, outmaps, kernel, pad, stride, dilation, group,
            channel_last, w_init, b_init, base_axis, fix_parameters, rng, with_bias,
            _pruned(prune_w, rate_w), _pruned(prune_b, rate_b),
            w_by_base_axis=False, wq_by_base_axis=True, pass_channel_last=True)


def _min_max_inits(qr_min_w_init, qr_max_w_init, qr_min_b_init, qr_max_b_init) -> tuple:
    """nnabla's default ranges: [-2, 2] for the weight, [-6, 6] for the bias."""
    return tuple(ConstantInitializer(d) if i is None else i for i, d in
                 zip((qr_min_w_init, qr_max_w_init, qr_min_b_init, qr_max_b_init),
                     (-2.0, 2.0, -6.0, 6.0)))


def min_max_quantized_affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
                             w_init: Init = None, b_init: Init = None,
                             fix_parameters: bool = False,
                             rng: np.random.RandomState | None = None, with_bias: bool = True,
                             quantize_w: bool = True, ql_min_w=0, ql_max_w=255,
                             w_min_max: bool = False, qr_min_w_init: Init = None,
                             qr_max_w_init: Init = None, ste_fine_grained_w: bool = True,
                             quantize_b: bool = True, ql_min_b=0, ql_max_b=255,
                             b_min_max: bool = False, qr_min_b_init: Init = None,
                             qr_max_b_init: Init = None, ste_fine_grained_b: bool = True,
                             eps: float = 0.01, name: str | None = None) -> Variable:
    """Affine layer with min-max quantized weight and bias: ``min_max_quantized_affine/W``,
    ``W_q``, ``b``, ``b_q``, and the ranges under ``min_max_quantize_w/`` and
    ``min_max_quantize_b/``."""
    inits = _min_max_inits(qr_min_w_init, qr_max_w_init, qr_min_b_init, qr_max_b_init)
    with scope(name, "min_max_quantized_affine"):
        return _quantized_affine(
            "min_max_quantized_affine", inp, n_outmaps, base_axis, w_init, b_init,
            fix_parameters, rng, with_bias,
            _min_max(quantize_w, ql_min_w, ql_max_w, w_min_max, *inits[:2],
                     ste_fine_grained_w, eps, fix_parameters, "min_max_quantize_w"),
            _min_max(quantize_b, ql_min_b, ql_max_b, b_min_max, *inits[2:],
                     ste_fine_grained_b, eps, fix_parameters, "min_max_quantize_b"))


def min_max_quantized_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None,
                                  stride=None, dilation=None, group: int = 1,
                                  channel_last: bool = False, w_init: Init = None,
                                  b_init: Init = None, base_axis: int = 1,
                                  fix_parameters: bool = False,
                                  rng: np.random.RandomState | None = None,
                                  with_bias: bool = True, quantize_w: bool = True,
                                  ql_min_w=0, ql_max_w=255, w_min_max: bool = False,
                                  qr_min_w_init: Init = None, qr_max_w_init: Init = None,
                                  ste_fine_grained_w: bool = True, quantize_b: bool = True,
                                  ql_min_b=0, ql_max_b=255, b_min_max: bool = False,
                                  qr_min_b_init: Init = None, qr_max_b_init: Init = None,
                                  ste_fine_grained_b: bool = True, eps: float = 0.01,
                                  name: str | None = None) -> Variable:
    """Convolution layer with min-max quantized weight and bias:
    ``min_max_quantized_conv/W``, ``W_q`` (outmaps, C/group, *kernel; channels last with
    ``channel_last``), ``b``, ``b_q``, and the ranges under ``min_max_quantize_w/`` and
    ``min_max_quantize_b/``."""
    inits = _min_max_inits(qr_min_w_init, qr_max_w_init, qr_min_b_init, qr_max_b_init)
    with scope(name, "min_max_quantized_conv"):
        return _quantized_convolution(
            "min_max_quantized_convolution", inp, outmaps, kernel, pad, stride, dilation,
            group, channel_last, w_init, b_init, base_axis, fix_parameters, rng, with_bias,
            _min_max(quantize_w, ql_min_w, ql_max_w, w_min_max, *inits[:2],
                     ste_fine_grained_w, eps, fix_parameters, "min_max_quantize_w"),
            _min_max(quantize_b, ql_min_b, ql_max_b, b_min_max, *inits[2:],
                     ste_fine_grained_b, eps, fix_parameters, "min_max_quantize_b"),
            w_by_base_axis=False, wq_by_base_axis=False, pass_channel_last=True)


# -- incremental network quantization ------------------------------------------------------

def _inq_parameters(w_shape: tuple, b_shape: tuple, w_init: Init, i_init: Init, b_init: Init,
                    fix_parameters: bool, with_bias: bool) -> tuple:
    """``W``, the indicator ``I`` (zeros: all learnable; no gradient) and ``b`` (zeros)."""
    w = get_parameter_or_create("W", w_shape, w_init, True, not fix_parameters)
    i = get_parameter_or_create("I", w_shape,
                                ConstantInitializer() if i_init is None else i_init, False)
    if not with_bias:
        return w, i, None
    b_init = ConstantInitializer() if b_init is None else b_init
    return w, i, get_parameter_or_create("b", b_shape, b_init, True, not fix_parameters)


def inq_affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
               num_bits: int = 4, inq_iterations: Sequence[int] = (),
               selection_algorithm: str = "random", seed: int = -1, w_init: Init = None,
               i_init: Init = None, b_init: Init = None, fix_parameters: bool = False,
               rng: np.random.RandomState | None = None, with_bias: bool = True,
               name: str | None = None) -> Variable:
    """INQ affine layer: ``inq_affine/W`` and ``I`` (inputs, *n_outmaps; Glorot-uniform
    and zeros) and ``b`` (*n_outmaps); see F.inq_affine."""
    with scope(name, "inq_affine"):
        w_shape, glorot, b_shape = _affine_shapes("inq_affine", inp, n_outmaps, base_axis)
        w_init = UniformInitializer(glorot, rng=rng) if w_init is None else w_init
        params = _inq_parameters(w_shape, b_shape, w_init, i_init, b_init, fix_parameters,
                                 with_bias)
        return F.inq_affine(inp, *params, base_axis, num_bits, inq_iterations,
                            selection_algorithm, seed)


def inq_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None, stride=None,
                    dilation=None, group: int = 1, num_bits: int = 4,
                    inq_iterations: Sequence[int] = (), selection_algorithm: str = "random",
                    seed: int = -1, w_init: Init = None, i_init: Init = None,
                    b_init: Init = None, base_axis: int = 1, fix_parameters: bool = False,
                    rng: np.random.RandomState | None = None, with_bias: bool = True,
                    name: str | None = None) -> Variable:
    """INQ convolution layer: ``inq_conv/W`` and ``I`` (outmaps, C, *kernel, all the
    input channels as nnabla's, so group 1 only; Glorot-uniform and zeros) and ``b``
    (outmaps); see F.inq_convolution."""
    with scope(name, "inq_conv"):
        kernel, outmaps, _, glorot, channels = _conv_geometry(
            "inq_convolution", inp, outmaps, kernel, 1, base_axis, False)
        w_init = UniformInitializer(glorot, rng=rng) if w_init is None else w_init
        params = _inq_parameters((outmaps, channels) + kernel, (outmaps,), w_init, i_init,
                                 b_init, fix_parameters, with_bias)
        return F.inq_convolution(inp, *params, base_axis, pad, stride, dilation, group,
                                 num_bits, inq_iterations, selection_algorithm, seed)
