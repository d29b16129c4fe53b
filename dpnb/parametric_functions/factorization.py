"""Low-rank layers, as nnabla's: an affine or convolution whose weight is held factorized,
the factors computed once from an initial weight (``uv_init`` / ``oik_init``, an array or an
initializer, Glorot-uniform by default) by SVD or by a CP decomposition.  Factors already
in the scope are kept (the initializer is still drawn from, as in nnabla)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..functions.base import int_tuple
from ..graph import Variable
from ..initializer import ConstantInitializer, UniformInitializer, calc_uniform_lim_glorot
from ..ndarray import as_shape
from ..parameter import get_parameter, get_parameter_or_create, pop_parameter
from ..utils.factorization import cpd
from ._common import check_input, scope
from .convolutional import _channels

__all__ = ["svd_affine", "svd_convolution", "cpd3_convolution"]

Init = Callable | np.ndarray | None


def _initial_weight(init: Init, glorot: float, rng, shape: tuple) -> np.ndarray:
    """The weight the factors approximate: ``init`` itself where it is an array, else
    drawn from it (Glorot-uniform by default) in float32, as nnabla's initializers give."""
    if init is None:
        init = UniformInitializer(glorot, rng=rng)
    if isinstance(init, np.ndarray):
        return init
    return np.asarray(init(shape), dtype=np.float32)


def _check_rank(fn_name: str, r) -> int:
    if not isinstance(r, (int, np.integer)) or r < 1:
        raise DpnbError(f"PF.{fn_name}: the rank r must be an int > 0, got {r!r}")
    return int(r)


def _factors(names: Sequence[str], compute: Callable[[], list], fix_parameters: bool) -> list:
    """The factor parameters ``names`` (trainable unless ``fix_parameters``): those in the
    scope where all are there, else all created from ``compute()``'s arrays."""
    if any(get_parameter(name) is None for name in names):
        for name in names:
            pop_parameter(name)
        for name, value in zip(names, compute()):
            get_parameter_or_create(name, value.shape, value, True)
    return [get_parameter_or_create(name, None, None, True, not fix_parameters)
            for name in names]


def _bias(shape: tuple, b_init: Init, fix_parameters: bool, with_bias: bool) -> Variable | None:
    if not with_bias:
        return None
    b_init = ConstantInitializer() if b_init is None else b_init
    return get_parameter_or_create("b", shape, b_init, True, not fix_parameters)


def svd_affine(inp: Variable, n_outmaps: int | Sequence[int], r: int, base_axis: int = 1,
               uv_init: Init = None, b_init: Init = None, fix_parameters: bool = False,
               rng: np.random.RandomState | None = None, with_bias: bool = True,
               name: str | None = None) -> Variable:
    """Affine layer of rank ``r``: ``svd_affine/U`` (inputs, r) and ``V`` (r, *n_outmaps),
    the r dominant singular triplets of the initial weight (singular values folded into
    U), and ``b``; two affines through the bottleneck."""
    r = _check_rank("svd_affine", r)
    with scope(name, "svd_affine"):
        check_input("svd_affine", inp, base_axis + 1)
        outmaps = as_shape(n_outmaps, "PF.svd_affine's n_outmaps")
        inmaps, outputs = int(np.prod(inp.shape[base_axis:])), int(np.prod(outmaps))
        uv = _initial_weight(uv_init, calc_uniform_lim_glorot(inmaps, outputs), rng,
                             (inmaps,) + outmaps)

        def factorized():
            u, s, v = np.linalg.svd(uv.reshape(inmaps, outputs), full_matrices=False)
            return [(u * s)[:, :r], v[:r].reshape((r,) + outmaps)]

        u, v = _factors(("U", "V"), factorized, fix_parameters)
        b = _bias(outmaps, b_init, fix_parameters, with_bias)
        return F.affine(F.affine(inp, u, None, base_axis), v, b, base_axis)


