"""Normalization layers and their parameters: ``bn/beta``, ``bn/gamma`` and the running
``bn/mean`` and ``bn/var``; ``layer_normalization/beta`` and ``/gamma``, and so on."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import functions as F
from ..context import to_module
from ..errors import DpnbError
from ..functions.base import axes_of, base_axis_of, kept_axes, one_axis
from ..graph import Variable
from ..initializer import ConstantInitializer, NormalInitializer
from ..parameter import get_parameter_or_create
from ._common import check_input, scope

__all__ = ["batch_normalization", "fused_batch_normalization", "group_normalization",
           "instance_normalization", "layer_normalization", "mean_subtraction",
           "spectral_norm", "sync_batch_normalization", "weight_normalization"]


def _initializers(fn_name: str, param_init: dict | None, defaults: dict) -> dict:
    """``defaults`` overridden by ``param_init``, whose keys must be among them."""
    unknown = set(param_init or {}) - set(defaults)
    if unknown:
        raise DpnbError(f"PF.{fn_name}: param_init keys must be among {sorted(defaults)}, "
                        f"got {sorted(unknown)}")
    return {**defaults, **(param_init or {})}


def _beta_gamma(init: dict, shape: tuple, fix_parameters: bool, no_scale: bool,
                no_bias: bool) -> tuple:
    """The trainable ``beta`` and ``gamma`` of shape ``shape``, None where dropped."""
    beta = None if no_bias else get_parameter_or_create("beta", shape, init["beta"], True,
                                                        not fix_parameters)
    gamma = None if no_scale else get_parameter_or_create("gamma", shape, init["gamma"], True,
                                                          not fix_parameters)
    return beta, gamma


def _affine_parameters(fn_name: str, shape: tuple, fix_parameters: bool,
                       param_init: dict | None, no_scale: bool, no_bias: bool) -> tuple:
    """A standardization's ``beta`` (zeros) and ``gamma`` (ones), None where dropped."""
    init = _initializers(fn_name, param_init, {"beta": ConstantInitializer(0),
                                               "gamma": ConstantInitializer(1)})
    return _beta_gamma(init, shape, fix_parameters, no_scale, no_bias)


def _bn_parameters(fn_name: str, inp: Variable, axes: list[int], fix_parameters: bool,
                   param_init: dict | None, no_scale: bool, no_bias: bool) -> tuple:
    """Batch normalization's ``beta``, ``gamma`` (None where dropped) and running ``mean``
    and ``var`` (kept outside the trainable storage: they get no gradient)."""
    shape = tuple(s if i in axes else 1 for i, s in enumerate(inp.shape))
    init = _initializers(fn_name, param_init, {
        "beta": ConstantInitializer(0), "gamma": ConstantInitializer(1),
        "mean": ConstantInitializer(0), "var": ConstantInitializer(1)})
    beta, gamma = _beta_gamma(init, shape, fix_parameters, no_scale, no_bias)
    mean = get_parameter_or_create("mean", shape, init["mean"], False)
    var = get_parameter_or_create("var", shape, init["var"], False)
    return beta, gamma, mean, var


def batch_normalization(inp: Variable, axes: int | Sequence[int] = (1,), decay_rate: float = 0.9,
                        eps: float = 1e-5, batch_stat: bool = True, output_stat: bool = False,
                        fix_parameters: bool = False, param_init: dict | None = None,
                        no_scale: bool = False, no_bias: bool = False, name: str | None = None):
    """Batch normalization with parameters ``bn/beta``, ``bn/gamma`` and the running
    ``bn/mean`` and ``bn/var``, of size 1 except on ``axes``."""
    with scope(name, "bn"):
        check_input("batch_normalization", inp, 1)
        axes = kept_axes("PF.batch_normalization", axes, inp.ndim)
        params = _bn_parameters("batch_normalization", inp, axes, fix_parameters, param_init,
                                no_scale, no_bias)
        return F.batch_normalization(inp, *params, axes, decay_rate, eps, batch_stat, output_stat)


