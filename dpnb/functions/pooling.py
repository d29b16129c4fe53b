"""Max, average and global average pooling over the trailing (spatial) axes."""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable

__all__ = ["max_pooling", "average_pooling", "global_average_pooling"]


class _Windows:
    """Pooling geometry of the last ``len(kernel)`` axes, following nnabla: an
    output has ``(w + p - (k - p if ignore_border else 1)) // s + 1`` entries
    along an axis of size ``w``; window ``o`` starts at ``o * s - p``."""

    def __init__(self, fn: Function, shape: tuple[int, ...], kernel, stride, ignore_border: bool,
                 pad, channel_last: bool):
        if channel_last:
            raise fn.error("channel_last=True is not supported: expected channel-first input "
                           "(..., C, H, W); transpose the input and pass channel_last=False")
        self.kernel = tuple(int(k) for k in kernel)
        n = len(self.kernel)
        self.stride = self.kernel if stride is None else tuple(int(s) for s in stride)
        self.pad = (0,) * n if pad is None else tuple(int(p) for p in pad)
        if n == 0 or n > len(shape):
            raise fn.error(f"kernel must have between 1 and {len(shape)} entries for an input of "
                           f"shape {shape}, got {self.kernel}")
        if len(self.stride) != n or len(self.pad) != n:
            raise fn.error(f"kernel, stride and pad must have the same length, got kernel "
                           f"{self.kernel}, stride {self.stride}, pad {self.pad}")
        if min(self.kernel) < 1 or min(self.stride) < 1 or min(self.pad) < 0:
            raise fn.error(f"kernel and stride must be >= 1 and pad >= 0, got kernel "
                           f"{self.kernel}, stride {self.stride}, pad {self.pad}")
        if any(p >= k for p, k in zip(self.pad, self.kernel)):
            raise fn.error(f"pad must be smaller than the kernel so that every window overlaps "
                           f"the input, got kernel {self.kernel} and pad {self.pad}")
        self.spatial = shape[-n:]
        padded = tuple(w + 2 * p for w, p in zip(self.spatial, self.pad))
        if ignore_border and any(w < k for w, k in zip(padded, self.kernel)):
            raise fn.error(f"the kernel {self.kernel} is larger than the padded input {padded}; "
                           "use a smaller kernel, more padding, or ignore_border=False")
        self.out_spatial = tuple(
            (w + p - (k - p if ignore_border else 1)) // s + 1
            for w, k, s, p in zip(self.spatial, self.kernel, self.stride, self.pad))
        self.out_shape = shape[:-n] + self.out_spatial
        self.overlapping = any(s < k for s, k in zip(self.stride, self.kernel))
        # Padding after the input so that the last window fits (only ignore_border=False
        # can need more than ``pad`` there).
        self.pad_after = tuple(max(0, (o - 1) * s + k - p - w) for o, s, k, p, w in zip(
            self.out_spatial, self.stride, self.kernel, self.pad, self.spatial))

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
        x = win.padded(xp, xs[0], -np.inf)
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
        return (y,)

    def backward(self, xp, xs, ys, gys, need_grads):
        win, gy = self.win, gys[0]
        gx = xp.zeros(win.padded_shape(gy.shape[:-len(win.kernel)]), gy.dtype)
        for number, index in win.offsets():
            if win.overlapping:
                gx[index] += gy * (self.argmax == number)
            else:
                # Disjoint windows: an input element takes the gradient of one output at most.
                xp.multiply(gy, self.argmax == number, out=gx[index])
        return (gx[win.interior()],)


def max_pooling(x: Variable, kernel: Sequence[int], stride: Sequence[int] | None = None,
                ignore_border: bool = True, pad: Sequence[int] | None = None,
                channel_last: bool = False) -> Variable:
    """Maximum over windows of the last ``len(kernel)`` axes (stride defaults to the kernel)."""
    return MaxPooling(kernel, stride, ignore_border, pad, channel_last)(x)


class AveragePooling(Function):
    """The mean of each window; ``including_pad`` counts the padding in the divisor."""

    grad_depends_on_inputs = False

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

    def forward(self, xp, xs):
        win = self.win
        x = win.padded(xp, xs[0], 0)
        windows = win.offsets()
        _, first = next(windows)
        y = x[first].copy()
        for _, index in windows:
            y += x[index]
        y /= xp.asarray(self.divisor, y.dtype)
        return (y,)

    def backward(self, xp, xs, ys, gys, need_grads):
        win = self.win
        gy = gys[0] / xp.asarray(self.divisor, gys[0].dtype)
        gx = xp.zeros(win.padded_shape(gy.shape[:-len(win.kernel)]), gy.dtype)
        for _, index in win.offsets():
            gx[index] += gy
        return (gx[win.interior()],)


def average_pooling(x: Variable, kernel: Sequence[int], stride: Sequence[int] | None = None,
                    ignore_border: bool = True, pad: Sequence[int] | None = None,
                    channel_last: bool = False, including_pad: bool = True) -> Variable:
    """Mean over windows of the last ``len(kernel)`` axes (stride defaults to the kernel)."""
    return AveragePooling(kernel, stride, ignore_border, pad, channel_last, including_pad)(x)


class GlobalAveragePooling(Function):
    """The mean over all axes after the second: (B, C, ...) -> (B, C, 1, 1)."""

    grad_depends_on_inputs = False

    def setup(self, inputs):
        (x,) = inputs
        if x.ndim < 2:
            raise self.error(f"expected an input of at least 2 dimensions (B, C, ...), "
                             f"got shape {x.shape}")
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


def global_average_pooling(x: Variable) -> Variable:
    """Average of each channel over its whole map: (B, C, H, W) -> (B, C, 1, 1)."""
    return GlobalAveragePooling()(x)