def _flat_kernels(fn_name: str, inp, outmaps, kernel, init: Init, rng,
                  base_axis: int) -> tuple:
    """(the kernel, outmaps, the input's channels, the initial weight as (outmaps,
    channels, prod(kernel)))."""
    kernel = int_tuple(f"PF.{fn_name}", "kernel", kernel, None, 1, 1)
    channels = _channels(fn_name, inp, kernel, base_axis, False)
    outmaps = int(outmaps)
    weight = _initial_weight(init, calc_uniform_lim_glorot(channels, outmaps, kernel), rng,
                             (outmaps, channels) + kernel)
    return kernel, outmaps, channels, weight.reshape(outmaps, channels, int(np.prod(kernel)))


def svd_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], r: int, pad=None,
                    stride=None, dilation=None, uv_init: Init = None, b_init: Init = None,
                    base_axis: int = 1, fix_parameters: bool = False,
                    rng: np.random.RandomState | None = None, with_bias: bool = True,
                    name: str | None = None) -> Variable:
    """Convolution layer of rank ``r`` per input channel: ``svd_conv/U`` (C * r, *kernel),
    a depthwise convolution of multiplier r, and ``V`` (outmaps, C * r, 1, ...), a 1x1
    convolution, from the SVD of each input channel's (kernel, outmaps) slice of the
    initial weight; and ``b``."""
    r = _check_rank("svd_convolution", r)
    with scope(name, "svd_conv"):
        kernel, outmaps, channels, uv = _flat_kernels("svd_convolution", inp, outmaps, kernel,
                                                      uv_init, rng, base_axis)

        def factorized():
            u, s, v = np.linalg.svd(uv.transpose(1, 2, 0), full_matrices=False)
            u = u[:, :, :r] * s[:, None, :r]           # (C, kernel, r)
            return [u.transpose(0, 2, 1).reshape((channels * r,) + kernel),
                    v[:, :r].transpose(2, 0, 1).reshape((outmaps, channels * r)
                                                        + (1,) * len(kernel))]

        u, v = _factors(("U", "V"), factorized, fix_parameters)
        b = _bias((outmaps,), b_init, fix_parameters, with_bias)
        y = F.depthwise_convolution(inp, u, None, base_axis, pad, stride, dilation, r)
        return F.convolution(y, v, b, base_axis)


def cpd3_convolution(inp: Variable, outmaps: int, kernel: Sequence[int], r: int, pad=None,
                     stride=None, dilation=None, oik_init: Init = None, b_init: Init = None,
                     base_axis: int = 1, fix_parameters: bool = False,
                     rng: np.random.RandomState | None = None, with_bias: bool = True,
                     max_iter: int = 500, stopping_criterion: float = 1e-5,
                     lambda_reg: float = 0.0, name: str | None = None) -> Variable:
    """Convolution layer of CP rank ``r``: ``cpd3_conv/I`` (r, C, 1, ...), a 1x1
    convolution to r maps, ``K`` (r, *kernel), a depthwise convolution, and ``O``
    (outmaps, r, 1, ...), a 1x1 convolution, from the CP decomposition (cpd.ALS, with
    ``rng``) of the initial weight as (outmaps, C, prod(kernel)); and ``b``."""
    r = _check_rank("cpd3_convolution", r)
    with scope(name, "cpd3_conv"):
        kernel, outmaps, channels, oik = _flat_kernels("cpd3_convolution", inp, outmaps,
                                                       kernel, oik_init, rng, base_axis)
        ones = (1,) * len(kernel)

        def factorized():
            (o, i, k), weights = cpd.ALS().solve(oik, r, max_iter, stopping_criterion,
                                                 lambda_reg, oik.dtype, rng)
            return [i.T.reshape((r, channels) + ones), (o * weights).reshape((outmaps, r) + ones),
                    k.T.reshape((r,) + kernel)]

        i, o, k = _factors(("I", "O", "K"), factorized, fix_parameters)
        b = _bias((outmaps,), b_init, fix_parameters, with_bias)
        y = F.convolution(inp, i, None, base_axis)
        y = F.depthwise_convolution(y, k, None, base_axis, pad, stride, dilation, 1)
        return F.convolution(y, o, b, base_axis)