def fused_batch_normalization(inp: Variable, z: Variable | None = None,
                              axes: int | Sequence[int] = (1,), decay_rate: float = 0.9,
                              eps: float = 1e-5, batch_stat: bool = True,
                              nonlinearity: str = "relu", output_stat: bool = False,
                              fix_parameters: bool = False, param_init: dict | None = None,
                              no_scale: bool = False, no_bias: bool = False,
                              name: str | None = None):
    """relu(batch normalization + z) (F.fused_batch_normalization) with the parameters of
    PF.batch_normalization, under the scope ``bn`` as in nnabla."""
    with scope(name, "bn"):
        check_input("fused_batch_normalization", inp, 1)
        axes = kept_axes("PF.fused_batch_normalization", axes, inp.ndim)
        params = _bn_parameters("fused_batch_normalization", inp, axes, fix_parameters,
                                param_init, no_scale, no_bias)
        return F.fused_batch_normalization(inp, *params, z, axes, decay_rate, eps, batch_stat,
                                           nonlinearity, output_stat)


def sync_batch_normalization(inp: Variable, comm, group: str = "world",
                             axes: int | Sequence[int] = (1,), decay_rate: float = 0.9,
                             eps: float = 1e-5, batch_stat: bool = True,
                             output_stat: bool = False, fix_parameters: bool = False,
                             param_init: dict | None = None, no_scale: bool = False,
                             no_bias: bool = False, name: str | None = None):
    """Batch normalization over the batches of all ranks of ``group`` of ``comm``
    (F.sync_batch_normalization), with the parameters of PF.batch_normalization (also
    under the scope ``bn``, as in nnabla)."""
    with scope(name, "bn"):
        check_input("sync_batch_normalization", inp, 1)
        axes = kept_axes("PF.sync_batch_normalization", axes, inp.ndim)
        params = _bn_parameters("sync_batch_normalization", inp, axes, fix_parameters,
                                param_init, no_scale, no_bias)
        return F.sync_batch_normalization(inp, *params, comm, group, axes, decay_rate, eps,
                                          batch_stat, output_stat)


def layer_normalization(inp: Variable, batch_axis: int | Sequence[int] = 0, eps: float = 1e-05,
                        output_stat: bool = False, fix_parameters: bool = False,
                        param_init: dict | None = None, no_scale: bool = False,
                        no_bias: bool = False, name: str | None = None):
    """Layer normalization (F.layer_normalization) with ``layer_normalization/beta`` and
    ``/gamma`` of the input's shape with 1 on the batch axes."""
    with scope(name, "layer_normalization"):
        check_input("layer_normalization", inp, 1)
        batch_axes = axes_of("PF.layer_normalization", batch_axis, inp.ndim, "batch_axis")
        shape = tuple(1 if a in batch_axes else s for a, s in enumerate(inp.shape))
        beta, gamma = _affine_parameters("layer_normalization", shape, fix_parameters,
                                         param_init, no_scale, no_bias)
        return F.layer_normalization(inp, beta, gamma, batch_axis, eps, output_stat)


def _per_channel(fn_name: str, inp: Variable, channel_axis: int) -> tuple:
    """The shape of per-channel parameters: 1 except on ``channel_axis``."""
    ch = one_axis(f"PF.{fn_name}", channel_axis, inp.ndim, "channel_axis")
    return tuple(s if a == ch else 1 for a, s in enumerate(inp.shape))


def instance_normalization(inp: Variable, channel_axis: int = 1,
                           batch_axis: int | Sequence[int] = 0, eps: float = 1e-05,
                           output_stat: bool = False, fix_parameters: bool = False,
                           param_init: dict | None = None, no_scale: bool = False,
                           no_bias: bool = False, name: str | None = None):
    """Instance normalization (F.instance_normalization) with per-channel
    ``instance_normalization/beta`` and ``/gamma``."""
    with scope(name, "instance_normalization"):
        check_input("instance_normalization", inp, 1)
        shape = _per_channel("instance_normalization", inp, channel_axis)
        beta, gamma = _affine_parameters("instance_normalization", shape, fix_parameters,
                                         param_init, no_scale, no_bias)
        return F.instance_normalization(inp, beta, gamma, channel_axis, batch_axis, eps,
                                        output_stat)


