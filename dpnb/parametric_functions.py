"""Parametric functions (``import dpnb.parametric_functions as PF``): a function
plus the parameters it owns, created on first call and reused after.  As in nnabla
they live in a scope named after the function (``affine``, ``conv``, ``bn``), inside
the scope ``name`` where that is given: ``PF.convolution(x, 8, (3, 3), name="c1")``
owns ``c1/conv/W`` and ``c1/conv/b``."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from . import functions as F
from .errors import DpnbError
from .graph import Variable
from .initializer import ConstantInitializer, UniformInitializer, calc_uniform_lim_glorot
from .parameter import get_parameter_or_create, parameter_scope

__all__ = ["affine", "convolution", "batch_normalization", "sync_batch_normalization"]


def _scope(name: str | None, scope_name: str):
    """nnabla's scoping of a parametric function: ``scope_name``, under ``name`` when given."""
    return parameter_scope(scope_name if name is None else f"{name}/{scope_name}")


def _check_input(fn_name: str, inp, min_ndim: int) -> None:
    if not isinstance(inp, Variable):
        raise DpnbError(f"PF.{fn_name} expects an nn.Variable input, got {type(inp).__name__}")
    if inp.ndim < min_ndim:
        raise DpnbError(f"PF.{fn_name} expects an input of at least {min_ndim} dimensions, "
                        f"got shape {inp.shape}")


def _applied(fn_name: str, label: str, apply: Callable | None, var: Variable) -> Variable:
    """``apply(var)`` (e.g. a weight normalization) where ``apply`` is given."""
    if apply is None:
        return var
    if not callable(apply):
        raise DpnbError(f"PF.{fn_name}: {label} must be a callable taking and returning an "
                        f"nn.Variable, got {type(apply).__name__}")
    return apply(var)


def _weight_and_bias(fn_name: str, w_shape: tuple, b_shape: tuple, w_init, b_init,
                     fix_parameters: bool, with_bias: bool, apply_w, apply_b) -> tuple:
    """Parameters ``W`` and (with ``with_bias``) ``b``, zero-initialized by default,
    passed through ``apply_w`` / ``apply_b``."""
    w = get_parameter_or_create("W", w_shape, w_init, True, not fix_parameters)
    w = _applied(fn_name, "apply_w", apply_w, w)
    if not with_bias:
        return w, None
    b_init = ConstantInitializer() if b_init is None else b_init
    b = get_parameter_or_create("b", b_shape, b_init, True, not fix_parameters)
    return w, _applied(fn_name, "apply_b", apply_b, b)


def affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
           w_init: Callable | np.ndarray | None = None, b_init: Callable | np.ndarray | None = None,
           fix_parameters: bool = False, rng: np.random.RandomState | None = None,
           with_bias: bool = True, apply_w: Callable | None = None,
           apply_b: Callable | None = None, name: str | None = None) -> Variable:
    """Fully connected layer: parameters ``affine/W`` (inputs, *n_outmaps) and
    ``affine/b`` (*n_outmaps), Glorot-uniform and zero by default."""
    with _scope(name, "affine"):
        _check_input("affine", inp, base_axis + 1)
        outmaps = (tuple(int(m) for m in n_outmaps) if hasattr(n_outmaps, "__iter__")
                   else (int(n_outmaps),))
        inmaps = int(np.prod(inp.shape[base_axis:]))
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, int(np.prod(outmaps))),
                                        rng=rng)
        w, b = _weight_and_bias("affine", (inmaps,) + outmaps, outmaps, w_init, b_init,
                                fix_parameters, with_bias, apply_w, apply_b)
        return F.affine(inp, w, b, base_axis)


