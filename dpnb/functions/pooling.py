"""Pooling over the trailing (spatial) axes: max, average, sum, global average, the
gradient of max pooling as a function, and the resamplings (unpooling, interpolation,
ONNX's Resize)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable
from .base import argument_error, default_outputs, int_tuple, shape_of
from .graph_module import linear_backward_graph
from .specs import FunctionSpec, Params, attrs, call, ints, without_params

__all__ = ["max_pooling", "average_pooling", "sum_pooling", "unpooling", "global_average_pooling",
           "interpolate", "max_pooling_backward", "onnx_resize"]


def _channel_first_shape(shape: tuple[int, ...], n: int) -> tuple[int, ...]:
    """(..., *spatial, C) as (..., C, *spatial) for ``n`` spatial axes."""
    return shape[:-n - 1] + shape[-1:] + shape[-n - 1:-1]


def _channel_last_shape(shape: tuple[int, ...], n: int) -> tuple[int, ...]:
    """(..., C, *spatial) as (..., *spatial, C) for ``n`` spatial axes."""
    return shape[:-n - 1] + shape[-n:] + shape[-n - 1:-n]


def _to_first(xp, a, n: int, channel_last: bool):
    """``a`` with its channel axis moved before its ``n`` spatial axes (where it is last)."""
    return xp.moveaxis(a, -1, -n - 1) if channel_last else a


def _from_first(xp, a, n: int, channel_last: bool):
    """A channel-first array back to channel-last (where the caller's layout is)."""
    return xp.ascontiguousarray(xp.moveaxis(a, -n - 1, -1)) if channel_last else a


class _Windows:
    """Pooling geometry of the last ``len(kernel)`` axes (those before the channel axis with
    ``channel_last``), following nnabla: an output has
    ``(w + p - (k - p if ignore_border else 1)) // s + 1`` entries along an axis of size
    ``w``; window ``o`` starts at ``o * s - p``.  The windows are worked on channel-first."""

    def __init__(self, fn: Function, shape: tuple[int, ...], kernel, stride, ignore_border: bool,
                 pad, channel_last: bool):
        self.kernel = int_tuple(fn, "kernel", kernel, None, 1, 1)
        n = len(self.kernel)
        self.stride = self.kernel if stride is None else int_tuple(fn, "stride", stride, n, 1, 1)
        self.pad = int_tuple(fn, "pad", pad, n, 0, 0)
        self.channel_last = bool(channel_last)
        spatial_ndim = len(shape) - 1 if self.channel_last else len(shape)
        if n > spatial_ndim:
            raise fn.error(f"kernel must have between 1 and {spatial_ndim} entries for an input "
                           f"of shape {shape} (channel_last={self.channel_last}), got "
                           f"{self.kernel}")
        if any(p >= k for p, k in zip(self.pad, self.kernel)):
            raise fn.error(f"pad must be smaller than the kernel so that every window overlaps "
                           f"the input, got kernel {self.kernel} and pad {self.pad}")
        first = _channel_first_shape(shape, n) if self.channel_last else shape
        self.spatial = first[-n:]
        padded = tuple(w + 2 * p for w, p in zip(self.spatial, self.pad))
        if ignore_border and any(w < k for w, k in zip(padded, self.kernel)):
            raise fn.error(f"the kernel {self.kernel} is larger than the padded input {padded}; "
                           "use a smaller kernel, more padding, or ignore_border=False")
        self.out_spatial = tuple(
            (w + p - (k - p if ignore_border else 1)) // s + 1
            for w, k, s, p in zip(self.spatial, self.kernel, self.stride, self.pad))
        out_first = first[:-n] + self.out_spatial
        self.out_shape = _channel_last_shape(out_first, n) if self.channel_last else out_first
        self.overlapping = any(s < k for s, k in zip(self.stride, self.kernel))
        # Padding after the input so that the last window fits (only ignore_border=False
        # can need more than ``pad`` there).
        self.pad_after = tuple(max(0, (o - 1) * s + k - p - w) for o, s, k, p, w in zip(
            self.out_spatial, self.stride, self.kernel, self.pad, self.spatial))

    def to_first(self, xp, a):
        """An input or output array with its channel axis before the spatial axes."""
        return _to_first(xp, a, len(self.kernel), self.channel_last)

    def from_first(self, xp, a):
        """A channel-first array back in the caller's layout."""
        return _from_first(xp, a, len(self.kernel), self.channel_last)

    def padded_shape(self, lead: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of a padded array whose non-spatial axes are ``lead``."""
        return lead + tuple(p + w + q for p, w, q in zip(self.pad, self.spatial, self.pad_after))

    def padded(self, xp, x, fill: float):
        """``x`` with its spatial padding filled with ``fill`` (``x`` itself without padding)."""
        if not any(self.pad) and not any(self.pad_after):
            return x
        out = xp.full(self.padded_shape(x.shape[:-len(self.kernel)]), fill, x.dtype)
        out[self.interior()] = x
        return out

    def interior(self) -> tuple:
        """The index of the unpadded input inside a padded array."""
        return (Ellipsis,) + tuple(slice(p, p + w) for p, w in zip(self.pad, self.spatial))

    def offsets(self):
        """For each offset inside the window: its number (row-major) and the index of
        the strided view that holds, for every window, its element at that offset."""
        for number, offset in enumerate(itertools.product(*(range(k) for k in self.kernel))):
            yield number, (Ellipsis,) + tuple(
                slice(o, o + s * (n - 1) + 1, s)
                for o, s, n in zip(offset, self.stride, self.out_spatial))


def _pooling_params(fn) -> Params:
    win = fn.win
    return {"kernel": ints(win.kernel), "stride": ints(win.stride),
            "ignore_border": bool(fn.args[2]), "pad": ints(win.pad),
            "channel_last": bool(fn.args[4])}


def _max_pooling(xs, p, n):
    return max_pooling(xs[0], p["kernel"], p["stride"], p["ignore_border"], p["pad"],
                       p["channel_last"])


class MaxPooling(Function):
    """The maximum of each window; the gradient goes to the first maximum (row-major)."""

    nnabla_spec = FunctionSpec("MaxPooling", "max_pooling_param",
                               ("kernel", "stride", "ignore_border", "pad", "channel_last"),
                               _pooling_params, _max_pooling)

    grad_depends_on_inputs = False

    def __init__(self, kernel, stride, ignore_border, pad, channel_last):
        self.args = (kernel, stride, ignore_border, pad, channel_last)

    def output_specs(self, inputs):
        (x,) = inputs
        self.win = _Windows(self, x.shape, *self.args)
        return [(self.win.out_shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        win = self.win
        x = win.padded(xp, win.to_first(xp, xs[0]), -np.inf)
        windows = win.offsets()
        _, first = next(windows)
        y = x[first].copy()
        count = math.prod(win.kernel)
        numbers = xp.arange(count, dtype=np.min_scalar_type(count - 1))
        self.argmax = xp.zeros(y.shape, numbers.dtype)
        for number, index in windows:
            value = x[index]
            # Offsets come in increasing order, so "set to number where greater"
            # is a maximum with number where greater: cheaper than a masked copy.
            xp.maximum(self.argmax, (value > y) * numbers[number], out=self.argmax)
            xp.maximum(y, value, out=y)
        return (win.from_first(xp, y),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        win = self.win
        gy = win.to_first(xp, gys[0])
        gx = xp.zeros(win.padded_shape(gy.shape[:-len(win.kernel)]), gy.dtype)
        for number, index in win.offsets():
            if win.overlapping:
                gx[index] += gy * (self.argmax == number)
            else:
                # Disjoint windows: an input element takes the gradient of one output at most.
                xp.multiply(gy, self.argmax == number, out=gx[index])
        return (win.from_first(xp, gx[win.interior()]),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """To each window's maximum, as a function: its own gradient goes back to gy."""
        return [F.max_pooling_backward(gys[0], xs[0], **_pooling_params(self))]


def max_pooling(x: Variable, kernel: Sequence[int], stride: Sequence[int] | None = None,
                ignore_border: bool = True, pad: Sequence[int] | None = None,
                channel_last: bool = False, n_outputs: int = -1, outputs=None) -> Variable:
    """Maximum over windows of the last ``len(kernel)`` axes (those before the channel axis
    with ``channel_last``); stride defaults to the kernel."""
    default_outputs("F.max_pooling", n_outputs, outputs)
    return MaxPooling(kernel, stride, ignore_border, pad, channel_last)(x)


class _WindowSum(Function):
    """The sum of each window (zero padding), divided by ``divisor`` where it is set."""

    grad_depends_on_inputs = False
    divisor = None

    def forward_arrays(self, xp, xs):
        win = self.win
        x = win.padded(xp, win.to_first(xp, xs[0]), 0)
        windows = win.offsets()
        _, first = next(windows)
        y = x[first].copy()
        for _, index in windows:
            y += x[index]
        if self.divisor is not None:
            y /= xp.asarray(self.divisor, y.dtype)
        return (win.from_first(xp, y),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        win = self.win
        gy = win.to_first(xp, gys[0])
        if self.divisor is not None:
            gy = gy / xp.asarray(self.divisor, gy.dtype)
        gx = xp.zeros(win.padded_shape(gy.shape[:-len(win.kernel)]), gy.dtype)
        for _, index in win.offsets():
            gx[index] += gy
        return (win.from_first(xp, gx[win.interior()]),)

    backward_graph = linear_backward_graph  # its backward adds into zeros


def _average_pooling_params(fn) -> Params:
    return {**_pooling_params(fn), "including_pad": bool(fn.including_pad)}


def _average_pooling(xs, p, n):
    return average_pooling(xs[0], p["kernel"], p["stride"], p["ignore_border"], p["pad"],
                           p["channel_last"], p["including_pad"])


class AveragePooling(_WindowSum):
    """The mean of each window; ``including_pad`` counts the padding in the divisor."""

    nnabla_spec = FunctionSpec("AveragePooling", "average_pooling_param",
                               ("kernel", "stride", "ignore_border", "pad", "channel_last",
                                "including_pad"), _average_pooling_params, _average_pooling)

    def __init__(self, kernel, stride, ignore_border, pad, channel_last, including_pad):
        self.args = (kernel, stride, ignore_border, pad, channel_last)
        self.including_pad = including_pad

    def output_specs(self, inputs):
        (x,) = inputs
        win = self.win = _Windows(self, x.shape, *self.args)
        # Elements per window, as nnabla counts them: the padding counts with
        # including_pad, the overhang past it (ignore_border=False) never does.
        divisor = np.ones((), np.int64)
        for o, w, k, s, p in zip(win.out_spatial, win.spatial, win.kernel, win.stride, win.pad):
            start = np.arange(o) * s - p
            stop = np.minimum(start + k, w + p)
            if not self.including_pad:
                start, stop = np.maximum(start, 0), np.minimum(stop, w)
            divisor = np.multiply.outer(divisor, stop - start)
        self.divisor = divisor
        return [(win.out_shape, x.dtype)]


def average_pooling(x: Variable, kernel: Sequence[int], stride: Sequence[int] | None = None,
                    ignore_border: bool = True, pad: Sequence[int] | None = None,
                    channel_last: bool = False, including_pad: bool = True, n_outputs: int = -1,
                    outputs=None) -> Variable:
    """Mean over windows of the last ``len(kernel)`` axes (those before the channel axis
    with ``channel_last``); stride defaults to the kernel."""
    default_outputs("F.average_pooling", n_outputs, outputs)
    return AveragePooling(kernel, stride, ignore_border, pad, channel_last, including_pad)(x)


class SumPooling(_WindowSum):
    """The sum of each window (the padding adds zeros)."""

    nnabla_spec = FunctionSpec("SumPooling", "sum_pooling_param",
                               ("kernel", "stride", "ignore_border", "pad", "channel_last"),
                               _pooling_params,
                               call("sum_pooling", "kernel", "stride", "ignore_border", "pad",
                                    "channel_last"))

    def __init__(self, kernel, stride, ignore_border, pad, channel_last):
        self.args = (kernel, stride, ignore_border, pad, channel_last)

    def output_specs(self, inputs):
        (x,) = inputs
        self.win = _Windows(self, x.shape, *self.args)
        return [(self.win.out_shape, x.dtype)]


def sum_pooling(x: Variable, kernel: Sequence[int], stride: Sequence[int] | None = None,
                ignore_border: bool = True, pad: Sequence[int] | None = None,
                channel_last: bool = False, n_outputs: int = -1, outputs=None) -> Variable:
    """Sum over windows of the last ``len(kernel)`` axes (those before the channel axis
    with ``channel_last``); stride defaults to the kernel."""
    default_outputs("F.sum_pooling", n_outputs, outputs)
    return SumPooling(kernel, stride, ignore_border, pad, channel_last)(x)


class Unpooling(Function):
    """Each element repeated ``kernel`` times along the last ``len(kernel)`` axes (those
    before the channel axis with ``channel_last``); the gradient sums each block."""

    nnabla_spec = FunctionSpec("Unpooling", "unpooling_param", ("kernel", "channel_last"),
                               attrs("kernel", "channel_last"),
                               call("unpooling", "kernel", "channel_last"))

    grad_depends_on_inputs = False

    def __init__(self, kernel, channel_last: bool):
        self.kernel = kernel
        self.channel_last = bool(channel_last)

    def output_specs(self, inputs):
        (x,) = inputs
        self.kernel = kernel = int_tuple(self, "kernel", self.kernel, None, 1, 1)
        n = len(kernel)
        spatial_ndim = x.ndim - 1 if self.channel_last else x.ndim
        if n > spatial_ndim:
            raise self.error(f"kernel must have 1 to {spatial_ndim} entries for an input of shape "
                             f"{x.shape} (channel_last={self.channel_last}), got {kernel}")
        first = _channel_first_shape(x.shape, n) if self.channel_last else x.shape
        self.x_first = first
        lead, spatial = first[:-n], first[-n:]
        self.blocks = lead + tuple(itertools.chain.from_iterable((s, k) for s, k in zip(
            spatial, kernel)))
        y_first = lead + tuple(s * k for s, k in zip(spatial, kernel))
        self.y_first = y_first
        return [(_channel_last_shape(y_first, n) if self.channel_last else y_first, x.dtype)]

    def forward_arrays(self, xp, xs):
        n = len(self.kernel)
        lead = len(self.x_first) - n
        x = _to_first(xp, xs[0], n, self.channel_last)
        spread = x.reshape(self.x_first[:lead] + tuple(
            itertools.chain.from_iterable((s, 1) for s in self.x_first[lead:])))
        y = xp.broadcast_to(spread, self.blocks).reshape(self.y_first)
        return (_from_first(xp, y, n, self.channel_last),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        n = len(self.kernel)
        lead = len(self.x_first) - n
        gy = _to_first(xp, gys[0], n, self.channel_last).reshape(self.blocks)
        gx = gy.sum(axis=tuple(lead + 2 * i + 1 for i in range(n)))
        return (_from_first(xp, gx, n, self.channel_last),)


def unpooling(x: Variable, kernel: Sequence[int], channel_last: bool = False,
              n_outputs: int = -1, outputs=None) -> Variable:
    """Upsampling by repetition: each element becomes a block of shape ``kernel``."""
    default_outputs("F.unpooling", n_outputs, outputs)
    return Unpooling(kernel, channel_last)(x)


class GlobalAveragePooling(Function):
    """The mean over the axes after the second: (B, C[, H[, W]]) -> (B, C, 1, 1)."""

    nnabla_spec = without_params("GlobalAveragePooling", "global_average_pooling")

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        (x,) = inputs
        if not 2 <= x.ndim <= 4:
            # nnabla 1.39 averages the wrong elements of inputs with more than 4 axes.
            raise self.error(f"expected an input of 2 to 4 dimensions (B, C[, H[, W]]), got "
                             f"shape {x.shape}; reshape the spatial axes into one first")
        self.x_shape = x.shape
        return [(x.shape[:2] + (1, 1), x.dtype)]

    def forward_arrays(self, xp, xs):
        b, c = self.x_shape[:2]
        return (xs[0].reshape(b, c, -1).mean(axis=2).reshape(b, c, 1, 1),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        b, c = self.x_shape[:2]
        count = math.prod(self.x_shape[2:])
        gx = xp.broadcast_to(gys[0].reshape(b, c, 1) / count, (b, c, count))
        return (gx.reshape(self.x_shape),)


def global_average_pooling(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Average of each channel over its whole map: (B, C[, H[, W]]) -> (B, C, 1, 1)."""
    default_outputs("F.global_average_pooling", n_outputs, outputs)
    return GlobalAveragePooling()(x)


def _interpolation_matrix(n_in: int, n_out: int, mode: str, align_corners: bool,
                          half_pixel: bool, half_pixel_for_nn: bool) -> np.ndarray:
    """The (n_out, n_in) weights of one axis' resampling, with nnabla's float32 coordinate
    rules: output o reads input ``o * scale`` (``(o + 0.5) * scale - 0.5``, at least 0,
    with ``half_pixel``; ``(o + 0.5) * n_in / n_out`` for nearest with
    ``half_pixel_for_nn``), scale ``(n_in - 1) / (n_out - 1)`` with ``align_corners``, else
    ``n_in / n_out`` (0 for a single output)."""
    f = np.float32
    weights = np.zeros((n_out, n_in), np.float64)
    if n_out == 0:
        return weights
    out = np.arange(n_out, dtype=f)
    if mode == "nearest" and half_pixel_for_nn:
        source = (out + f(0.5)) * (f(n_in) / f(n_out))
    else:
        if n_out == 1:
            scale = f(0)
        elif align_corners:
            scale = f(n_in - 1) / f(n_out - 1)
        else:
            scale = f(n_in) / f(n_out)
        source = (np.maximum(scale * (out + f(0.5)) - f(0.5), f(0)) if half_pixel
                  else scale * out)
    low = np.minimum(np.floor(source).astype(np.int64), n_in - 1)
    rows = np.arange(n_out)
    if mode == "nearest":
        weights[rows, low] = 1
        return weights
    frac = (source - low.astype(f)).astype(np.float64)
    np.add.at(weights, (rows, low), 1 - frac)
    np.add.at(weights, (rows, np.minimum(low + 1, n_in - 1)), frac)
    return weights


class Interpolate(Function):
    """Resizing of the last ``len(output_size)`` axes (those before the channel axis with
    ``channel_last``), linear or nearest, one axis after the other."""

    nnabla_spec = FunctionSpec("Interpolate", "interpolate_param",
                               ("output_size", "mode", "align_corners", "half_pixel",
                                "half_pixel_for_nn", "channel_last"),
                               attrs("output_size", "mode", "align_corners", "half_pixel",
                                     "half_pixel_for_nn", "channel_last"),
                               call("interpolate", "output_size", "mode", "align_corners",
                                    "half_pixel", "half_pixel_for_nn", "channel_last"))

    grad_depends_on_inputs = False

    def __init__(self, output_size, mode: str, align_corners: bool, half_pixel: bool,
                 half_pixel_for_nn: bool, channel_last: bool):
        self.output_size = output_size
        self.mode = mode
        self.align_corners = bool(align_corners)
        self.half_pixel = bool(half_pixel)
        self.half_pixel_for_nn = bool(half_pixel_for_nn)
        self.channel_last = bool(channel_last)

    def output_specs(self, inputs):
        (x,) = inputs
        self.output_size = size = shape_of(self, self.output_size, "output_size")
        if self.mode not in ("linear", "nearest"):
            raise self.error(f"mode must be 'linear' or 'nearest', got {self.mode!r}")
        if self.align_corners and self.half_pixel:
            raise self.error("align_corners=True and half_pixel=True cannot be combined (as in "
                             "nnabla); set one of them to False")
        n = len(size)
        spatial_ndim = x.ndim - 1 if self.channel_last else x.ndim
        if n == 0 or n > spatial_ndim:
            raise self.error(f"output_size must have 1 to {spatial_ndim} entries for an input of "
                             f"shape {x.shape} (channel_last={self.channel_last}), got {size}")
        first = _channel_first_shape(x.shape, n) if self.channel_last else x.shape
        self.axes = tuple(range(len(first) - n, len(first)))
        self.matrices = [
            _interpolation_matrix(first[a], o, self.mode, self.align_corners, self.half_pixel,
                                  self.half_pixel_for_nn) for a, o in zip(self.axes, size)]
        y_first = first[:-n] + size
        return [(_channel_last_shape(y_first, n) if self.channel_last else y_first, x.dtype)]

    def _resample(self, xp, a, transpose: bool):
        """``a`` (channel-first) multiplied along each spatial axis by its matrix
        (forward) or by the matrix's transpose (backward)."""
        for axis, m in zip(self.axes, self.matrices):
            m = xp.asarray(m if transpose else m.T, a.dtype)
            a = xp.moveaxis(xp.tensordot(a, m, axes=([axis], [0])), -1, axis)
        return xp.ascontiguousarray(a)

    def forward_arrays(self, xp, xs):
        n = len(self.axes)
        y = self._resample(xp, _to_first(xp, xs[0], n, self.channel_last), False)
        return (_from_first(xp, y, n, self.channel_last),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        n = len(self.axes)
        gx = self._resample(xp, _to_first(xp, gys[0], n, self.channel_last), True)
        return (_from_first(xp, gx, n, self.channel_last),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def interpolate(x: Variable, scale: Sequence[float] | None = None,
                output_size: Sequence[int] | None = None, mode: str = 'linear',
                align_corners: bool = False, half_pixel: bool = False,
                half_pixel_for_nn: bool = False, channel_last: bool = False) -> Variable:
    """Resizes the last ``len(scale or output_size)`` axes (those before the channel axis with
    ``channel_last``); ``output_size`` wins over ``scale``, which gives floor(scale * size)."""
    if output_size is None:
        if scale is None:
            raise argument_error("F.interpolate", "either scale or output_size must be given, "
                                                  "got neither")
        scale = tuple(scale) if isinstance(scale, (tuple, list)) else (scale,)
        n = len(scale)
        if n == 0 or n > x.ndim - int(bool(channel_last)):
            raise argument_error("F.interpolate", f"scale must have 1 to {x.ndim} entries for an "
                                                  f"input of shape {x.shape}, got {scale}")
        size = x.shape[-n - 1:-1] if channel_last else x.shape[-n:]
        output_size = [math.floor(s * d) for d, s in zip(size, scale)]
    return Interpolate(output_size, mode, align_corners, half_pixel, half_pixel_for_nn,
                       channel_last)(x)


class MaxPoolingBackward(Function):
    """The gradient of max pooling of ``x`` for the output gradient ``dy``: each entry of
    dy goes to its window's first maximum.  Its own gradient (nnabla's second order of
    max pooling) takes back to dy what lands on those maxima; x gets zero."""

    nnabla_spec = FunctionSpec("MaxPoolingBackward", "max_pooling_backward_param",
                               ("kernel", "stride", "ignore_border", "pad", "channel_last"),
                               lambda fn: _pooling_params(fn.pooling),
                               call("max_pooling_backward", "kernel", "stride", "ignore_border",
                                    "pad", "channel_last"))

    def __init__(self, kernel, stride, ignore_border, pad, channel_last):
        self.pooling = MaxPooling(kernel, stride, ignore_border, pad, channel_last)

    def output_specs(self, inputs):
        dy, x = inputs
        pooling = self.pooling
        pooling.win = _Windows(self, x.shape, *pooling.args)
        if dy.shape != pooling.win.out_shape:
            raise self.error(f"dy must have the shape of the max pooling of x, "
                             f"{pooling.win.out_shape}, got {dy.shape}")
        return [(x.shape, dy.dtype)]

    def forward_arrays(self, xp, xs):
        dy, x = xs
        self.pooling.forward_arrays(xp, [x])  # finds each window's maximum
        return self.pooling.backward_arrays(xp, None, None, [dy], [True])

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        dy, x = xs
        win = self.pooling.win
        self.pooling.forward_arrays(xp, [x])
        argmax = self.pooling.argmax
        g = win.padded(xp, win.to_first(xp, gys[0]), 0)
        gdy = xp.zeros(argmax.shape, g.dtype)
        for number, index in win.offsets():
            gdy += g[index] * (argmax == number)
        gdy = win.from_first(xp, gdy).astype(dy.dtype, copy=False)
        return (gdy if need_grads[0] else None, xp.zeros_like(x) if need_grads[1] else None)

    backward_graph = linear_backward_graph  # linear in dy; x only picks the maxima


def max_pooling_backward(dy: Variable, x: Variable, kernel: Sequence[int],
                         stride: Sequence[int] | None = None, ignore_border: bool = True,
                         pad: Sequence[int] | None = None, channel_last: bool = False,
                         n_outputs: int = -1, outputs=None) -> Variable:
    """The gradient that ``max_pooling(x, kernel, ...)`` passes back to x for the output
    gradient ``dy``, as a differentiable function (nnabla's route to higher orders)."""
    default_outputs("F.max_pooling_backward", n_outputs, outputs)
    return MaxPoolingBackward(kernel, stride, ignore_border, pad, channel_last)(dy, x)


_RESIZE_MODES = ("nearest", "linear", "cubic")
_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """The 4 cubic-convolution weights (coefficient ``a``) of the neighbours at -1, 0, 1,
    2 from the floor, for fractions ``t``."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


class _ResizeAxis:
    """One axis of ONNX's Resize: the (n_out, n_in) weights of each output on the inputs,
    and which outputs fall outside the input (tf_crop_and_resize's extrapolation)."""

    def __init__(self, n_in: int, n_out: int, scale: float, roi: tuple[float, float],
                 fn: ONNXResize):
        source = self._source(np.arange(n_out, dtype=np.float64), n_in, n_out, scale, roi,
                              fn.transform)
        self.outside = np.zeros(n_out, bool)
        if fn.transform == "tf_crop_and_resize":
            self.outside = (source < 0) | (source > n_in - 1)
        self.weights = np.zeros((n_out, n_in), np.float64)
        rows = np.arange(n_out)
        if fn.mode == "nearest":
            self.weights[rows, np.clip(self._nearest(source, fn.nearest_mode), 0, n_in - 1)] = 1
        else:
            low = np.floor(source)
            t = source - low
            if fn.mode == "linear":
                offsets, coefficients = np.array([0, 1]), np.stack([1 - t, t], axis=-1)
            else:
                offsets, coefficients = np.array([-1, 0, 1, 2]), _cubic_weights(t, fn.a)
            where = low.astype(np.int64)[:, None] + offsets
            if fn.exclude_outside:
                coefficients = coefficients * ((where >= 0) & (where < n_in))
                coefficients /= coefficients.sum(axis=1, keepdims=True)
            for j in range(offsets.size):
                np.add.at(self.weights, (rows, np.clip(where[:, j], 0, n_in - 1)),
                          coefficients[:, j])
        self.weights[self.outside] = 0
        self.identity = n_in == n_out and not self.outside.any() and np.array_equal(
            self.weights, np.eye(n_in))

    @staticmethod
    def _source(out, n_in: int, n_out: int, scale: float, roi, transform: str):
        """The input coordinate each output reads (ONNX's coordinate transformations)."""
        if transform == "half_pixel":
            return (out + 0.5) / scale - 0.5
        if transform == "pytorch_half_pixel":
            return (out + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(out)
        if transform == "align_corners":
            return out * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(out)
        if transform == "asymmetric":
            return out / scale
        if transform == "tf_half_pixel_for_nn":
            return (out + 0.5) / scale
        start, end = roi
        if n_out > 1:
            return start * (n_in - 1) + out * (end - start) * (n_in - 1) / (n_out - 1)
        return np.full_like(out, 0.5 * (start + end) * (n_in - 1))

    @staticmethod
    def _nearest(source, nearest_mode: str):
        if nearest_mode == "floor":
            index = np.floor(source)
        elif nearest_mode == "ceil":
            index = np.ceil(source)
        else:
            half = source - np.floor(source) == 0.5
            rounded = np.floor(source + 0.5)
            index = np.where(half, np.floor(source) if nearest_mode == "round_prefer_floor"
                             else np.ceil(source), rounded)
        return index.astype(np.int64)


class ONNXResize(Function):
    """ONNX's Resize of the axes that change size or scale (nnabla leaves the others
    alone): nearest (with its rounding), linear or cubic resampling under one of ONNX's
    coordinate transformations, one axis after the other;
    tf_crop_and_resize reads the region ``roi`` and writes ``extrapolation_value`` where
    it falls outside the input.  Linear in x, so its gradient is the transpose."""

    nnabla_spec = FunctionSpec("ONNXResize", "onnx_resize_param",
                               ("roi", "scales", "sizes", "mode", "coordinate_transformation_mode",
                                "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                                "nearest_mode"),
                               attrs("roi", "scales", "sizes", "mode", "nearest_mode",
                                     coordinate_transformation_mode="transform", cubic_coeff_a="a",
                                     exclude_outside=lambda fn: int(fn.exclude_outside),
                                     extrapolation_value="extrapolation"),
                               call("onnx_resize", "roi", "scales", "sizes", "mode",
                                    "coordinate_transformation_mode", "cubic_coeff_a",
                                    "exclude_outside", "extrapolation_value", "nearest_mode"))

    grad_depends_on_inputs = False

    def __init__(self, roi, scales, sizes, mode, transform, a, exclude_outside, extrapolation,
                 nearest_mode):
        self.roi, self.scales, self.sizes = tuple(roi), tuple(scales), tuple(sizes)
        self.mode, self.transform, self.nearest_mode = mode, transform, nearest_mode
        self.a = -0.75 if a is None else a
        self.exclude_outside = bool(exclude_outside)
        self.extrapolation = 0.0 if extrapolation is None else extrapolation

    def _check(self, ndim: int) -> None:
        for name, value, allowed in (("mode", self.mode, _RESIZE_MODES),
                                     ("coordinate_transformation_mode", self.transform,
                                      _TRANSFORMS),
                                     ("nearest_mode", self.nearest_mode, _NEAREST_MODES)):
            if value not in allowed:
                raise self.error(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if bool(self.sizes) == bool(self.scales):
            raise self.error(f"give exactly one of scales and sizes, one entry per axis of the "
                             f"input, got scales={self.scales} and sizes={self.sizes}")
        given, name = (self.sizes, "sizes") if self.sizes else (self.scales, "scales")
        if len(given) != ndim:
            raise self.error(f"{name} needs one entry per axis of the {ndim}-D input (1 keeps "
                             f"an axis), got {given}")
        if self.transform == "tf_crop_and_resize" and len(self.roi) != 2 * ndim:
            raise self.error(f"tf_crop_and_resize needs roi with {2 * ndim} entries (the "
                             f"starts, then the ends, of every axis), got {self.roi}")
        for value, what in ((self.a, "cubic_coeff_a"), (self.extrapolation,
                                                          "extrapolation_value")):
            if not np.isscalar(value) or isinstance(value, (str, bytes)):
                raise self.error(f"{what} must be a number, got {value!r}")

    def output_specs(self, inputs):
        (x,) = inputs
        self._check(x.ndim)
        if self.sizes:
            sizes = shape_of(self, self.sizes, "sizes")
            scales = [o / i if i else 1.0 for o, i in zip(sizes, x.shape)]
        else:
            scales = [float(v) for v in self.scales]
            if not all(v > 0 for v in scales):
                raise self.error(f"scales must be positive, got {self.scales}")
            sizes = tuple(math.floor(i * v) for i, v in zip(x.shape, scales))
        ndim = x.ndim
        rois = [(self.roi[i], self.roi[i + ndim]) if self.roi and len(self.roi) == 2 * ndim
                else (0.0, 1.0) for i in range(ndim)]
        # As nnabla, the axes that keep their size and scale are left alone (even where
        # tf_half_pixel_for_nn would shift them or tf_crop_and_resize crop them).
        self.axes = [(axis, resize) for axis, resize in (
            (i, _ResizeAxis(x.shape[i], sizes[i], scales[i], rois[i], self))
            for i in range(ndim) if sizes[i] != x.shape[i] or scales[i] != 1)
            if not resize.identity]
        return [(tuple(sizes), x.dtype)]

    def forward_arrays(self, xp, xs):
        y = xs[0]
        for axis, resize in self.axes:
            m = xp.asarray(resize.weights.T, y.dtype)
            y = xp.moveaxis(xp.tensordot(y, m, axes=([axis], [0])), -1, axis)
        y = xp.ascontiguousarray(y)
        for axis, resize in self.axes:
            if resize.outside.any():
                shape = [1] * y.ndim
                shape[axis] = -1
                outside = xp.asarray(resize.outside.reshape(shape))
                y = xp.where(outside, xp.asarray(self.extrapolation, y.dtype), y)
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = gys[0]
        for axis, resize in reversed(self.axes):
            m = xp.asarray(resize.weights, g.dtype)
            g = xp.moveaxis(xp.tensordot(g, m, axes=([axis], [0])), -1, axis)
        return (xp.ascontiguousarray(g),)


def onnx_resize(x: Variable, roi: Sequence[float] = (), scales: Sequence[float] = (),
                sizes: Sequence[int] = (), mode: str = "nearest",
                coordinate_transformation_mode: str = "half_pixel",
                cubic_coeff_a: float | None = None, exclude_outside: int | None = None,
                extrapolation_value: float | None = None,
                nearest_mode: str = "round_prefer_floor", n_outputs: int = -1,
                outputs=None) -> Variable:
    """ONNX's Resize of every axis of ``x`` to ``sizes`` or by ``scales`` (one entry per
    axis): mode nearest, linear or cubic (coefficient ``cubic_coeff_a``, default -0.75,
    ``exclude_outside``), under ONNX's coordinate transformations (``roi`` and
    ``extrapolation_value`` for tf_crop_and_resize) and nearest roundings."""
    default_outputs("F.onnx_resize", n_outputs, outputs)
    return ONNXResize(roi, scales, sizes, mode, coordinate_transformation_mode, cubic_coeff_a,
                      exclude_outside, extrapolation_value, nearest_mode)(x)
