"""Normalizations: batch (and sync batch) normalization, and the standardizations over
other axes (layer, instance, group) that keep no running statistics."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import kernels
from ..errors import DpnbError, DpnbValueError
from ..graph import Function, Variable
from .array import reshape, transpose
from .base import (argument_error, axes_of, base_axis_of, default_outputs, kept_axes,
                   one_axis, sum_to, workspace)
from .graph_module import composite_backward_graph, on_variables
from .specs import FunctionSpec, Params, attrs, call, ints

__all__ = ["BatchNormalizationInOutAdapter", "batch_normalization", "fused_batch_normalization",
           "group_normalization", "instance_normalization", "layer_normalization", "mean_subtraction",
           "norm_normalization", "spectral_norm", "sync_batch_normalization",
           "tensor_normalization", "weight_normalization", "weight_standardization"]

_ROLES = ("beta", "gamma", "mean", "variance")


def _batch_norm_params(fn) -> Params:
    if not {"mean", "variance"} <= set(fn.roles):
        raise DpnbError(f"{fn.name} without running mean and variance (None given) cannot be "
                        "written in nnabla's format, which always has them; pass parameters "
                        "for mean and variance (as PF.batch_normalization does)")
    return {"axes": ints(fn.axes), "decay_rate": fn.decay_rate, "eps": fn.eps,
            "batch_stat": fn.batch_stat, "no_scale": "gamma" not in fn.roles,
            "no_bias": "beta" not in fn.roles}


def _batch_norm_inputs(xs: list[Variable], p: Params, type_name: str) -> list:
    """x, beta, gamma, mean, variance, with None for the beta and gamma the file leaves out."""
    roles = [r for r, absent in (("beta", p.get("no_bias")), ("gamma", p.get("no_scale")))
             if not absent] + ["mean", "variance"]
    if len(xs) != 1 + len(roles):
        raise DpnbError(f"{type_name} has {len(xs)} inputs in the file, expected "
                        f"{1 + len(roles)} (x, {', '.join(roles)}); the file is inconsistent")
    given = dict(zip(roles, xs[1:]))
    return [xs[0]] + [given.get(r) for r in ("beta", "gamma", "mean", "variance")]


def _batch_norm(xs, p, n):
    return batch_normalization(*_batch_norm_inputs(xs, p, "BatchNormalization"),
                               axes=p["axes"], decay_rate=p["decay_rate"], eps=p["eps"],
                               batch_stat=p["batch_stat"], output_stat=n == 3)


class BatchNormalization(Function):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, per index of ``axes``.

    With ``batch_stat`` the statistics are the batch's (biased variance), and
    the running ``mean``/``variance`` inputs are updated in place during forward
    as nnabla does: ``r = decay * r + (1 - decay) * s``, the variance entering
    with the unbiased factor M / (M - 1).  Without it the running statistics
    normalize, as at inference.  Gradients flow to x, beta and gamma only."""

    nnabla_spec = FunctionSpec("BatchNormalization", "batch_normalization_param",
                               ("axes", "decay_rate", "eps", "batch_stat", "no_scale", "no_bias"),
                               _batch_norm_params, _batch_norm)

    def __init__(self, roles: Sequence[str], axes: Sequence[int], decay_rate: float, eps: float,
                 batch_stat: bool, output_stat: bool):
        self.roles = tuple(roles)  # which of beta, gamma, mean, variance follow x in the inputs
        if "beta" in self.roles:  # backward never reads it
            self.grad_skips_inputs = (1 + self.roles.index("beta"),)
        self.axes = axes
        self.decay_rate = float(decay_rate)
        self.eps = float(eps)
        self.batch_stat = bool(batch_stat)
        self.output_stat = bool(output_stat)
        if self.batch_stat:  # forward folds the batch statistics into the running ones
            self.updated_inputs = tuple(1 + i for i, role in enumerate(self.roles)
                                        if role in ("mean", "variance"))

    def output_specs(self, inputs):
        x = inputs[0]
        self.axes = axes = kept_axes(self, self.axes, x.ndim)
        self.reduce_axes = tuple(a for a in range(x.ndim) if a not in axes)
        self.stat_shape = tuple(s if a in axes else 1 for a, s in enumerate(x.shape))
        for role, v in zip(self.roles, inputs[1:]):
            if v.shape != self.stat_shape:
                raise self.error(f"{role} must have shape {self.stat_shape} (1 except on axes "
                                 f"{axes}) for an input of shape {x.shape}, got {v.shape}")
            if role in ("mean", "variance") and self.batch_stat and v.parent is not None:
                raise self.error(f"{role} is updated in place with batch_stat=True, so it must be "
                                 "a leaf variable (a parameter), not the output of a function")
        if self.output_stat and not self.batch_stat:
            raise self.error("output_stat=True needs batch_stat=True: there are no batch "
                             "statistics to output otherwise")
        if not self.batch_stat and not {"mean", "variance"} <= set(self.roles):
            raise self.error("batch_stat=False normalizes with the running mean and variance, "
                             "so both must be given, got None", DpnbValueError)
        self.count = x.size // max(1, int(np.prod(self.stat_shape)))
        # With the kept axes next to each other (the usual channel axis), x is seen as
        # (before, kept, after) and the statistics are products along its contiguous rows.
        first, stop = axes[0], axes[-1] + 1
        self.rows_shape = None
        if axes == list(range(first, stop)):
            self.rows_shape = tuple(int(np.prod(x.shape[i:j]))
                                    for i, j in ((0, first), (first, stop), (stop, x.ndim)))
        dtype = x.dtype
        outputs = [(x.shape, dtype)]
        if self.output_stat:
            outputs += [(self.stat_shape, dtype), (self.stat_shape, dtype)]
        return outputs

    def _unpack(self, xs) -> dict:
        return dict(zip(self.roles, xs[1:]))

    def _fused(self, xp, *arrays) -> bool:
        """Whether the compiled per-channel kernels run for these arrays."""
        return self.rows_shape is not None and kernels.for_arrays(xp, *arrays)

    def _rows(self, a):
        return a.reshape(self.rows_shape)

    def _sum(self, xp, a):
        """The sum of ``a`` over the reduced axes (shape ``stat_shape``)."""
        if self.rows_shape is None:
            return a.sum(axis=self.reduce_axes, keepdims=True)
        rows = a.reshape(self.rows_shape)
        # A product with ones reduces the contiguous rows faster than sum over strided axes.
        sums = xp.matmul(rows, xp.ones(self.rows_shape[2], a.dtype))
        return sums.sum(axis=0).reshape(self.stat_shape)

    def _dot(self, xp, a, b):
        """The sum of ``a * b`` over the reduced axes, without ``a * b`` as a temporary."""
        if self.rows_shape is None:
            return (a * b).sum(axis=self.reduce_axes, keepdims=True)
        rows_a = a.reshape(self.rows_shape)[:, :, None, :]
        rows_b = b.reshape(self.rows_shape)[:, :, :, None]
        return xp.matmul(rows_a, rows_b).sum(axis=0).reshape(self.stat_shape)

    def _scale(self, params, inv_std):
        """gamma / std: the factor on x - mean."""
        gamma = params.get("gamma")
        return inv_std if gamma is None else gamma * inv_std

    def forward_arrays(self, xp, xs):
        x, params = xs[0], self._unpack(xs)
        beta = params.get("beta")
        if self.batch_stat:
            mean, y, var = self._batch_statistics(xp, x)
            self._update_running(mean, var)
        else:
            mean, var = params["mean"], params["variance"]
        inv_std = 1 / xp.sqrt(var + self.eps)
        scale = self._scale(params, inv_std)
        if self._fused(xp, x):
            y = kernels.normalize(self._rows(x), mean, scale, beta).reshape(x.shape)
        else:
            if self.batch_stat:
                y *= scale
            else:
                # One pass fewer: x * scale + (beta - mean * scale).
                y = x * scale
                beta = -mean * scale if beta is None else beta - mean * scale
            if beta is not None:
                y += beta
        # Kept for backward: a copy of the running mean, which a later forward may update.
        self.mean = mean if self.batch_stat else mean.copy()
        self.inv_std = inv_std
        if self.output_stat:
            return y, mean, var
        return (y,)

    def _batch_statistics(self, xp, x):
        """The batch mean, ``x - mean`` (None where the compiled kernels normalize x
        itself) and the biased batch variance."""
        mean = self._sum(xp, x) / self.count
        if self._fused(xp, x):
            squares = kernels.square_deviation_sums(self._rows(x), mean) / self.count
            return mean, None, squares.astype(x.dtype).reshape(self.stat_shape)
        centred = x - mean
        return mean, centred, self._dot(xp, centred, centred) / self.count

    def _batch_grad_sums(self, xp, sums: list) -> list:
        """The per-channel sums over the batch that the input gradient needs
        (of gy and of gy * xhat); here the local batch is the whole batch."""
        return sums

    def _update_running(self, mean, var) -> None:
        """Fold the batch statistics into the running ones (a no-op where those are None)."""
        unbiased = self.count / max(self.count - 1, 1)
        running = dict(zip(self.roles, self.inputs[1:]))
        for role, batch_value in (("mean", mean), ("variance", var * unbiased)):
            if role in running:
                r = running[role]
                r.d = self.decay_rate * r.d + (1 - self.decay_rate) * batch_value

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        x, params = xs[0], self._unpack(xs)
        gy = gys[0]
        need = dict(zip(self.roles, need_grads[1:]))
        batch_terms = self.batch_stat and need_grads[0]
        grads = dict.fromkeys(_ROLES)
        fused = self._fused(xp, x, gy)
        if fused:
            if need.get("beta") or need.get("gamma") or batch_terms:  # float64 sums
                sums = kernels.grad_sums(self._rows(gy), self._rows(x), self.mean)
                grads["beta"], grads["gamma"] = (s.reshape(self.stat_shape) for s in sums)
                grads["gamma"] *= self.inv_std
        else:
            if need.get("beta") or batch_terms:
                grads["beta"] = self._sum(xp, gy)
            if need.get("gamma") or batch_terms:
                centred = xp.subtract(x, self.mean, out=workspace(xp, x.shape, x.dtype))
                grads["gamma"] = self._dot(xp, gy, centred) * self.inv_std
        gx = None
        if need_grads[0]:
            scale = self._scale(params, self.inv_std)
            if not self.batch_stat:
                gx = gy * scale
            else:
                # Through the batch mean and variance (and the stat outputs, if any):
                # gx += coef * (x - mean) + shift.
                sum_gy, sum_gy_xhat = self._batch_grad_sums(xp, [grads["beta"], grads["gamma"]])
                stat_grads = gys[1:]
                coef = -scale * self.inv_std * sum_gy_xhat / self.count
                shift = -scale * sum_gy / self.count
                if self.output_stat:
                    coef += 2 * stat_grads[1] / self.count
                    shift += stat_grads[0] / self.count
                if fused:
                    gx = kernels.input_grad(self._rows(gy), scale, self._rows(x), self.mean,
                                            coef, shift).reshape(x.shape)
                else:
                    gx = gy * scale
                    centred *= coef
                    gx += centred
                    gx += shift
        return (gx,) + tuple(None if grads[role] is None or not need[role]
                             else grads[role].astype(x.dtype, copy=False) for role in self.roles)

    def composite(self, F, xs):
        """What it computes, as a graph of functions (its graph backward differentiates it)."""
        x, params = xs[0], self._unpack(xs)
        if self.batch_stat:
            mean = F.mean(x, self.reduce_axes, keepdims=True)
            centred = x - mean
            variance = F.mean(centred ** 2, self.reduce_axes, keepdims=True)
        else:
            mean, variance = params["mean"], params["variance"]
            centred = x - mean
        y = centred * (variance + self.eps) ** -0.5
        if "gamma" in params:
            y = y * params["gamma"]
        if "beta" in params:
            y = y + params["beta"]
        return [y, mean, variance] if self.output_stat else [y]

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its composite differentiated; the running statistics get none, as in backward."""
        need = [need and role not in ("mean", "variance")
                for need, role in zip(need_grads, ("x", *self.roles))]
        return composite_backward_graph(self, F, xs, ys, gys, need)


def _fused_batch_norm_params(fn) -> Params:
    params = _batch_norm_params(fn)
    if params["no_scale"] or params["no_bias"]:
        raise DpnbError(f"{fn.name} without beta or gamma cannot be written in nnabla's format, "
                        "whose FusedBatchNormalization always has both; pass both parameters")
    return {"axes": params["axes"], "decay_rate": params["decay_rate"], "eps": params["eps"],
            "batch_stat": params["batch_stat"], "nonlinearity": fn.nonlinearity}


def _fused_batch_norm(xs, p, n):
    x, beta, gamma, mean, variance, *z = xs
    return fused_batch_normalization(x, beta, gamma, mean, variance, z[0] if z else None,
                                     axes=p["axes"], decay_rate=p["decay_rate"], eps=p["eps"],
                                     batch_stat=p["batch_stat"],
                                     nonlinearity=p["nonlinearity"], output_stat=n == 3)


class FusedBatchNormalization(BatchNormalization):
    """relu(batch_normalization(x) + z) as one function, as nnabla's: the residual ``z``
    (x's shape) is the last input where given; backward passes the gradient where the
    output is positive, to z and through the normalization."""

    nnabla_spec = FunctionSpec("FusedBatchNormalization", "fused_batch_normalization_param",
                               ("axes", "decay_rate", "eps", "batch_stat", "nonlinearity"),
                               _fused_batch_norm_params, _fused_batch_norm)

    grad_depends_on_outputs = True  # the relu's mask

    def __init__(self, roles: Sequence[str], axes: Sequence[int], decay_rate: float, eps: float,
                 batch_stat: bool, output_stat: bool, with_z: bool):
        super().__init__(roles, axes, decay_rate, eps, batch_stat, output_stat)
        self.with_z = bool(with_z)
        self.nonlinearity = "relu"

    def output_specs(self, inputs):
        x = inputs[0]
        if self.with_z and inputs[-1].shape != x.shape:
            raise self.error(f"z must have x's shape {x.shape} (the residual added before the "
                             f"relu), got {inputs[-1].shape}")
        return super().output_specs(inputs[:len(inputs) - self.with_z])

    def forward_arrays(self, xp, xs):
        out = super().forward_arrays(xp, xs[:len(xs) - self.with_z])
        y = out[0] + xs[-1] if self.with_z else out[0]
        return (xp.maximum(y, 0, out=y), *out[1:])

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        n = len(xs) - self.with_z
        gy = gys[0] * (ys[0] > 0)
        grads = super().backward_arrays(xp, xs[:n], ys, [gy, *gys[1:]], need_grads[:n])
        return (*grads, gy if need_grads[-1] else None) if self.with_z else grads

    def composite(self, F, xs):
        """What it computes, as a graph of functions (its graph backward differentiates it)."""
        out = super().composite(F, xs[:len(xs) - self.with_z])
        y = out[0] + xs[-1] if self.with_z else out[0]
        return [F.relu(y), *out[1:]]

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its composite differentiated; the running statistics get none, as in backward."""
        roles = ("x", *self.roles, *(("z",) if self.with_z else ()))
        need = [need and role not in ("mean", "variance")
                for need, role in zip(need_grads, roles)]
        return composite_backward_graph(self, F, xs, ys, gys, need)


# What sync BN asks of its communicator.  Functions sit below communicators in the
# layers, so the communicator is recognised by these calls, not by its class.
_COMMUNICATOR_CALLS = ("all_reduce", "find_group", "list_groups")


def _sync_batch_norm_params(fn) -> Params:
    params = _batch_norm_params(fn)
    if params["no_scale"] or params["no_bias"]:
        raise DpnbError(f"{fn.name} without beta or gamma cannot be written in nnabla's format, "
                        "whose SyncBatchNormalization always has both; pass both parameters")
    return {"comm": {}, "group": fn.group, "axes": params["axes"],
            "decay_rate": params["decay_rate"], "eps": params["eps"],
            "batch_stat": params["batch_stat"]}


def _sync_batch_norm(xs, p, n):
    """Read back as plain batch normalization where it uses the running statistics (the
    same computation, nothing exchanged): a file cannot hold the communicator that batch
    statistics need."""
    if p["batch_stat"]:
        raise DpnbError("SyncBatchNormalization with batch_stat=True needs a communicator, which "
                        "a network file cannot hold; load the network for inference "
                        "(batch_stat=False) or build it in code with F.sync_batch_normalization")
    return batch_normalization(*xs, axes=p["axes"], decay_rate=p["decay_rate"], eps=p["eps"],
                               batch_stat=False, output_stat=n == 3)


class SyncBatchNormalization(BatchNormalization):
    """Batch normalization over the union of the batches of all ranks in a
    communicator group, as if one process held the whole batch: forward
    all-reduces the per-channel sums and counts (so batch sizes may differ
    between ranks) and then the centred sums of squares; backward all-reduces
    the per-channel gradient sums that the input gradient needs (the gradients of
    the batch mean and variance outputs are not summed: those outputs are the
    group's, with the same gradient on every rank, as in nnabla).  Every rank of
    the group must run forward and backward together.  The gradients of beta
    and gamma stay this rank's share, summed over ranks with the other
    parameter gradients as usual.  The statistics travel in float64: exact
    counts beside the sums, and no float32 round-off in the sum over ranks."""

    nnabla_spec = FunctionSpec("SyncBatchNormalization", "sync_batch_normalization_param",
                               ("comm", "group", "axes", "decay_rate", "eps", "batch_stat"),
                               _sync_batch_norm_params, _sync_batch_norm)

    def __init__(self, roles: Sequence[str], comm, group: str, axes: Sequence[int],
                 decay_rate: float, eps: float, batch_stat: bool, output_stat: bool):
        super().__init__(roles, axes, decay_rate, eps, batch_stat, output_stat)
        self.comm = comm
        self.group = group
        self._buffers: dict[str, object] = {}  # float64 exchange buffers, kept between steps

    def _buffer(self, xp, name: str, size: int):
        """The float64 buffer ``name`` of ``size`` elements, the same array every step,
        so that the communicator reuses its plan for it instead of making one per call."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size != size or not isinstance(buffer, xp.ndarray):
            buffer = self._buffers[name] = xp.empty(size, np.float64)
        return buffer

    def output_specs(self, inputs):
        if not all(callable(getattr(self.comm, name, None)) for name in _COMMUNICATOR_CALLS):
            raise self.error("comm must be a communicator (C.MultiProcessCommunicator(ctx), then "
                             f"comm.init()), got {type(self.comm).__name__}")
        ranks = self.comm.find_group(self.group)
        if not ranks:
            raise self.error(f"no group named {self.group!r}; known groups: "
                             f"{sorted(self.comm.list_groups())} (create one with "
                             "comm.new_group((name, ranks)))")
        if self.comm.rank not in ranks:
            raise self.error(f"this process (rank {self.comm.rank}) is not a member of group "
                             f"{self.group!r} (ranks {ranks}); call it only on the group's members")
        outputs = super().output_specs(inputs)
        self.local_count = self.count  # ``count`` becomes the group's total in forward
        return outputs

    def _sum(self, xp, a):
        """The sum over the reduced axes, accumulated in float64 (float64 result): one
        compiled pass where the kernels serve ``a``, 4x faster than NumPy's einsum."""
        if self.rows_shape is None:
            return a.sum(axis=self.reduce_axes, keepdims=True, dtype=np.float64)
        if self._fused(xp, a):
            return kernels.channel_sums(self._rows(a)).reshape(self.stat_shape)
        rows = a.reshape(self.rows_shape)
        return xp.einsum("ijk->j", rows, dtype=np.float64).reshape(self.stat_shape)

    def _dot(self, xp, a, b):
        """The sum of ``a * b`` over the reduced axes, accumulated in float64: the group's
        sums over many ranks' batches agree whatever the layout (channels first or last),
        to float64 round-off instead of float32's (float64 result)."""
        if self.rows_shape is None:
            return (a * b).sum(axis=self.reduce_axes, keepdims=True, dtype=np.float64)
        rows_a, rows_b = a.reshape(self.rows_shape), b.reshape(self.rows_shape)
        return xp.einsum("ijk,ijk->j", rows_a, rows_b, dtype=np.float64).reshape(self.stat_shape)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        """Batch normalization's gradients, in x's dtype (the sums are float64)."""
        grads = super().backward_arrays(xp, xs, ys, gys, need_grads)
        return tuple(g if g is None else g.astype(xs[0].dtype, copy=False) for g in grads)

    def _batch_statistics(self, xp, x):
        channels = int(np.prod(self.stat_shape))
        stats = self._buffer(xp, "stats", channels + 1)
        stats[:-1] = self._sum(xp, x).ravel()
        stats[-1] = self.local_count
        self.comm.all_reduce(stats, group=self.group)
        self.count = int(stats[-1])
        mean = (stats[:-1] / self.count).astype(x.dtype).reshape(self.stat_shape)
        squares = self._buffer(xp, "squares", channels)
        if self._fused(xp, x):  # float64 sums too
            centred = None
            squares[...] = kernels.square_deviation_sums(self._rows(x), mean)
        else:
            centred = x - mean
            squares[...] = self._dot(xp, centred, centred).ravel()
        self.comm.all_reduce(squares, group=self.group)
        return mean, centred, (squares / self.count).astype(x.dtype).reshape(self.stat_shape)

    def _batch_grad_sums(self, xp, sums: list) -> list:
        packed = self._buffer(xp, "grad sums", sum(int(s.size) for s in sums))
        xp.concatenate([s.ravel() for s in sums], out=packed, casting="same_kind")
        self.comm.all_reduce(packed, group=self.group)
        return [part.reshape(self.stat_shape).astype(s.dtype)
                for part, s in zip(xp.split(packed, len(sums)), sums)]


def _apply(cls: type, x: Variable, params: Sequence[Variable | None], *args,
           after: Sequence[Variable] = ()):
    """Add ``cls(roles, *args)`` to the graph, with x, those of beta, gamma, mean and
    variance (``params``) that are not None, and the inputs ``after`` them."""
    given = [(role, v) for role, v in zip(_ROLES, params) if v is not None]
    return cls([role for role, _ in given], *args)(x, *(v for _, v in given), *after)


def _output_count(owner: str, n_outputs: int | None, output_stat: bool) -> None:
    """nnabla's ``n_outputs`` of the batch normalizations: None, or the count that
    ``output_stat`` implies (3 with the batch statistics, else 1)."""
    implied = 3 if output_stat else 1
    if n_outputs is not None and n_outputs != implied:
        raise argument_error(owner, f"n_outputs={n_outputs!r} disagrees with output_stat="
                                    f"{output_stat} ({implied} output(s)); leave n_outputs None")


class BatchNormalizationInOutAdapter:
    """nnabla's adapter for normalizing over several kept axes with a one-axis function: it
    moves the reduced axes first and flattens the kept ones into one last axis
    (``__call__``), and restores the layout of a result (``inv``).  Each instance serves
    inputs of one shape: the first call fixes it."""

    def __init__(self, ndim: int, axes: Sequence[int]):
        axes = [int(a) for a in axes]
        if len(axes) == 1 or any(not 0 <= a < ndim for a in axes) or len(set(axes)) < len(axes):
            raise DpnbValueError(
                f"BatchNormalizationInOutAdapter: axes must be distinct axes of an array of "
                f"{ndim} dimensions, and not one alone (one kept axis needs no adapter), got "
                f"{axes}")
        self.ndim, self.axes = ndim, axes
        self.outer_axes = sorted(set(range(ndim)) - set(axes))
        self.transpose_axes = self.outer_axes + sorted(axes)
        self.inv_transpose_axes = np.argsort(self.transpose_axes).tolist()
        self.transposed_shape: tuple[int, ...] | None = None

    def __call__(self, x: Variable) -> Variable:
        """``x`` as (reduced axes..., product of the kept axes)."""
        transposed = transpose(x, self.transpose_axes)
        if self.transposed_shape not in (None, transposed.shape):
            raise DpnbValueError(
                f"BatchNormalizationInOutAdapter: it adapts inputs whose transposed shape is "
                f"{self.transposed_shape}, got {transposed.shape}; make one adapter per shape")
        self.transposed_shape = transposed.shape
        outer = len(self.outer_axes)
        return reshape(transposed, [*transposed.shape[:outer],
                                    int(np.prod(transposed.shape[outer:], dtype=np.int64))])

    def inv(self, y: Variable) -> Variable:
        """A result of the adapted shape back in the layout of the input."""
        if self.transposed_shape is None:
            raise DpnbValueError("BatchNormalizationInOutAdapter.inv: call the adapter on an "
                                 "input first; its shape is what inv restores")
        return transpose(reshape(y, self.transposed_shape), self.inv_transpose_axes)


def batch_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                        mean: Variable | None, variance: Variable | None,
                        axes: Sequence[int] = (1,), decay_rate: float = 0.9, eps: float = 1e-05,
                        batch_stat: bool = True, output_stat: bool = False,
                        n_outputs: int | None = None
                        ) -> Variable | tuple[Variable, Variable, Variable]:
    """Batch normalization over all axes but ``axes``; beta/gamma/mean/variance have
    size 1 except on ``axes``.  None drops beta (no bias) or gamma (no scale), and,
    with batch_stat=True, the running mean/variance update.  With ``output_stat``
    returns (y, batch_mean, batch_var)."""
    _output_count("F.batch_normalization", n_outputs, output_stat)
    return _apply(BatchNormalization, x, (beta, gamma, mean, variance), axes,
                  decay_rate, eps, batch_stat, output_stat)


