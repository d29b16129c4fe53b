"""Parametric functions (``import dpnb.parametric_functions as PF``): a function
plus the parameters it owns, created on first call under a parameter scope
(``name=`` or the default scope name) and reused after, as in nnabla."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from . import functions as F
from .communicators import MultiProcessCommunicator
from .errors import DpnbError
from .graph import Variable
from .initializer import ConstantInitializer, UniformInitializer, calc_uniform_lim_glorot
from .parameter import get_parameter_or_create, parameter_scope

__all__ = ["affine", "convolution", "batch_normalization", "sync_batch_normalization"]


def _scoped(default_scope: str) -> Callable:
    """Run a parametric function under ``parameter_scope(name or default_scope)``."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, name: str | None = None, **kwargs):
            with parameter_scope(name or default_scope):
                return fn(*args, **kwargs)
        return wrapper
    return decorate


def _check_input(fn_name: str, inp, min_ndim: int) -> None:
    if not isinstance(inp, Variable):
        raise DpnbError(f"PF.{fn_name} expects an nn.Variable input, got {type(inp).__name__}")
    if inp.ndim < min_ndim:
        raise DpnbError(f"PF.{fn_name} expects an input of at least {min_ndim} dimensions, "
                        f"got shape {inp.shape}")


@_scoped("affine")
def affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
           w_init: Callable | None = None, b_init: Callable | None = None,
           fix_parameters: bool = False, rng: np.random.RandomState | None = None,
           with_bias: bool = True) -> Variable:
    """Fully connected layer: parameters ``W`` (inputs, *n_outmaps) and ``b`` (*n_outmaps)."""
    _check_input("affine", inp, base_axis + 1)
    outmaps = (int(n_outmaps),) if np.isscalar(n_outmaps) else tuple(int(m) for m in n_outmaps)
    inmaps = int(np.prod(inp.shape[base_axis:]))
    if w_init is None:
        w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, int(np.prod(outmaps))), rng=rng)
    w = get_parameter_or_create("W", (inmaps,) + outmaps, w_init, True, not fix_parameters)
    b = None
    if with_bias:
        b = get_parameter_or_create("b", outmaps, b_init or ConstantInitializer(), True,
                                    not fix_parameters)
    return F.affine(inp, w, b, base_axis)


@_scoped("conv")
def convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None, stride=None,
                dilation=None, group: int = 1, channel_last: bool = False,
                w_init: Callable | None = None, b_init: Callable | None = None,
                base_axis: int = 1, fix_parameters: bool = False,
                rng: np.random.RandomState | None = None, with_bias: bool = True) -> Variable:
    """2-D convolution layer: parameters ``W`` (outmaps, inmaps/group, *kernel) and ``b`` (outmaps)."""
    _check_input("convolution", inp, base_axis + 1 + len(kernel))
    outmaps = int(outmaps)
    inmaps = inp.shape[base_axis]
    if group < 1 or inmaps % group or outmaps % group:
        raise DpnbError(f"PF.convolution: input channels ({inmaps}) and outmaps ({outmaps}) "
                        f"must both be divisible by group ({group})")
    kernel = tuple(int(k) for k in kernel)
    if w_init is None:
        w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, outmaps, kernel), rng=rng)
    w = get_parameter_or_create("W", (outmaps, inmaps // group) + kernel, w_init, True,
                                not fix_parameters)
    b = None
    if with_bias:
        b = get_parameter_or_create("b", (outmaps,), b_init or ConstantInitializer(), True,
                                    not fix_parameters)
    return F.convolution(inp, w, b, base_axis, pad, stride, dilation, group, channel_last)


def _bn_parameters(fn_name: str, inp: Variable, axes: Sequence[int], fix_parameters: bool,
                   param_init: dict | None, no_scale: bool, no_bias: bool) -> tuple:
    """Batch normalization's ``beta``, ``gamma`` (None where dropped) and running ``mean``
    and ``var`` (kept outside the trainable storage: they get no gradient)."""
    _check_input(fn_name, inp, 1)
    kept = [a % inp.ndim for a in axes]
    shape = tuple(s if i in kept else 1 for i, s in enumerate(inp.shape))
    init = {"beta": ConstantInitializer(0), "gamma": ConstantInitializer(1),
            "mean": ConstantInitializer(0), "var": ConstantInitializer(1)}
    unknown = set(param_init or {}) - set(init)
    if unknown:
        raise DpnbError(f"PF.{fn_name}: param_init keys must be among {sorted(init)}, "
                        f"got {sorted(unknown)}")
    init.update(param_init or {})
    beta = None if no_bias else get_parameter_or_create("beta", shape, init["beta"], True,
                                                        not fix_parameters)
    gamma = None if no_scale else get_parameter_or_create("gamma", shape, init["gamma"], True,
                                                          not fix_parameters)
    mean = get_parameter_or_create("mean", shape, init["mean"], False)
    var = get_parameter_or_create("var", shape, init["var"], False)
    return beta, gamma, mean, var


@_scoped("bn")
def batch_normalization(inp: Variable, axes: Sequence[int] = (1,), decay_rate: float = 0.9,
                        eps: float = 1e-5, batch_stat: bool = True, output_stat: bool = False,
                        fix_parameters: bool = False, param_init: dict | None = None,
                        no_scale: bool = False, no_bias: bool = False):
    """Batch normalization with parameters ``beta``, ``gamma`` and the running
    ``mean`` and ``var``."""
    params = _bn_parameters("batch_normalization", inp, axes, fix_parameters, param_init,
                            no_scale, no_bias)
    return F.batch_normalization(inp, *params, axes, decay_rate, eps, batch_stat, output_stat)


@_scoped("bn")
def sync_batch_normalization(inp: Variable, comm: MultiProcessCommunicator, group: str = "world",
                             axes: Sequence[int] = (1,), decay_rate: float = 0.9,
                             eps: float = 1e-5, batch_stat: bool = True,
                             output_stat: bool = False, fix_parameters: bool = False,
                             param_init: dict | None = None, no_scale: bool = False,
                             no_bias: bool = False):
    """Batch normalization over the batches of all ranks of ``group`` of ``comm``
    (F.sync_batch_normalization), with the parameters of PF.batch_normalization."""
    params = _bn_parameters("sync_batch_normalization", inp, axes, fix_parameters, param_init,
                            no_scale, no_bias)
    return F.sync_batch_normalization(inp, *params, comm, group, axes, decay_rate, eps,
                                      batch_stat, output_stat)