def group_normalization(inp: Variable, num_groups: int, channel_axis: int = 1,
                        batch_axis: int | Sequence[int] = 0, eps: float = 1e-05,
                        output_stat: bool = False, fix_parameters: bool = False,
                        param_init: dict | None = None, no_scale: bool = False,
                        no_bias: bool = False, name: str | None = None):
    """Group normalization (F.group_normalization) with per-channel
    ``group_normalization/beta`` and ``/gamma``."""
    with scope(name, "group_normalization"):
        check_input("group_normalization", inp, 1)
        shape = _per_channel("group_normalization", inp, channel_axis)
        beta, gamma = _affine_parameters("group_normalization", shape, fix_parameters,
                                         param_init, no_scale, no_bias)
        return F.group_normalization(inp, beta, gamma, num_groups, channel_axis, batch_axis,
                                     eps, output_stat)


def weight_normalization(w: Variable, dim: int = 0, eps: float = 1e-12, g_init=None,
                         fix_parameters: bool = False, name: str | None = None) -> Variable:
    """Weight normalization of ``w`` (F.weight_normalization) with the scale ``wn/g`` of
    shape (w.shape[dim],), by default initialized to w's norms so that the layer starts
    as the plain weight.  Used as ``apply_w=PF.weight_normalization``."""
    with scope(name, "wn"):
        check_input("weight_normalization", w, 1)
        axis = one_axis("PF.weight_normalization", dim, w.ndim, "dim")
        if g_init is None:
            others = tuple(a for a in range(w.ndim) if a != axis)
            g_init = np.sqrt((np.asarray(to_module(w.d, np), np.float64) ** 2).sum(axis=others)
                             + eps)
        g = get_parameter_or_create("g", (w.shape[axis],), g_init, True, not fix_parameters)
        return F.weight_normalization(w, g, dim, eps)


def mean_subtraction(inp: Variable, base_axis: int = 1, update_running_mean: bool = True,
                     fix_parameters: bool = False, name: str | None = None) -> Variable:
    """x minus its running mean (F.mean_subtraction) kept in ``mean_subtraction/mean`` (shape
    inp.shape[base_axis:]) and the batch count ``mean_subtraction/t``; neither is trained,
    so ``fix_parameters`` changes nothing, as in nnabla."""
    with scope(name, "mean_subtraction"):
        check_input("mean_subtraction", inp, 1)
        axis = base_axis_of("PF.mean_subtraction", base_axis, inp.ndim)
        mean = get_parameter_or_create("mean", inp.shape[axis:], ConstantInitializer(0), False)
        t = get_parameter_or_create("t", (1,), ConstantInitializer(0), False)
        return F.mean_subtraction(inp, mean, t, base_axis, update_running_mean)


def spectral_norm(w: Variable, dim: int = 0, itr: int = 1, eps: float = 1e-12, test: bool = False,
                  u_init=None, fix_parameters: bool = True, name: str | None = None) -> Variable:
    """Spectral normalization of ``w`` (F.spectral_norm) with the singular-vector estimate
    ``spectral-norm/u`` of shape (w.shape[dim],), standard normal by default.  u is never
    trained (power iteration updates it), so ``fix_parameters`` changes nothing, as in
    nnabla.  Used as ``apply_w=lambda w: PF.spectral_norm(w, dim=...)``."""
    with scope(name, "spectral-norm"):
        check_input("spectral_norm", w, 1)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) \
                or not 0 <= dim < w.ndim:
            raise DpnbError(f"PF.spectral_norm: dim must be an int in [0, {w.ndim}) for a "
                            f"weight of shape {w.shape}, got {dim!r}")
        u_init = NormalInitializer() if u_init is None else u_init
        u = get_parameter_or_create("u", (w.shape[dim],), u_init, False, False)
        return F.spectral_norm(w, u, dim, itr, eps, test)