def fused_batch_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                              mean: Variable | None, variance: Variable | None,
                              z: Variable | None = None, axes: Sequence[int] = (1,),
                              decay_rate: float = 0.9, eps: float = 1e-05,
                              batch_stat: bool = True, nonlinearity: str = "relu",
                              output_stat: bool = False,
                              n_outputs: int | None = None
                              ) -> Variable | tuple[Variable, Variable, Variable]:
    """relu(batch_normalization(x, ...) + z): batch normalization, the residual ``z``
    (x's shape; None: none) added, then ``nonlinearity`` ("relu", the only one nnabla
    has).  With ``output_stat`` returns (y, batch_mean, batch_var)."""
    _output_count("F.fused_batch_normalization", n_outputs, output_stat)
    owner = "F.fused_batch_normalization"
    if nonlinearity != "relu":
        raise argument_error(owner, f'nonlinearity must be "relu" (the only one nnabla '
                                    f"supports), got {nonlinearity!r}; apply another one after "
                                    "F.batch_normalization")
    if z is not None and (not isinstance(z, Variable) or z.shape != x.shape):
        got = z.shape if isinstance(z, Variable) else type(z).__name__
        raise argument_error(owner, f"z must be an nn.Variable of x's shape {x.shape} (the "
                                    f"residual added before the relu), got {got}")
    return _apply(FusedBatchNormalization, x, (beta, gamma, mean, variance), axes, decay_rate,
                  eps, batch_stat, output_stat, z is not None, after=() if z is None else (z,))