def convolution(inp: Variable, outmaps: int, kernel: Sequence[int], pad=None, stride=None,
                dilation=None, group: int = 1, channel_last: bool = False,
                w_init: Callable | np.ndarray | None = None,
                b_init: Callable | np.ndarray | None = None, base_axis: int = 1,
                fix_parameters: bool = False, rng: np.random.RandomState | None = None,
                with_bias: bool = True, apply_w: Callable | None = None,
                apply_b: Callable | None = None, name: str | None = None) -> Variable:
    """Convolution layer: parameters ``conv/W`` (outmaps, inmaps/group, *kernel; channels
    last with ``channel_last``) and ``conv/b`` (outmaps), Glorot-uniform and zero by default."""
    with _scope(name, "conv"):
        _check_input("convolution", inp, base_axis + 1 + len(kernel))
        outmaps = int(outmaps)
        kernel = tuple(int(k) for k in kernel)
        inmaps = inp.shape[-1] if channel_last else inp.shape[base_axis]
        if group < 1 or inmaps % group or outmaps % group:
            raise DpnbError(f"PF.convolution: input channels ({inmaps}) and outmaps ({outmaps}) "
                            f"must both be divisible by group ({group})")
        filter_shape = kernel + (inmaps // group,) if channel_last else (inmaps // group,) + kernel
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, outmaps, kernel), rng=rng)
        w, b = _weight_and_bias("convolution", (outmaps,) + filter_shape, (outmaps,), w_init,
                                b_init, fix_parameters, with_bias, apply_w, apply_b)
        return F.convolution(inp, w, b, base_axis, pad, stride, dilation, group, channel_last)


def _bn_axes(fn_name: str, inp: Variable, axes) -> list[int]:
    """``axes`` (an int or a sequence of ints) as distinct non-negative axes of ``inp``."""
    given = [axes] if isinstance(axes, (int, np.integer)) else axes
    valid = (isinstance(given, (list, tuple))
             and all(isinstance(a, (int, np.integer)) and -inp.ndim <= a < inp.ndim for a in given))
    kept = [int(a) % inp.ndim for a in given] if valid else []
    if not kept or len(set(kept)) != len(kept):
        raise DpnbError(f"PF.{fn_name}: axes must be an int or a list of distinct ints in "
                        f"[{-inp.ndim}, {inp.ndim}) for an input of shape {inp.shape}, got "
                        f"{axes!r}; e.g. axes=[1] for the channels of (N, C, H, W)")
    return kept


def _bn_parameters(fn_name: str, inp: Variable, axes: list[int], fix_parameters: bool,
                   param_init: dict | None, no_scale: bool, no_bias: bool) -> tuple:
    """Batch normalization's ``beta``, ``gamma`` (None where dropped) and running ``mean``
    and ``var`` (kept outside the trainable storage: they get no gradient)."""
    shape = tuple(s if i in axes else 1 for i, s in enumerate(inp.shape))
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


def batch_normalization(inp: Variable, axes: int | Sequence[int] = (1,), decay_rate: float = 0.9,
                        eps: float = 1e-5, batch_stat: bool = True, output_stat: bool = False,
                        fix_parameters: bool = False, param_init: dict | None = None,
                        no_scale: bool = False, no_bias: bool = False, name: str | None = None):
    """Batch normalization with parameters ``bn/beta``, ``bn/gamma`` and the running
    ``bn/mean`` and ``bn/var``, of size 1 except on ``axes``."""
    with _scope(name, "bn"):
        _check_input("batch_normalization", inp, 1)
        axes = _bn_axes("batch_normalization", inp, axes)
        params = _bn_parameters("batch_normalization", inp, axes, fix_parameters, param_init,
                                no_scale, no_bias)
        return F.batch_normalization(inp, *params, axes, decay_rate, eps, batch_stat, output_stat)


def sync_batch_normalization(inp: Variable, comm, group: str = "world",
                             axes: int | Sequence[int] = (1,), decay_rate: float = 0.9,
                             eps: float = 1e-5, batch_stat: bool = True,
                             output_stat: bool = False, fix_parameters: bool = False,
                             param_init: dict | None = None, no_scale: bool = False,
                             no_bias: bool = False, name: str | None = None):
    """Batch normalization over the batches of all ranks of ``group`` of ``comm``
    (F.sync_batch_normalization), with the parameters of PF.batch_normalization (also
    under the scope ``bn``, as in nnabla)."""
    with _scope(name, "bn"):
        _check_input("sync_batch_normalization", inp, 1)
        axes = _bn_axes("sync_batch_normalization", inp, axes)
        params = _bn_parameters("sync_batch_normalization", inp, axes, fix_parameters,
                                param_init, no_scale, no_bias)
        return F.sync_batch_normalization(inp, *params, comm, group, axes, decay_rate, eps,
                                          batch_stat, output_stat)
