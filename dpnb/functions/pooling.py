"""Pooling over the trailing (spatial) axes: max, average, sum, global average, and the
upsamplings (unpooling, interpolation)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable
from .base import argument_error, default_outputs, shape_of

__all__ = ["max_pooling", "average_pooling", "sum_pooling", "unpooling", "global_average_pooling",
           "interpolate"]


def _ints(fn: Function, name: str, value) -> tuple[int, ...]:
    """A window option (kernel, stride, pad) as a tuple of ints."""
    given = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in given):
        raise fn.error(f"{name} must be a tuple of ints, one per pooled axis, got {value!r}")
    return tuple(int(v) for v in given)


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
        self.kernel = _ints(fn, "kernel", kernel)
        n = len(self.kernel)
        self.stride = self.kernel if stride is None else _ints(fn, "stride", stride)
        self.pad = (0,) * n if pad is None else _ints(fn, "pad", pad)
        self.channel_last = bool(channel_last)
        spatial_ndim = len(shape) - 1 if self.channel_last else len(shape)
        if n == 0 or n > spatial_ndim:
            raise fn.error(f"kernel must have between 1 and {spatial_ndim} entries for an input "
                           f"of shape {shape} (channel_last={self.channel_last}), got "
                           f"{self.kernel}")
        if len(self.stride) != n or len(self.pad) != n:
            raise fn.error(f"kernel, stride and pad must have the same length, got kernel "
                           f"{self.kernel}, stride {self.stride}, pad {self.pad}")
        if min(self.kernel) < 1 or min(self.stride) < 1 or min(self.pad) < 0:
            raise fn.error(f"kernel and stride must be >= 1 and pad >= 0, got kernel "
                           f"{self.kernel}, stride {self.stride}, pad {self.pad}")
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


class MaxPooling(Function):
    """The maximum of each window; the gradient goes to the first maximum (row-major)."""

    grad_depends_on_inputs = False

    def __init__(self, kernel, stride, ignore_border, pad, channel_last):
        self.args = (kernel, stride, ignore_border, pad, channel_last)

    def setup(self, inputs):
        (x,) = inputs
        self.win = _Windows(self, x.shape, *self.args)
        return [(self.win.out_shape, x.dtype)]

    def forward(self, xp, xs):
        win = self.win
        x = win.padded(xp, win.to_first(xp, xs[0]), -np.inf)
        windows = win.offsets()
        _, first = next(windows)
        y = x[first].copy()
        count = int(np.prod(win.kernel))
        numbers = xp.arange(count, dtype=np.min_scalar_type(count - 1))
        self.argmax = xp.zeros(y.shape, numbers.dtype)
        for number, index in windows:
            value = x[index]
            # Offsets come in increasing order, so "set to number where greater"
            # is a maximum with number where greater: cheaper than a masked copy.
            xp.maximum(self.argmax, (value > y) * numbers[number], out=self.argmax)
            xp.maximum(y, value, out=y)
        return (win.from_first(xp, y),)

    def backward(self, xp, xs, ys, gys, need_grads):
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

    def forward(self, xp, xs):
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

    def backward(self, xp, xs, ys, gys, need_grads):
        win = self.win
        gy = win.to_first(xp, gys[0])
        if self.divisor is not None:
            gy = gy / xp.asarray(self.divisor, gy.dtype)
        gx = xp.zeros(win.padded_shape(gy.shape[:-len(win.kernel)]), gy.dtype)
        for _, index in win.offsets():
            gx[index] += gy
        return (win.from_first(xp, gx[win.interior()]),)


class AveragePooling(_WindowSum):
    """The mean of each window; ``including_pad`` counts the padding in the divisor."""

    def __init__(self, kernel, stride, ignore_border, pad, channel_last, including_pad):
        self.args = (kernel, stride, ignore_border, pad, channel_last)
        self.including_pad = including_pad

    def setup(self, inputs):
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

    def __init__(self, kernel, stride, ignore_border, pad, channel_last):
        self.args = (kernel, stride, ignore_border, pad, channel_last)

    def setup(self, inputs):
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

    grad_depends_on_inputs = False

    def __init__(self, kernel, channel_last: bool):
        self.kernel = kernel
        self.channel_last = bool(channel_last)

    def setup(self, inputs):
        (x,) = inputs
        self.kernel = kernel = _ints(self, "kernel", self.kernel)
        n = len(kernel)
        spatial_ndim = x.ndim - 1 if self.channel_last else x.ndim
        if n == 0 or n > spatial_ndim or min(kernel) < 1:
            raise self.error(f"kernel must be 1 to {spatial_ndim} ints >= 1 for an input of shape "
                             f"{x.shape} (channel_last={self.channel_last}), got {kernel}")
        first = _channel_first_shape(x.shape, n) if self.channel_last else x.shape
        self.x_first = first
        lead, spatial = first[:-n], first[-n:]
        self.blocks = lead + tuple(itertools.chain.from_iterable((s, k) for s, k in zip(
            spatial, kernel)))
        y_first = lead + tuple(s * k for s, k in zip(spatial, kernel))
        self.y_first = y_first
        return [(_channel_last_shape(y_first, n) if self.channel_last else y_first, x.dtype)]

    def forward(self, xp, xs):
        n = len(self.kernel)
        lead = len(self.x_first) - n
        x = _to_first(xp, xs[0], n, self.channel_last)
        spread = x.reshape(self.x_first[:lead] + tuple(
            itertools.chain.from_iterable((s, 1) for s in self.x_first[lead:])))
        y = xp.broadcast_to(spread, self.blocks).reshape(self.y_first)
        return (_from_first(xp, y, n, self.channel_last),)

    def backward(self, xp, xs, ys, gys, need_grads):
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

    grad_depends_on_inputs = False

    def setup(self, inputs):
        (x,) = inputs
        if not 2 <= x.ndim <= 4:
            # nnabla 1.39 averages the wrong elements of inputs with more than 4 axes.
            raise self.error(f"expected an input of 2 to 4 dimensions (B, C[, H[, W]]), got "
                             f"shape {x.shape}; reshape the spatial axes into one first")
        self.x_shape = x.shape
        return [(x.shape[:2] + (1, 1), x.dtype)]

    def forward(self, xp, xs):
        b, c = self.x_shape[:2]
        return (xs[0].reshape(b, c, -1).mean(axis=2).reshape(b, c, 1, 1),)

    def backward(self, xp, xs, ys, gys, need_grads):
        b, c = self.x_shape[:2]
        count = int(np.prod(self.x_shape[2:]))
        gx = xp.broadcast_to(gys[0].reshape(b, c, 1) / gys[0].dtype.type(count), (b, c, count))
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

    grad_depends_on_inputs = False

    def __init__(self, output_size, mode: str, align_corners: bool, half_pixel: bool,
                 half_pixel_for_nn: bool, channel_last: bool):
        self.output_size = output_size
        self.mode = mode
        self.align_corners = bool(align_corners)
        self.half_pixel = bool(half_pixel)
        self.half_pixel_for_nn = bool(half_pixel_for_nn)
        self.channel_last = bool(channel_last)

    def setup(self, inputs):
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

    def forward(self, xp, xs):
        n = len(self.axes)
        y = self._resample(xp, _to_first(xp, xs[0], n, self.channel_last), False)
        return (_from_first(xp, y, n, self.channel_last),)

    def backward(self, xp, xs, ys, gys, need_grads):
        n = len(self.axes)
        gx = self._resample(xp, _to_first(xp, gys[0], n, self.channel_last), True)
        return (_from_first(xp, gx, n, self.channel_last),)


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
