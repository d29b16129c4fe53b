"""Affine and 2-D convolution layers (the matrix products of a network)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable
from .base import base_axis_of, int_tuple, workspace

__all__ = ["affine", "convolution"]


class Affine(Function):
    """y = x W + b, with x flattened to a matrix at ``base_axis``."""

    def __init__(self, base_axis: int):
        self.base_axis = base_axis

    def setup(self, inputs):
        x, w = inputs[0], inputs[1]
        self.base_axis = axis = base_axis_of(self, self.base_axis, x.ndim)
        rows, cols = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
        if w.ndim < 2 or w.shape[0] != cols:
            raise self.error(f"weight must have shape ({cols}, *out) to match an input of shape "
                             f"{x.shape} flattened at base_axis={axis}, got {w.shape}")
        if len(inputs) == 3 and inputs[2].shape != w.shape[1:]:
            raise self.error(f"bias must have shape {w.shape[1:]} (weight.shape[1:]), "
                             f"got {inputs[2].shape}")
        self.x_shape, self.w_shape = x.shape, w.shape
        self.matrix_shape = (rows, cols)
        y_shape = x.shape[:axis] + w.shape[1:]
        return [(y_shape, np.result_type(*(v.dtype for v in inputs)))]

    def forward(self, xp, xs):
        x = xs[0].reshape(self.matrix_shape)
        y = xp.matmul(x, xs[1].reshape(self.w_shape[0], -1))
        if len(xs) == 3:
            y += xs[2].reshape(-1)
        return (y.reshape(self.x_shape[:self.base_axis] + self.w_shape[1:]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        x = xs[0].reshape(self.matrix_shape)
        w = xs[1].reshape(self.w_shape[0], -1)
        gy = gys[0].reshape(x.shape[0], -1)
        gx = xp.matmul(gy, w.T).reshape(self.x_shape) if need_grads[0] else None
        gw = xp.matmul(x.T, gy).reshape(self.w_shape) if need_grads[1] else None
        grads = [gx, gw]
        if len(xs) == 3:
            grads.append(gy.sum(axis=0).reshape(self.w_shape[1:]) if need_grads[2] else None)
        return tuple(grads)


def affine(x: Variable, weight: Variable, bias: Variable | None = None,
           base_axis: int = 1) -> Variable:
    """Fully connected layer: the axes from ``base_axis`` on are multiplied with
    ``weight`` (shape ``(in, *out)``); output shape ``x.shape[:base_axis] + weight.shape[1:]``."""
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Affine(base_axis)(*inputs)


def _im2col(xp, x, group: int, kernel, pad, stride, dilation, out_hw):
    """The patch of NCHW ``x`` (zero-padded by ``pad``) under each of the ``out_hw``
    output pixels, as (B, group, C/group * kh * kw, Ho * Wo) in the column workspace."""
    b, c, h, w = x.shape
    (ph, pw), (sh, sw), (dh, dw) = pad, stride, dilation
    if ph or pw:
        padded = xp.zeros((b, c, h + 2 * ph, w + 2 * pw), x.dtype)
        padded[:, :, ph:ph + h, pw:pw + w] = x
        x = padded
    (kh, kw), (ho, wo), cg = kernel, out_hw, c // group
    s_b, s_c, s_h, s_w = x.strides
    shape = (b, group, cg, kh, kw, ho, wo)
    strides = (s_b, s_c * cg, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw)
    columns = workspace(xp, shape, x.dtype)
    columns[...] = xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)
    return columns.reshape(b, group, cg * kh * kw, ho * wo)


class Convolution(Function):
    """2-D convolution (cross-correlation) of NCHW input by im2col and batched matmul.

    With stride 1 the input gradient is itself a convolution, of the output gradient with
    the flipped kernel; the columns of the output gradient then give both gradients."""

    def __init__(self, base_axis: int, pad, stride, dilation, group: int, channel_last: bool):
        self.base_axis = base_axis
        self.pad = pad
        self.stride = stride
        self.dilation = dilation
        self.group = int(group)
        self.channel_last = channel_last

    def setup(self, inputs):
        x, w = inputs[0], inputs[1]
        if self.channel_last:
            raise self.error("channel_last=True is not supported: expected channel-first input "
                             "(..., C, H, W); transpose the input and pass channel_last=False")
        axis = base_axis_of(self, self.base_axis, x.ndim)
        if x.ndim - axis != 3:
            raise self.error(f"only 2-D convolution is supported: the input must have a channel "
                             f"axis and two spatial axes after base_axis={axis}, got shape "
                             f"{x.shape}; reshape the input to (..., C, H, W)")
        self.pad = int_tuple(self, "pad", self.pad, 2, 0, 0)
        self.stride = int_tuple(self, "stride", self.stride, 2, 1, 1)
        self.dilation = int_tuple(self, "dilation", self.dilation, 2, 1, 1)
        channels, height, width = x.shape[axis:]
        g = self.group
        if w.ndim != 4:
            raise self.error(f"weight must have shape (out_channels, in_channels/group, kh, kw), "
                             f"got {w.shape}")
        out_channels, kh, kw = w.shape[0], w.shape[2], w.shape[3]
        if g < 1 or channels % g or out_channels % g or w.shape[1] * g != channels:
            raise self.error(f"with group={g}, the input's {channels} channels and the weight's "
                             f"{out_channels} output channels must divide by group, and "
                             f"weight.shape[1] must be {channels}/{g}; got weight shape {w.shape}")
        if len(inputs) == 3 and inputs[2].shape != (out_channels,):
            raise self.error(f"bias must have shape ({out_channels},), got {inputs[2].shape}")
        out_hw = []
        for size, k, p, s, d in zip((height, width), (kh, kw), self.pad, self.stride,
                                    self.dilation):
            span = d * (k - 1) + 1
            if span > size + 2 * p:
                raise self.error(f"the kernel spans {span} pixels (dilation included) but the "
                                 f"padded input has only {size + 2 * p} along an axis (input "
                                 f"shape {x.shape}, pad {self.pad}); use a smaller kernel or "
                                 "more padding")
            out_hw.append((size + 2 * p - span) // s + 1)
        batch = int(np.prod(x.shape[:axis]))
        self.x_shape, self.w_shape = x.shape, w.shape
        self.x4_shape = (batch, channels, height, width)
        self.y_hw = tuple(out_hw)
        self.pointwise = (kh, kw) == (1, 1) and self.stride == (1, 1) and self.pad == (0, 0)
        y_shape = x.shape[:axis] + (out_channels,) + self.y_hw
        return [(y_shape, np.result_type(*(v.dtype for v in inputs)))]

    def _weight_matrix(self, w):
        """The weight as (group, out_channels/group, in_channels/group * kh * kw)."""
        return w.reshape(self.group, self.w_shape[0] // self.group, -1)

    def _columns(self, xp, x):
        """The input patch under each output pixel: (B, group, C/group * kh * kw, Ho * Wo)."""
        b, c, h, w = self.x4_shape
        x = x.reshape(self.x4_shape)
        if self.pointwise:
            return x.reshape(b, self.group, c // self.group, h * w)
        return _im2col(xp, x, self.group, self.w_shape[2:], self.pad, self.stride,
                       self.dilation, self.y_hw)

    def _output_grad_columns(self, xp, gy):
        """For stride 1, the columns of gy padded by d (k - 1) - p: (B, group, OC/group * kh * kw,
        H * W).  The input gradient is their product with the flipped weight (a convolution),
        the weight gradient the batch sum of the input's product with them."""
        b, oc = self.x4_shape[0], self.w_shape[0]
        kernel = self.w_shape[2:]
        pads = tuple(d * (k - 1) - p for d, k, p in zip(self.dilation, kernel, self.pad))
        # A pad beyond the kernel's reach leaves border outputs that see only zeros: crop them.
        crop = tuple(slice(max(-q, 0), n - max(-q, 0)) for q, n in zip(pads, self.y_hw))
        gy = gy.reshape((b, oc) + self.y_hw)[(Ellipsis,) + crop]
        return _im2col(xp, gy, self.group, kernel, tuple(max(q, 0) for q in pads), (1, 1),
                       self.dilation, self.x4_shape[2:])

    def _flip(self, a):
        """(group * m, n, kh, kw) as (group, n, m * kh * kw) with the kernel reversed: the weight
        (m = OC/group) in the layout of the stride-1 input gradient, and back for its gradient."""
        g, (m, n, kh, kw) = self.group, a.shape
        a = a.reshape(g, m // g, n, kh, kw)[:, :, :, ::-1, ::-1]
        return a.transpose(0, 2, 1, 3, 4).reshape(g, n, -1)

    def _add_columns_to_image(self, xp, columns):
        """col2im: the input gradient from that of the columns, summed over kernel offsets."""
        b, c, h, w = self.x4_shape
        (ph, pw), (sh, sw), (dh, dw) = self.pad, self.stride, self.dilation
        kh, kw = self.w_shape[2:]
        ho, wo = self.y_hw
        columns = columns.reshape(b, c, kh, kw, ho, wo)
        image = xp.zeros((b, c, h + 2 * ph, w + 2 * pw), columns.dtype)
        for i in range(kh):
            for j in range(kw):
                image[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                      j * dw:j * dw + sw * (wo - 1) + 1:sw] += columns[:, :, i, j]
        return image[:, :, ph:ph + h, pw:pw + w]

    def forward(self, xp, xs):
        y = xp.matmul(self._weight_matrix(xs[1]), self._columns(xp, xs[0]))
        y = y.reshape(self.x4_shape[0], self.w_shape[0], *self.y_hw)
        if len(xs) == 3:
            y += xs[2].reshape(-1, 1, 1)
        return (y.reshape(self.x_shape[:-3] + y.shape[1:]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (b, c, h, w), g = self.x4_shape, self.group
        gy = gys[0].reshape(b, g, self.w_shape[0] // g, -1)
        grads = [None, None]
        if need_grads[0] and self.stride == (1, 1) and not self.pointwise:
            # One set of columns, of gy, for both gradients: no col2im, and no columns of x.
            columns = self._output_grad_columns(xp, gy)
            if need_grads[1]:
                x = xs[0].reshape(b, g, c // g, h * w)
                gw = xp.matmul(x, columns.swapaxes(-1, -2)).sum(axis=0)
                gw = gw.reshape((c, self.w_shape[0] // g) + self.w_shape[2:])
                grads[1] = self._flip(gw).reshape(self.w_shape)
            grads[0] = xp.matmul(self._flip(xs[1]), columns).reshape(self.x_shape)
        else:
            if need_grads[1]:
                # Per-sample products summed over the batch: no transposed copy of the columns.
                columns = self._columns(xp, xs[0])
                gw = xp.matmul(gy, columns.swapaxes(-1, -2)).sum(axis=0)
                grads[1] = gw.reshape(self.w_shape)
            if need_grads[0]:
                w_t = self._weight_matrix(xs[1]).swapaxes(-1, -2)
                if self.pointwise:
                    gx = xp.matmul(w_t, gy)
                else:
                    # The columns' gradient (after the weight's: it reuses the workspace).
                    columns = workspace(xp, (b, g, w_t.shape[1], gy.shape[3]), gy.dtype)
                    gx = self._add_columns_to_image(xp, xp.matmul(w_t, gy, out=columns))
                grads[0] = gx.reshape(self.x_shape)
        if len(xs) == 3:
            grads.append(gy.sum(axis=(0, 3)).reshape(-1) if need_grads[2] else None)
        return tuple(grads)


def convolution(x: Variable, weight: Variable, bias: Variable | None = None, base_axis: int = 1,
                pad: Sequence[int] | None = None, stride: Sequence[int] | None = None,
                dilation: Sequence[int] | None = None, group: int = 1,
                channel_last: bool = False) -> Variable:
    """2-D convolution of ``x`` (sample axes up to ``base_axis``, then C, H, W) with
    ``weight`` of shape (OC, C/group, kh, kw) and an optional ``bias`` (OC,)."""
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Convolution(base_axis, pad, stride, dilation, group, channel_last)(*inputs)