def sync_batch_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                             mean: Variable | None, variance: Variable | None,
                             comm, group: str = "world",
                             axes: Sequence[int] = (1,), decay_rate: float = 0.9,
                             eps: float = 1e-05, batch_stat: bool = True, output_stat: bool = False,
                             n_outputs: int | None = None
                             ) -> Variable | tuple[Variable, Variable, Variable]:
    """Batch normalization whose batch statistics are those of the whole batch spread
    over the ranks of ``group`` of the communicator ``comm`` (running statistics and
    gradients included); otherwise as ``batch_normalization``.  Every rank of the
    group must call forward and backward; with batch_stat=False nothing is sent."""
    _output_count("F.sync_batch_normalization", n_outputs, output_stat)
    return _apply(SyncBatchNormalization, x, (beta, gamma, mean, variance), comm, group,
                  axes, decay_rate, eps, batch_stat, output_stat)


class Standardization(Function):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, with the biased mean and variance
    of x seen as ``view`` (a reshape of x) taken over all axes of the view except
    ``stat_axes``.  beta and gamma (either may be absent) have the shape a subclass's
    ``param_shape`` gives and broadcast over x; with ``output_stat`` the mean and
    variance (shape: the view's, 1 off ``stat_axes``) are outputs too, differentiable."""

    no_nnabla_spec = ("the shared base of the standardizations; each of its subclasses is "
                      "written as its own nnabla type")

    def __init__(self, roles: Sequence[str], eps: float, output_stat: bool):
        self.roles = tuple(roles)  # which of beta, gamma follow x in the inputs
        self.eps = float(eps)
        self.output_stat = bool(output_stat)

    def geometry(self, shape: tuple[int, ...]) -> tuple[tuple, list[int]]:
        """The view of x and the axes of the view the statistics keep."""
        raise NotImplementedError

    def param_shape(self, shape: tuple[int, ...], role: str, given: tuple[int, ...]) -> tuple:
        """The shape ``role`` must have for an input of ``shape`` (given: its shape)."""
        raise NotImplementedError

    def output_specs(self, inputs):
        x = inputs[0]
        if not np.issubdtype(x.dtype, np.floating):
            raise self.error(f"x must be a float array, got dtype {x.dtype}")
        self.view, stat_axes = self.geometry(x.shape)
        self.reduce_axes = tuple(a for a in range(len(self.view)) if a not in stat_axes)
        self.stat_shape = tuple(s if a in stat_axes else 1 for a, s in enumerate(self.view))
        self.count = max(1, int(np.prod([self.view[a] for a in self.reduce_axes])))
        self.shapes = {}
        for role, v in zip(self.roles, inputs[1:]):
            wanted = self.param_shape(x.shape, role, v.shape)
            if v.shape != wanted:
                raise self.error(f"{role} must have shape {wanted} for an input of shape "
                                 f"{x.shape}, got {v.shape}")
            self.shapes[role] = v.shape
        outputs = [(x.shape, x.dtype)]
        if self.output_stat:
            outputs += [(self.stat_shape, x.dtype)] * 2
        return outputs

    def forward_arrays(self, xp, xs):
        x, params = xs[0], dict(zip(self.roles, xs[1:]))
        xv = x.reshape(self.view)
        mean = xv.mean(axis=self.reduce_axes, keepdims=True)
        centred = xv - mean
        var = (centred * centred).mean(axis=self.reduce_axes, keepdims=True)
        self.mean = mean
        self.inv_std = 1 / xp.sqrt(var + self.eps)
        y = (centred * self.inv_std).reshape(x.shape)
        if "gamma" in params:
            y *= params["gamma"]
        if "beta" in params:
            y += params["beta"]
        # The mean handed out is a copy: backward needs this one intact.
        return (y, mean.copy(), var) if self.output_stat else (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        x, params = xs[0], dict(zip(self.roles, xs[1:]))
        gy = gys[0]
        xhat = (x.reshape(self.view) - self.mean) * self.inv_std  # in the view's shape
        need = dict(zip(self.roles, need_grads[1:]))
        grads = {}
        if need.get("beta"):
            grads["beta"] = sum_to(gy, self.shapes["beta"])
        if need.get("gamma"):
            grads["gamma"] = sum_to(gy * xhat.reshape(x.shape), self.shapes["gamma"])
        gx = None
        if need_grads[0]:
            g = gy * params["gamma"] if "gamma" in params else gy
            g = g.reshape(self.view)
            mean_g = g.mean(axis=self.reduce_axes, keepdims=True)
            mean_gx = (g * xhat).mean(axis=self.reduce_axes, keepdims=True)
            gx = (g - mean_g - xhat * mean_gx) * self.inv_std
            if self.output_stat:
                # Through the mean and variance outputs: d mean/dx = 1/n, d var/dx = 2 (x - mean)/n.
                g_mean, g_var = gys[1], gys[2]
                gx += g_mean / self.count + (2 / self.count) * g_var * xhat / self.inv_std
            gx = gx.reshape(x.shape)
        return (gx,) + tuple(grads.get(role) for role in self.roles)

    def composite(self, F, xs):
        """What it computes, as a graph of functions (its graph backward differentiates it)."""
        x, params = xs[0], dict(zip(self.roles, xs[1:]))
        xv = F.reshape(x, self.view, inplace=False)
        mean = F.mean(xv, self.reduce_axes, keepdims=True)
        centred = xv - mean
        variance = F.mean(centred ** 2, self.reduce_axes, keepdims=True)
        y = F.reshape(centred * (variance + self.eps) ** -0.5, x.shape, inplace=False)
        if "gamma" in params:
            y = y * params["gamma"]
        if "beta" in params:
            y = y + params["beta"]
        return [y, mean, variance] if self.output_stat else [y]

    backward_graph = composite_backward_graph


def _batch_axes(owner: Function, batch_axis: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    """nnabla's ``batch_axis`` (an int or a sequence of them), made non-negative."""
    if batch_axis is None:
        raise owner.error("batch_axis must be an int or a list of ints (the sample axes; [] for "
                          "none), got None")
    return axes_of(owner, batch_axis, ndim, "batch_axis")


def _scale_bias(fn) -> Params:
    """nnabla's no_scale / no_bias: which of gamma and beta the function was not given."""
    return {"no_scale": "gamma" not in fn.roles, "no_bias": "beta" not in fn.roles}


def _axis_list(value) -> list[int]:
    return [int(value)] if isinstance(value, (int, np.integer)) else ints(value)


def _standardization_inputs(xs: list[Variable], p: Params, type_name: str) -> list:
    """x, beta, gamma with None for the ones the file leaves out (nnabla's input order)."""
    roles = [r for r, absent in (("beta", p["no_bias"]), ("gamma", p["no_scale"])) if not absent]
    if len(xs) != 1 + len(roles):
        raise DpnbError(f"{type_name} has {len(xs)} inputs in the file, expected "
                        f"{1 + len(roles)} (x{''.join(', ' + r for r in roles)}); the file is "
                        "inconsistent")
    given = dict(zip(roles, xs[1:]))
    return [xs[0], given.get("beta"), given.get("gamma")]


def _layer_norm(xs, p, n):
    return layer_normalization(*_standardization_inputs(xs, p, "LayerNormalization"),
                               batch_axis=p["batch_axis"], eps=p["eps"], output_stat=n == 3)


class LayerNormalization(Standardization):
    """Standardization of each sample over all its non-batch axes; beta and gamma have
    x's shape with 1 on the batch axes."""

    nnabla_spec = FunctionSpec("LayerNormalization", "layer_normalization_param",
                               ("batch_axis", "eps", "no_scale", "no_bias"),
                               lambda fn: {"batch_axis": _axis_list(fn.batch_axis), "eps": fn.eps,
                                           **_scale_bias(fn)}, _layer_norm)

    def __init__(self, roles: Sequence[str], batch_axis: int | Sequence[int], eps: float,
                 output_stat: bool):
        super().__init__(roles, eps, output_stat)
        self.batch_axis = batch_axis

    def geometry(self, shape):
        self.batch_axes = _batch_axes(self, self.batch_axis, len(shape))
        return shape, list(self.batch_axes)

    def param_shape(self, shape, role, given):
        return tuple(1 if a in self.batch_axes else s for a, s in enumerate(shape))


def _instance_norm(xs, p, n):
    return instance_normalization(*_standardization_inputs(xs, p, "InstanceNormalization"),
                                  channel_axis=p["channel_axis"], batch_axis=p["batch_axis"],
                                  eps=p["eps"], output_stat=n == 3)


class InstanceNormalization(Standardization):
    """Standardization of each (sample, channel) over the remaining axes; beta and gamma
    have the channels on ``channel_axis`` and, on the batch axes, 1 or x's size."""

    nnabla_spec = FunctionSpec("InstanceNormalization", "instance_normalization_param",
                               ("channel_axis", "batch_axis", "eps", "no_scale", "no_bias"),
                               lambda fn: {"channel_axis": int(fn.channel_axis),
                                           "batch_axis": _axis_list(fn.batch_axis), "eps": fn.eps,
                                           **_scale_bias(fn)}, _instance_norm)

    def __init__(self, roles: Sequence[str], channel_axis: int, batch_axis: int | Sequence[int],
                 eps: float, output_stat: bool):
        super().__init__(roles, eps, output_stat)
        self.channel_axis = channel_axis
        self.batch_axis = batch_axis

    def geometry(self, shape):
        self.channel = one_axis(self, self.channel_axis, len(shape), "channel_axis")
        self.batch_axes = _batch_axes(self, self.batch_axis, len(shape))
        if self.channel in self.batch_axes:
            raise self.error(f"channel_axis {self.channel_axis} is also in batch_axis "
                             f"{self.batch_axis!r}; the channel axis must be another axis")
        return shape, [*self.batch_axes, self.channel]

    def param_shape(self, shape, role, given):
        wanted = [1] * len(shape)
        wanted[self.channel] = shape[self.channel]
        for a in self.batch_axes:
            if len(given) == len(shape) and given[a] == shape[a]:
                wanted[a] = shape[a]  # one value per sample is allowed too
        return tuple(wanted)


def _group_norm(xs, p, n):
    return group_normalization(*_standardization_inputs(xs, p, "GroupNormalization"),
                               num_groups=p["num_groups"], channel_axis=p["channel_axis"],
                               batch_axis=p["batch_axis"], eps=p["eps"], output_stat=n == 3)


class GroupNormalization(Standardization):
    """Standardization of each sample's groups of ``channels / num_groups`` consecutive
    channels; beta and gamma are per channel (1 except on ``channel_axis``)."""

    nnabla_spec = FunctionSpec("GroupNormalization", "group_normalization_param",
                               ("num_groups", "channel_axis", "batch_axis", "eps", "no_scale",
                                "no_bias"),
                               lambda fn: {"num_groups": int(fn.num_groups),
                                           "channel_axis": int(fn.channel_axis),
                                           "batch_axis": _axis_list(fn.batch_axis), "eps": fn.eps,
                                           **_scale_bias(fn)}, _group_norm)

    def __init__(self, roles: Sequence[str], num_groups: int, channel_axis: int,
                 batch_axis: int | Sequence[int], eps: float, output_stat: bool):
        super().__init__(roles, eps, output_stat)
        self.num_groups = num_groups
        self.channel_axis = channel_axis
        self.batch_axis = batch_axis

    def geometry(self, shape):
        self.channel = ch = one_axis(self, self.channel_axis, len(shape), "channel_axis")
        batch_axes = _batch_axes(self, self.batch_axis, len(shape))
        if ch in batch_axes:
            raise self.error(f"channel_axis {self.channel_axis} is also in batch_axis "
                             f"{self.batch_axis!r}; the channel axis must be another axis")
        if any(a > ch for a in batch_axes):
            # nnabla 1.39 takes such an axis as one of the view's (the channels within a group).
            raise self.error(f"batch_axis {self.batch_axis!r} must come before channel_axis "
                             f"{self.channel_axis}; move the channel axis last with F.transpose")
        groups, channels = self.num_groups, shape[ch]
        if not isinstance(groups, (int, np.integer)) or groups < 1 or channels % groups:
            raise self.error(f"num_groups must be a positive int dividing the {channels} "
                             f"channels on axis {ch}, got {groups!r}")
        view = shape[:ch] + (int(groups), channels // int(groups)) + shape[ch + 1:]
        return view, [*batch_axes, ch]

    def param_shape(self, shape, role, given):
        return tuple(s if a == self.channel else 1 for a, s in enumerate(shape))


def _tensor_norm(xs, p, n):
    x, beta, gamma = _standardization_inputs(xs, p, "TensorNormalization")
    return tensor_normalization(x, p["axes"], beta, gamma, eps=p["eps"], output_stat=n == 3)


class TensorNormalization(Standardization):
    """Standardization over all axes but ``axes``; beta and gamma have x's shape with 1
    off ``axes`` (batch normalization's statistics, with no running ones)."""

    nnabla_spec = FunctionSpec("TensorNormalization", "tensor_normalization_param",
                               ("axes", "eps", "no_scale", "no_bias"),
                               lambda fn: {"axes": _axis_list(fn.axes), "eps": fn.eps,
                                           **_scale_bias(fn)}, _tensor_norm)

    def __init__(self, roles: Sequence[str], axes: int | Sequence[int], eps: float,
                 output_stat: bool):
        super().__init__(roles, eps, output_stat)
        self.axes = axes

    def geometry(self, shape):
        self.kept = kept_axes(self, self.axes, len(shape))
        return shape, self.kept

    def param_shape(self, shape, role, given):
        return tuple(s if a in self.kept else 1 for a, s in enumerate(shape))


class WeightStandardization(Standardization):
    """Standardization of a weight over all axes but its output-channel axis."""

    nnabla_spec = FunctionSpec("WeightStandardization", "weight_standardization_param",
                               ("channel_axis", "eps"), attrs("channel_axis", "eps"),
                               lambda xs, p, n: weight_standardization(
                                   xs[0], p["channel_axis"], p["eps"], output_stat=n == 3))

    def __init__(self, channel_axis: int, eps: float, output_stat: bool):
        super().__init__((), eps, output_stat)
        self.channel_axis = channel_axis

    def geometry(self, shape):
        return shape, [one_axis(self, self.channel_axis, len(shape), "channel_axis")]


def _standardized(cls: type, x: Variable, beta: Variable | None, gamma: Variable | None,
                  *args) -> Variable | tuple[Variable, Variable, Variable]:
    """Add ``cls(roles, *args)`` to the graph, with x, beta and gamma where not None."""
    given = [(role, v) for role, v in (("beta", beta), ("gamma", gamma)) if v is not None]
    return cls([role for role, _ in given], *args)(x, *(v for _, v in given))


def layer_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                        batch_axis: int | Sequence[int] = 0, eps: float = 1e-05,
                        output_stat: bool = False
                        ) -> Variable | tuple[Variable, Variable, Variable]:
    """Layer normalization: each sample (index of ``batch_axis``) standardized over its
    other axes, then ``* gamma + beta`` (None drops either).  With ``output_stat``
    returns (y, mean, variance), the statistics of shape 1 off the batch axes."""
    return _standardized(LayerNormalization, x, beta, gamma, batch_axis, eps, output_stat)


def instance_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                           channel_axis: int = 1, batch_axis: int | Sequence[int] = 0,
                           eps: float = 1e-05, output_stat: bool = False
                           ) -> Variable | tuple[Variable, Variable, Variable]:
    """Instance normalization: each channel of each sample standardized over the other
    axes, then ``* gamma + beta`` (None drops either).  With ``output_stat`` returns
    (y, mean, variance), the statistics of shape 1 off the batch and channel axes."""
    return _standardized(InstanceNormalization, x, beta, gamma, channel_axis, batch_axis, eps,
                         output_stat)


def group_normalization(x: Variable, beta: Variable | None, gamma: Variable | None,
                        num_groups: int, channel_axis: int = 1,
                        batch_axis: int | Sequence[int] = 0, eps: float = 1e-05,
                        output_stat: bool = False
                        ) -> Variable | tuple[Variable, Variable, Variable]:
    """Group normalization: the channels split into ``num_groups`` groups, each group of
    each sample standardized, then ``* gamma + beta`` per channel.  With ``output_stat``
    returns (y, mean, variance) of shape (..., num_groups, 1, ...): x's shape with the
    channel axis split in (num_groups, channels per group), 1 off the batch and group axes."""
    return _standardized(GroupNormalization, x, beta, gamma, num_groups, channel_axis,
                         batch_axis, eps, output_stat)


def tensor_normalization(x: Variable, axes: int | Sequence[int], beta: Variable | None = None,
                         gamma: Variable | None = None, eps: float = 1e-05,
                         output_stat: bool = False
                         ) -> Variable | tuple[Variable, Variable, Variable]:
    """x standardized over all axes but ``axes`` (which the statistics keep, as batch
    normalization's channels), then ``* gamma + beta``.  With ``output_stat`` returns
    (y, mean, variance)."""
    return _standardized(TensorNormalization, x, beta, gamma, axes, eps, output_stat)


def weight_standardization(w: Variable, channel_axis: int = 0, eps: float = 1e-05,
                           output_stat: bool = False
                           ) -> Variable | tuple[Variable, Variable, Variable]:
    """A weight standardized per output channel (``channel_axis``: 0 for convolution,
    1 for affine).  With ``output_stat`` returns (w_hat, mean, variance)."""
    return WeightStandardization(channel_axis, eps, output_stat)(w)


class NormNormalization(Function):
    """y = x / (sum over ``axes`` of |x|^p + eps)^(1/p)."""

    nnabla_spec = FunctionSpec("NormNormalization", "norm_normalization_param",
                               ("p", "axes", "eps"), attrs("p", "axes", "eps"),
                               call("norm_normalization", "p", "axes", "eps"))

    def __init__(self, p: float | None, axes: int | Sequence[int] | None, eps: float):
        self.p = 2.0 if p is None else p
        self.axis = axes
        self.eps = float(eps)

    def output_specs(self, inputs):
        (x,) = inputs
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float, np.number)) \
                or not self.p >= 1:
            raise self.error(f"p must be a number >= 1 (the order of the norm), got {self.p!r}")
        self.p = float(self.p)
        self.axes = axes_of(self, self.axis, x.ndim)
        return [(x.shape, x.dtype)]

    def _norm(self, xp, x):
        total = (xp.abs(x) ** self.p).sum(axis=self.axes, keepdims=True)
        return (total + self.eps) ** (1 / self.p)

    def forward_arrays(self, xp, xs):
        x = xs[0]
        self.norm = self._norm(xp, x)
        return (x / self.norm,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        x, gy, norm = xs[0], gys[0], self.norm
        # d norm / dx = (|x| / norm)^(p-1) sign(x).
        through_norm = (gy * x).sum(axis=self.axes, keepdims=True) / (norm * norm)
        return (gy / norm - through_norm * (xp.abs(x) / norm) ** (self.p - 1) * xp.sign(x),)

    def composite(self, F, xs):
        """x over its norm, as a graph (its graph backward differentiates it)."""
        return on_variables(lambda xp, x: x / self._norm(xp, x), xs[0])

    backward_graph = composite_backward_graph


def norm_normalization(x: Variable, p: float | None = None,
                       axes: int | Sequence[int] | None = None, eps: float = 1e-12) -> Variable:
    """x divided by its p-norm (None: 2) over ``axes`` (None: all; []: none, so each
    element by its absolute value, as nnabla computes), ``eps`` added before the root."""
    return NormNormalization(p, axes, eps)(x)


class WeightNormalization(Function):
    """w_wn = g * w / sqrt(sum of w^2 over all axes but ``dim`` + eps), g per index of
    ``dim``."""

    nnabla_spec = FunctionSpec("WeightNormalization", "weight_normalization_param", ("dim", "eps"),
                               attrs("dim", "eps"), call("weight_normalization", "dim", "eps"))

    def __init__(self, dim: int, eps: float):
        self.dim = dim
        self.eps = float(eps)

    def output_specs(self, inputs):
        w, g = inputs
        self.axis = one_axis(self, self.dim, w.ndim, "dim")
        if g.shape != (w.shape[self.axis],):
            raise self.error(f"g must have shape ({w.shape[self.axis]},) (one scale per index "
                             f"of axis {self.axis} of w, shape {w.shape}), got {g.shape}")
        self.others = tuple(a for a in range(w.ndim) if a != self.axis)
        self.g_shape = tuple(s if a == self.axis else 1 for a, s in enumerate(w.shape))
        return [(w.shape, w.dtype)]

    def forward_arrays(self, xp, xs):
        w, g = xs
        self.inv_norm = 1 / xp.sqrt((w * w).sum(axis=self.others, keepdims=True) + self.eps)
        return (w * (g.reshape(self.g_shape) * self.inv_norm),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        w, g = xs
        gy, inv_norm = gys[0], self.inv_norm
        dot = (gy * w).sum(axis=self.others, keepdims=True)
        gw = gg = None
        if need_grads[0]:
            gw = (g.reshape(self.g_shape) * inv_norm) * (gy - w * (dot * inv_norm * inv_norm))
        if need_grads[1]:
            gg = (dot * inv_norm).reshape(g.shape)
        return gw, gg

    def composite(self, F, xs):
        """w scaled by g over its norm, as a graph (its graph backward differentiates it)."""
        def compute(xp, w, g):
            norm = xp.sqrt((w * w).sum(axis=self.others, keepdims=True) + self.eps)
            return w * (g.reshape(self.g_shape) / norm)
        return on_variables(compute, *xs)

    backward_graph = composite_backward_graph


def weight_normalization(w: Variable, g: Variable, dim: int = 0, eps: float = 1e-12,
n_outputs: int = -1, outputs=None) -> Variable:
    """Weight normalization: ``w`` scaled to unit L2 norm over all axes but ``dim``, then
    by ``g`` (one scale per index of ``dim``)."""
    default_outputs("F.weight_normalization", n_outputs, outputs)
    return WeightNormalization(dim, eps)(w, g)


class MeanSubtraction(Function):
    """y = x - mean, with ``mean`` (of shape x.shape[base_axis:]) the running average of
    the batch means: with ``update_running_mean`` forward first counts the batch in ``t``
    and moves ``mean += (batch mean - mean) / t``.  As nnabla's, backward is approximate:
    it scales gy by 1 - 1 / (t * batch size), the diagonal of the exact Jacobian."""

    nnabla_spec = FunctionSpec("MeanSubtraction", "mean_subtraction_param",
                               ("base_axis", "update_running_mean"),
                               attrs("base_axis", update_running_mean="update"),
                               call("mean_subtraction", "base_axis", "update_running_mean"))

    def __init__(self, base_axis: int, update_running_mean: bool):
        self.base_axis = base_axis
        self.update = bool(update_running_mean)
        self.updated_inputs = (1, 2) if self.update else ()  # the running mean and count

    def output_specs(self, inputs):
        x, mean, t = inputs
        self.axis = base_axis_of(self, self.base_axis, x.ndim)
        if mean.shape != x.shape[self.axis:]:
            raise self.error(f"mean must have shape {x.shape[self.axis:]} (x's shape from "
                             f"base_axis {self.axis}), got {mean.shape}")
        if t.size != 1:
            raise self.error(f"t (the count of batches seen) must have one element, got shape "
                             f"{t.shape}")
        if self.update and (mean.parent is not None or t.parent is not None):
            raise self.error("mean and t are updated in place with update_running_mean=True, so "
                             "they must be leaf variables (parameters), not outputs of functions")
        self.batch = int(np.prod(x.shape[:self.axis]))
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x, mean, t = xs
        if self.update:
            running, count = self.inputs[1], self.inputs[2]
            count.d = t + 1
            batch_mean = x.reshape((self.batch,) + mean.shape).mean(axis=0)
            running.d = mean + (batch_mean - mean) / count.d
            mean = running.d
            self.scale = 1 - 1 / (count.d.reshape(()) * self.batch)
        return (x - mean,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        gx = gys[0] * self.scale if self.update else gys[0]
        return (gx if need_grads[0] else None, None, None)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """backward's scaled gradient, the scale from the count ``t`` as the forward before
        the graph runs left it (read then, not now)."""
        if not need_grads[0]:
            return [None, None, None]
        if not self.update:
            return [gys[0], None, None]

        def scaled(xp, gy, t):
            return gy * (1 - 1 / (t.reshape(()) * self.batch))
        return [on_variables(scaled, gys[0], xs[2]), None, None]


def mean_subtraction(x: Variable, mean: Variable, t: Variable, base_axis: int = 1,
                     update_running_mean: bool = True) -> Variable:
    """x minus the running mean of the samples (axes before ``base_axis``), which forward
    updates (``mean``, and the batch count ``t``) unless ``update_running_mean`` is False."""
    return MeanSubtraction(base_axis, update_running_mean)(x, mean, t)


class SpectralNorm(Function):
    """W / sigma(W), sigma the largest singular value of W seen as a matrix (rows: the
    indices of axis ``dim``), estimated by ``itr`` steps of the power iteration from the
    left singular vector ``u``, which forward updates in place unless ``test`` (so it
    must be a leaf: a function's output would be recomputed from its source, losing the
    update, which nnabla does silently).  As in nnabla, backward holds the singular
    vectors constant: d sigma / dW = u v^T."""

    nnabla_spec = FunctionSpec("SpectralNorm", "spectral_norm_param",
                               ("dim", "itr", "eps", "test", "output_u"),
                               attrs("dim", "itr", "eps", "test", "output_u"),
                               call("spectral_norm", "dim", "itr", "eps", "test", "output_u"))

    def __init__(self, dim: int, itr: int, eps: float, test: bool, output_u: bool):
        self.dim = dim
        self.itr = itr
        self.eps = float(eps)
        self.test = bool(test)
        self.output_u = bool(output_u)
        self.updated_inputs = () if self.test else (1,)  # u

    def output_specs(self, inputs):
        w, u = inputs
        if isinstance(self.dim, bool) or not isinstance(self.dim, (int, np.integer)) \
                or not 0 <= self.dim < w.ndim:
            raise self.error(f"dim must be an int in [0, {w.ndim}) (nnabla takes no negative "
                             f"dim) for a weight of shape {w.shape}, got {self.dim!r}")
        self.axis = int(self.dim)
        rows = w.shape[self.axis]
        if u.shape != (rows,):
            raise self.error(f"u must have shape ({rows},) (w's size on axis {self.axis}), "
                             f"got {u.shape}")
        if isinstance(self.itr, bool) or not isinstance(self.itr, (int, np.integer)) \
                or self.itr < 1:
            raise self.error(f"itr (power iterations) must be an int >= 1, got {self.itr!r}")
        if not self.eps > 0:
            raise self.error(f"eps must be > 0, got {self.eps!r}")
        if not self.test and u.parent is not None:
            raise self.error("u is updated in place with test=False, so it must be a leaf "
                             "variable (a parameter), not the output of a function")
        self.moved_shape = (rows,) + tuple(s for a, s in enumerate(w.shape) if a != self.axis)
        outputs = [(w.shape, w.dtype)]
        if self.output_u:
            outputs.append((u.shape, u.dtype))
        return outputs

    def _normalized(self, xp, a):
        return a / xp.sqrt((a * a).sum() + self.eps)

    def _singular(self, xp, w, u):
        """The singular vectors u, v and value sigma of ``w`` that ``itr`` steps of the
        power iteration from ``u`` reach (on arrays, or on variables for the graph)."""
        matrix = xp.moveaxis(w, self.axis, 0).reshape(self.moved_shape[0], -1)
        for _ in range(int(self.itr)):
            v = self._normalized(xp, matrix.T @ u)
            u = self._normalized(xp, matrix @ v)
        return u, v, u @ (matrix @ v)

    def _gradient(self, xp, w, gy, u, v, sigma):
        """dL/dW = gy / sigma - <gy, W> / sigma^2 u v^T, the singular vectors held constant."""
        outer = xp.moveaxis((u[:, None] * v[None, :]).reshape(self.moved_shape), 0, self.axis)
        return gy / sigma - ((gy * w).sum() / (sigma * sigma)) * outer

    def forward_arrays(self, xp, xs):
        w, u0 = xs
        self.u, self.v, self.sigma = self._singular(xp, w, u0.astype(w.dtype))
        self.u_start = u0.copy()  # kept for the graph backward (SpectralNormStart)
        if not self.test:
            self.inputs[1].d = self.u
        y = w / self.sigma
        return (y, self.u_start.copy()) if self.output_u else (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (self._gradient(xp, xs[0], gys[0], self.u, self.v, self.sigma), None)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """backward's gradient with the power iteration in the graph, from the u forward
        started from: so its derivative follows the singular vectors as W moves, as the
        derivative of backward's result does."""
        def gradient(xp, w, gy, u_start):
            return self._gradient(xp, w, gy, *self._singular(xp, w, u_start))
        return [on_variables(gradient, xs[0], gys[0], SpectralNormStart(self)(ys[0])), None]


class SpectralNormStart(Function):
    """The u that the latest forward of ``of`` (a SpectralNorm) started its power iteration
    from, before updating it in place: the start of the graph backward's iteration.  Its
    input, of's output, only orders it after that forward."""

    no_nnabla_spec = "the start of spectral_norm's power iteration, made by its graph backward"
    differentiable = False
    grad_depends_on_inputs = False

    def __init__(self, of: SpectralNorm):
        self.of = of

    def output_specs(self, inputs):
        u = self.of.inputs[1]
        return [(u.shape, u.dtype)]

    def forward_arrays(self, xp, xs):
        return (self.of.u_start.copy(),)


def spectral_norm(w: Variable, u: Variable, dim: int = 0, itr: int = 1, eps: float = 1e-12,
                  test: bool = False, output_u: bool = False
                  ) -> Variable | tuple[Variable, Variable]:
    """Spectral normalization: ``w`` divided by its largest singular value, estimated by
    ``itr`` power-iteration steps from ``u`` (updated in place unless ``test``).  With
    ``output_u`` also returns u as it was before this forward."""
    return SpectralNorm(dim, itr, eps, test, output_u)(w, u)
