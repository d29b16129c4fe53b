"""Affine, convolution and deconvolution (plain, grouped, depthwise) over any number of
spatial axes: the matrix products of a network; nnabla's fused convolution (pad,
convolution, batch normalization, residual and activation in one call) and the patch
correlation of FlowNet."""
from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import DpnbError
from ..graph import Function, Variable
from .activation import ELU, LeakyReLU, ReLU, ReLU6, Sigmoid, Tanh
from .array import Pad
from .base import argument_error, base_axis_of, default_outputs, int_tuple, workspace
from .graph_module import bilinear_backward_graph, composite_backward_graph
from .normalization import BatchNormalization
from .specs import Export, FunctionSpec, Params, call, ints, plain

__all__ = ["affine", "convolution", "deconvolution", "depthwise_convolution",
           "depthwise_deconvolution", "fused_convolution", "patch_correlation"]


def _affine(xs, p, n):
    return affine(*xs, base_axis=p["base_axis"])


class Affine(Function):
    """y = x W + b, with x flattened to a matrix at ``base_axis``."""

    nnabla_spec = FunctionSpec("Affine", "affine_param", ("base_axis",),
                               lambda fn: {"base_axis": int(fn.base_axis)}, _affine)

    grad_skips_inputs = (2,)  # the bias

    def __init__(self, base_axis: int):
        self.base_axis = base_axis

    def output_specs(self, inputs):
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

    def forward_arrays(self, xp, xs):
        x = xs[0].reshape(self.matrix_shape)
        y = xp.matmul(x, xs[1].reshape(self.w_shape[0], -1))
        if len(xs) == 3:
            y += xs[2].reshape(-1)
        return (y.reshape(self.x_shape[:self.base_axis] + self.w_shape[1:]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
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
           base_axis: int = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """Fully connected layer: the axes from ``base_axis`` on are multiplied with
    ``weight`` (shape ``(in, *out)``); output shape ``x.shape[:base_axis] + weight.shape[1:]``."""
    default_outputs("F.affine", n_outputs, outputs)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Affine(base_axis)(*inputs)


# -- the geometry shared by convolution and deconvolution ---------------------

_BLOCK_BYTES = 4 << 20  # the columns of one block of samples, to stay in the cache


class _Patches:
    """im2col for channel-first arrays of one shape (B, C, *size): the patch (zero-padded
    by ``pad``) under each position, as (B, group, C/group * prod(kernel), prod(positions)),
    a block of samples at a time in the column workspace.  Shapes and strides are worked
    out once, as they are the same at every call (a small network spends its time on
    them), and with padding so are the zero-bordered copy of the input and its patches'
    view.

    The positions are the output's, except with stride 1 where widening them to whole
    padded rows (all spatial axes but the first) costs at most a quarter more: then the
    patches at one kernel offset are one contiguous run of the padded input per sample
    and channel, copied at memory speed instead of output row by output row.  The extra
    positions hold other pixels: ``crop`` drops the products there (a copy of the
    product, of ``product_channels`` per position), and ``widen`` gives what is
    multiplied with the columns zeros there; wide rows are taken only where the columns
    are much larger than that product."""

    def __init__(self, shape, group: int, kernel, pad, stride, dilation, out_size,
                 product_channels: int):
        (b, c), size = shape[:2], shape[2:]
        padded_size = tuple(n + 2 * p for n, p in zip(size, pad))
        wide = tuple(out_size[:1]) + padded_size[1:]
        self.wide = (wide != tuple(out_size) and any(pad) and all(s == 1 for s in stride)
                     and 4 * math.prod(wide) <= 5 * math.prod(out_size)
                     and c // group * math.prod(kernel) >= 4 * product_channels)
        self.positions = wide if self.wide else tuple(out_size)
        self.out_size, self.batch = tuple(out_size), b
        self.kept = (slice(None), slice(None)) + tuple(slice(0, n) for n in out_size)
        self.padded_shape = (b, c) + padded_size if any(pad) else None
        # how far the last patches of the last image read past it (wide rows only)
        row = [math.prod(padded_size[i + 1:]) for i in range(len(size))]
        self.slack = sum((k - 1) * d * e for k, d, e in zip(kernel[1:], dilation[1:], row[1:]))
        self.inner = (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(pad, size))
        self.group_channels = c // group
        self.shape = (b, group, c // group) + tuple(kernel) + self.positions
        self.matrix_shape = (b, group, c // group * math.prod(kernel), math.prod(self.positions))
        self.sample_size = math.prod(self.shape[1:])  # elements of one sample's columns
        self.dilation, self.stride = dilation, stride
        self.strides_of: dict[tuple, tuple] = {}  # the input's strides -> the patches'
        self.padded_of: dict[tuple, tuple] = {}   # (xp, dtype) -> (padded input, patches)
        self.widened_of: dict[tuple, object] = {}  # (xp, dtype, channels) -> zero-bordered

    def _strides(self, strides: tuple) -> tuple:
        s_b, s_c, *s_space = strides
        return ((s_b, s_c * self.group_channels, s_c)
                + tuple(s * d for s, d in zip(s_space, self.dilation))
                + tuple(s * t for s, t in zip(s_space, self.stride)))

    def _view(self, xp, x):
        """The patches of ``x`` as a strided view (no copy)."""
        strides = self.strides_of.get(x.strides)
        if strides is None:
            strides = self.strides_of[x.strides] = self._strides(x.strides)
        return xp.lib.stride_tricks.as_strided(x, shape=self.shape, strides=strides)

    def _padded(self, xp, dtype) -> tuple:
        """The zero-bordered buffer the input is copied into, kept between calls (only its
        interior is ever written; zeros after it for what wide rows read past the end),
        and the view of its patches."""
        key = (xp, dtype)
        if key not in self.padded_of:
            size = math.prod(self.padded_shape)
            padded = xp.zeros(size + self.slack, dtype)[:size].reshape(self.padded_shape)
            self.padded_of[key] = padded, self._view(xp, padded)
        return self.padded_of[key]

    def blocks(self, xp, x):
        """The columns of ``x`` a block of samples at a time: pairs (samples, their columns
        as (n, group, C/group * K, prod(positions))), each block in the same workspace.
        On the CPU a block's columns fit in the cache, so the product that follows reads
        them from there and not from memory (a third of a 3x3 convolution's time); CuPy
        takes the whole batch at once."""
        if self.padded_shape is None:
            patches = self._view(xp, x)
        else:
            padded, patches = self._padded(xp, x.dtype)
            padded[self.inner] = x
        n = self.batch
        if xp is np:
            n = max(1, min(n, _BLOCK_BYTES // (self.sample_size * x.dtype.itemsize)))
        block = workspace(xp, (n,) + self.shape[1:], x.dtype)
        if n == self.batch:  # one block: no views of views (small networks feel them)
            block[...] = patches
            yield slice(None), block.reshape(self.matrix_shape)
            return
        for start in range(0, self.batch, n):
            samples = slice(start, min(start + n, self.batch))
            columns = block[:samples.stop - start]
            columns[...] = patches[samples]
            yield samples, columns.reshape((-1,) + self.matrix_shape[1:])

    def crop(self, xp, a):
        """Products over the positions, (B, ..., prod(positions)), as (B, channels,
        *out_size): with wide rows a contiguous copy without the extra positions."""
        if not self.wide:
            return a.reshape((self.batch, -1) + self.out_size)
        return xp.ascontiguousarray(a.reshape((self.batch, -1) + self.positions)[self.kept])

    def widen(self, xp, a):
        """(B, channels, *out_size), in any shape of that size, over the positions: with
        wide rows a copy that is zero at the extra positions (its buffer kept between
        calls, only the kept positions ever written)."""
        if not self.wide:
            return a
        a = a.reshape((self.batch, -1) + self.out_size)
        key = (xp, a.dtype, a.shape[1])
        if key not in self.widened_of:
            self.widened_of[key] = xp.zeros(a.shape[:2] + self.positions, a.dtype)
        widened = self.widened_of[key]
        widened[self.kept] = a
        return widened


def _windows(kernel, dilation, stride, out_size):
    """Each kernel offset with the window of the padded input it meets, a slice per
    spatial axis: where im2col reads from and col2im adds to."""
    for offset in itertools.product(*(range(k) for k in kernel)):
        yield offset, tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                            for o, d, s, n in zip(offset, dilation, stride, out_size))


class _ChannelMinorPatches:
    """im2col and col2im with the channel axis minor, for input (B, C, *size): columns
    (B * prod(out_size), prod(kernel) * C), gathered from a zero-padded channels-last copy.

    Their copies and sums move runs of C elements where the channel-first ones move
    output rows, which a stride leaves a few elements long; and the products over them
    are one matrix product for the whole batch, not one a sample."""

    def __init__(self, shape, kernel, pad, stride, dilation, out_size):
        (b, c), size = shape[:2], tuple(shape[2:])
        self.kernel, self.stride, self.dilation, self.out_size = kernel, stride, dilation, out_size
        self.padded_shape = (b,) + tuple(n + 2 * p for n, p in zip(size, pad)) + (c,)
        self.inner = (slice(None),) + tuple(slice(p, p + n) for p, n in zip(pad, size))
        self.to_last = (0, *range(2, len(shape)), 1)
        self.to_first = (0, len(shape) - 1, *range(1, len(shape) - 1))
        self.shape = (b,) + tuple(out_size) + tuple(kernel) + (c,)
        self.matrix_shape = (b * math.prod(out_size), math.prod(kernel) * c)

    def __call__(self, xp, x):
        """The columns of channel-first ``x``, in the workspace."""
        padded = xp.zeros(self.padded_shape, x.dtype)
        padded[self.inner] = x.transpose(self.to_last)
        s_b, *s_space, s_c = padded.strides
        strides = ((s_b,) + tuple(s * t for s, t in zip(s_space, self.stride))
                   + tuple(s * d for s, d in zip(s_space, self.dilation)) + (s_c,))
        columns = workspace(xp, self.shape, x.dtype)
        columns[...] = xp.lib.stride_tricks.as_strided(padded, shape=self.shape, strides=strides)
        return columns.reshape(self.matrix_shape)

    def add_to_image(self, xp, columns):
        """col2im: the channel-first (B, C, *size) sum of ``columns`` over kernel offsets."""
        columns = columns.reshape(self.shape)
        image = xp.zeros(self.padded_shape, columns.dtype)
        spatial = (slice(None),) * (1 + len(self.out_size))
        for offset, window in _windows(self.kernel, self.dilation, self.stride, self.out_size):
            image[(slice(None),) + window] += columns[spatial + offset]
        return xp.ascontiguousarray(image[self.inner].transpose(self.to_first))


class _Geometry:
    """One channel-first convolution of fixed shapes: input (B, C, *size), weight
    (OC, C/group, *kernel), output (B, OC, *out_size), by im2col and batched matmul.

    Its forward is a convolution's and its input gradient a deconvolution's forward.
    With stride 1 the input gradient is itself a convolution, of the output gradient with
    the flipped kernel; the columns of the output gradient then give both gradients."""

    def __init__(self, batch: int, channels: int, size, out_channels: int, kernel, pad, stride,
                 dilation, group: int, out_size):
        self.batch, self.channels, self.size = batch, channels, tuple(size)
        self.out_channels, self.kernel, self.out_size = out_channels, tuple(kernel), tuple(out_size)
        self.pad, self.stride, self.dilation, self.group = pad, stride, dilation, group
        self.x_shape = (batch, channels) + self.size
        self.w_shape = (out_channels, channels // group) + self.kernel
        self.pointwise = (all(k == 1 for k in kernel) and all(s == 1 for s in stride)
                          and not any(pad))
        self.unit_stride = all(s == 1 for s in stride)
        self.x_patches = _Patches(self.x_shape, group, kernel, pad, stride, dilation, out_size,
                                  out_channels)
        # A strided convolution over more channels than its output rows are long is
        # faster through channel-minor columns (see _ChannelMinorPatches).
        self.minor_patches = (_ChannelMinorPatches(self.x_shape, kernel, pad, stride, dilation,
                                                   out_size)
                              if not self.unit_stride and group == 1
                              and channels >= self.out_size[-1] else None)
        if self.unit_stride and not self.pointwise:
            # For stride 1 the input gradient is a convolution of gy padded by d (k - 1) - p;
            # a pad beyond the kernel's reach leaves border outputs that see only zeros:
            # they are cropped.
            gy_pads = tuple(d * (k - 1) - p for d, k, p in zip(dilation, kernel, pad))
            self.gy_crop = (Ellipsis,) + tuple(slice(max(-q, 0), n - max(-q, 0))
                                               for q, n in zip(gy_pads, self.out_size))
            cropped = tuple(n - 2 * max(-q, 0) for q, n in zip(gy_pads, self.out_size))
            self.gy_patches = _Patches((batch, out_channels) + cropped, group, kernel,
                                       tuple(max(q, 0) for q in gy_pads), stride, dilation,
                                       self.size, channels)

    def weight_matrix(self, w):
        """The weight as (group, OC/group, C/group * prod(kernel))."""
        return w.reshape(self.group, self.out_channels // self.group, -1)

    def column_blocks(self, xp, x):
        """The input patch under each position of ``x_patches``, a block of samples at a
        time: pairs (samples, (n, group, C/group * K, prod(positions))); the output's
        positions where it has no wide rows, and for a pointwise convolution the input
        itself, in one block."""
        b, c, g = self.batch, self.channels, self.group
        x = x.reshape(self.x_shape)
        if self.pointwise:
            return iter([(slice(None), x.reshape(b, g, c // g, -1))])
        return self.x_patches.blocks(xp, x)

    def output_grad_blocks(self, xp, gy):
        """For stride 1, the columns of gy padded by d (k - 1) - p, a block of samples at a
        time: pairs (samples, (n, group, OC/group * K, prod(positions of gy_patches))).
        The input gradient is their product with the flipped weight (a convolution), the
        weight gradient the batch sum of the input's product with them."""
        gy = gy.reshape((self.batch, self.out_channels) + self.out_size)[self.gy_crop]
        return self.gy_patches.blocks(xp, gy)

    def _products(self, xp, matrix, blocks, each=None):
        """``matrix`` (group, rows, K) times the columns of each of ``blocks``: (B, group,
        rows, positions).  ``each(samples, columns)``, where given, is called on every
        block too, for what else reads the columns while they are in the cache."""
        product = None
        for samples, columns in blocks:
            if len(columns) == self.batch:  # one block
                product = xp.matmul(matrix, columns)
            else:
                if product is None:
                    product = xp.empty((self.batch,) + matrix.shape[:2] + columns.shape[-1:],
                                       np.result_type(matrix.dtype, columns.dtype))
                xp.matmul(matrix, columns, out=product[samples])
            if each is not None:
                each(samples, columns)
        return product

    def flip(self, a):
        """(group * m, n, *kernel) as (group, n, m * K) with the kernel reversed: the weight
        (m = OC/group) in the layout of the stride-1 input gradient, and back for its gradient."""
        g, (m, n) = self.group, a.shape[:2]
        a = a.reshape((g, m // g, n) + self.kernel)[(Ellipsis,) + (slice(None, None, -1),)
                                                     * len(self.kernel)]
        return a.swapaxes(1, 2).reshape(g, n, -1)

    def add_columns_to_image(self, xp, columns):
        """col2im: the input gradient from that of the columns, summed over kernel offsets."""
        b, c = self.batch, self.channels
        columns = columns.reshape((b, c) + self.kernel + self.out_size)
        padded = tuple(n + 2 * p for n, p in zip(self.size, self.pad))
        image = xp.zeros((b, c) + padded, columns.dtype)
        for offset, window in _windows(self.kernel, self.dilation, self.stride, self.out_size):
            image[(Ellipsis,) + window] += columns[(slice(None), slice(None)) + offset]
        return image[(Ellipsis,) + tuple(slice(p, p + n) for p, n in zip(self.pad, self.size))]

    def channel_minor_weight(self, w):
        """The weight as (OC, prod(kernel) * C), the layout of channel-minor columns."""
        return w.transpose(0, *range(2, w.ndim), 1).reshape(self.out_channels, -1)

    def apply(self, xp, x, w):
        """The convolution of ``x`` with ``w``: (B, OC, *out_size)."""
        if self.minor_patches is not None:
            y = self.minor_patches(xp, x.reshape(self.x_shape)) @ self.channel_minor_weight(w).T
            y = y.reshape(self.batch, -1, self.out_channels).transpose(0, 2, 1)
            return xp.ascontiguousarray(y).reshape((self.batch, self.out_channels) + self.out_size)
        return self.x_patches.crop(xp, self._products(xp, self.weight_matrix(w),
                                                      self.column_blocks(xp, x)))

    def _grouped(self, gy):
        return gy.reshape(self.batch, self.group, self.out_channels // self.group, -1)

    def output_rows(self, gy):
        """gy (B, OC, *out_size) as rows (B * prod(out_size), OC): a channel-minor copy."""
        rows = gy.reshape(self.batch, self.out_channels, -1).transpose(0, 2, 1)
        return rows.reshape(-1, self.out_channels)

    def minor_weight_grad(self, xp, x, gy_rows):
        """The weight's gradient from the output gradient's rows: one product over the
        batch of channel-minor columns, as a (transposed) view of (OC, C, *kernel)."""
        gw = gy_rows.T @ self.minor_patches(xp, x.reshape(self.x_shape))
        gw = gw.reshape((self.out_channels,) + self.kernel + (self.channels,))
        return gw.transpose(0, gw.ndim - 1, *range(1, gw.ndim - 1))

    def minor_input_grad(self, xp, w, gy_rows):
        """The input's gradient from the output gradient's rows, by channel-minor col2im."""
        w_rows = self.channel_minor_weight(w)
        columns = workspace(xp, (gy_rows.shape[0], w_rows.shape[1]), gy_rows.dtype)
        xp.matmul(gy_rows, w_rows, out=columns)
        return self.minor_patches.add_to_image(xp, columns)

    def weight_grad(self, xp, x, gy):
        """The weight's gradient: by channel-minor columns, or per-sample products summed
        over the batch (no transposed copy of the columns)."""
        if self.minor_patches is not None:
            return self.minor_weight_grad(xp, x, self.output_rows(gy))
        gy = self._grouped(self.x_patches.widen(xp, gy))
        gw = functools.reduce(operator.add, (_batch_product_sum(gy[samples], columns)
                                             for samples, columns in self.column_blocks(xp, x)))
        return gw.reshape(self.w_shape)

    def input_grad(self, xp, w, gy):
        """The input's gradient (B, C, *size), by col2im, or for stride 1 as a convolution."""
        if self.minor_patches is not None:
            return self.minor_input_grad(xp, w, self.output_rows(gy))
        gy = self._grouped(gy)
        if self.unit_stride and not self.pointwise:
            gx = self._products(xp, self.flip(w), self.output_grad_blocks(xp, gy))
            return self.gy_patches.crop(xp, gx).reshape(self.x_shape)
        w_t = self.weight_matrix(w).swapaxes(-1, -2)
        if self.pointwise:
            return xp.matmul(w_t, gy).reshape(self.x_shape)
        columns = workspace(xp, (self.batch, self.group, w_t.shape[1], gy.shape[3]), gy.dtype)
        return self.add_columns_to_image(xp, xp.matmul(w_t, gy, out=columns))

    def grads(self, xp, x, w, gy, need_x: bool, need_w: bool):
        """Both gradients; for stride 1 from one pass over the columns of gy, each block
        giving its samples' share of both (no col2im, and no columns of x); with
        channel-minor columns from one copy of gy as rows.  Otherwise the weight's first:
        the input's reuses the workspace."""
        if need_x and need_w and self.unit_stride and not self.pointwise:
            b, c, g = self.batch, self.channels, self.group
            x = self.gy_patches.widen(xp, x).reshape(b, g, c // g, -1)
            gw_parts = []  # each block's share of the weight gradient

            def add_weight_grad(samples, columns):
                gw_parts.append(_batch_product_sum(x[samples], columns))

            gx = self._products(xp, self.flip(w), self.output_grad_blocks(xp, self._grouped(gy)),
                                add_weight_grad)
            gw = functools.reduce(operator.add, gw_parts)
            gw = self.flip(gw.reshape((c, self.out_channels // g) + self.kernel))
            gx = self.gy_patches.crop(xp, gx)
            return gx.reshape(self.x_shape), gw.reshape(self.w_shape)
        if need_x and need_w and self.minor_patches is not None:
            gy_rows = self.output_rows(gy)  # both take the output gradient as rows
            return (self.minor_input_grad(xp, w, gy_rows),
                    self.minor_weight_grad(xp, x, gy_rows))
        gw = self.weight_grad(xp, x, gy) if need_w else None
        gx = self.input_grad(xp, w, gy) if need_x else None
        return gx, gw


def _batch_product_sum(a, b):
    """The sum over samples of a @ b^T, for a (n, group, m, P) and b (n, group, k, P):
    (group, m, k), with the larger of m and k as the product's rows (BLAS runs that
    orientation faster, up to a third on these shapes)."""
    if a.shape[-2] >= b.shape[-2]:
        return (a @ b.swapaxes(-1, -2)).sum(axis=0)
    return (b @ a.swapaxes(-1, -2)).sum(axis=0).swapaxes(-1, -2)


def _output_size(fn: Function, shape, size, kernel, pad, stride, dilation) -> tuple[int, ...]:
    """A convolution's output size per spatial axis; raises where the kernel overhangs."""
    out = []
    for n, k, p, s, d in zip(size, kernel, pad, stride, dilation):
        span = d * (k - 1) + 1
        if span > n + 2 * p:
            raise fn.error(f"the kernel spans {span} pixels (dilation included) but the "
                           f"padded input has only {n + 2 * p} along an axis (input shape "
                           f"{shape}, pad {pad}); use a smaller kernel or more padding")
        out.append((n + 2 * p - span) // s + 1)
    return tuple(out)


class _Convolutional(Function):
    """What convolutions and deconvolutions share: the layout of input, output and weight
    (channels after ``base_axis`` or last), the window options and the bias."""

    channel_last = False
    grad_skips_inputs = (2,)  # the bias

    def _layout(self, inputs):
        """Checks the input and options; the batch, channels, spatial size and the weight's
        shape with its channel axes first."""
        x, w = inputs[0], inputs[1]
        axis = base_axis_of(self, self.base_axis, x.ndim)
        n = x.ndim - axis - 1
        where = "last" if self.channel_last else f"at axis {axis}"
        if n < 1:
            raise self.error(f"the input must have a channel axis ({where}) and at least one "
                             f"spatial axis after the sample axes (base_axis={axis}), got shape "
                             f"{x.shape}; reshape the input or lower base_axis")
        self.axis, self.spatial_ndim = axis, n
        if self.channel_last:
            channels, size = x.shape[-1], x.shape[axis:-1]
        else:
            channels, size = x.shape[axis], x.shape[axis + 1:]
        self.pad = int_tuple(self, "pad", self.pad, n, 0, 0)
        self.stride = int_tuple(self, "stride", self.stride, n, 1, 1)
        self.dilation = int_tuple(self, "dilation", self.dilation, n, 1, 1)
        if w.ndim != self.filter_ndim(n):
            raise self.error(f"weight must have shape {self.filter_shape_text()} for {n} spatial "
                             f"axes, got {w.shape}")
        self.w_shape = w.shape
        batch = int(np.prod(x.shape[:axis]))
        return batch, channels, size, self.filter_first(w.shape)

    def filter_shape_text(self) -> str:
        """The weight's shape, in words, for messages."""
        raise NotImplementedError

    def filter_ndim(self, n: int) -> int:
        """The weight's number of axes for ``n`` spatial axes."""
        return n + 2

    def filter_first(self, w_shape):
        """The weight's shape with its two channel axes first."""
        if self.channel_last:
            return (w_shape[0], w_shape[-1]) + w_shape[1:-1]
        return w_shape

    def _check_bias(self, inputs, channels: int) -> None:
        if len(inputs) == 3 and inputs[2].shape != (channels,):
            raise self.error(f"bias must have shape ({channels},), got {inputs[2].shape}")

    def _output(self, x_shape, channels: int, size) -> tuple[int, ...]:
        """The output's shape: the sample axes of ``x_shape``, then channels and ``size``."""
        return x_shape[:self.axis] + ((*size, channels) if self.channel_last
                                      else (channels, *size))

    def to_first(self, xp, a, batch: int):
        """An input-like array (samples, then channels and spatial axes) as (B, C, *spatial)."""
        a = a.reshape((batch,) + a.shape[self.axis:])
        return xp.moveaxis(a, -1, 1) if self.channel_last else a

    def from_first(self, xp, a, shape):
        """(B, C, *spatial) back in the layout of ``shape``."""
        if self.channel_last:
            a = xp.ascontiguousarray(xp.moveaxis(a, 1, -1))
        return a.reshape(shape)

    def weight(self, xp, w):
        """The weight with its channel axes first, in the geometry's (OC, C/group, *k) shape."""
        if self.channel_last:
            w = xp.moveaxis(w, -1, 1)
        return w.reshape(self.geometry.w_shape)

    def weight_back(self, xp, gw):
        """A gradient of the geometry's weight in the weight's own layout and shape."""
        if self.channel_last:
            gw = xp.ascontiguousarray(xp.moveaxis(gw, 1, -1))
        return gw.reshape(self.w_shape)

    def bias_grad(self, gy_first):
        """The bias gradient: the output gradient summed over all but the channel axis."""
        return gy_first.sum(axis=(0,) + tuple(range(2, gy_first.ndim)))


def _convolution_params(fn) -> Params:
    base_axis = fn.base_axis + fn.inputs[0].ndim if fn.base_axis < 0 else fn.base_axis
    return {"base_axis": int(base_axis), "pad": ints(fn.pad), "stride": ints(fn.stride),
            "dilation": ints(fn.dilation), "group": fn.group,
            "channel_last": bool(fn.channel_last)}


def _convolution(xs, p, n):
    return convolution(*xs, base_axis=p["base_axis"], pad=p["pad"], stride=p["stride"],
                       dilation=p["dilation"], group=p["group"],
                       channel_last=p["channel_last"])


class Convolution(_Convolutional):
    """N-D convolution (cross-correlation) of (..., C, *spatial) input, or (..., *spatial, C)
    with ``channel_last``, with weight (OC, C/group, *kernel) or (OC, *kernel, C/group)."""

    nnabla_spec = FunctionSpec("Convolution", "convolution_param",
                               ("base_axis", "pad", "stride", "dilation", "group", "channel_last"),
                               _convolution_params, _convolution)

    def __init__(self, base_axis: int, pad, stride, dilation, group: int, channel_last: bool):
        self.base_axis = base_axis
        self.pad = pad
        self.stride = stride
        self.dilation = dilation
        self.group = group
        self.channel_last = bool(channel_last)

    def filter_shape_text(self) -> str:
        return "(OC, *kernel, C/group)" if self.channel_last else "(OC, C/group, *kernel)"

    def set_group(self, channels: int, w_first) -> int:
        """The number of groups, checked against the channels and the weight."""
        g, out_channels = self.group, w_first[0]
        if (not isinstance(g, (int, np.integer)) or g < 1 or channels % g or out_channels % g
                or w_first[1] * g != channels):
            raise self.error(f"with group={g}, the input's {channels} channels and the weight's "
                             f"{out_channels} output channels must divide by group, and the "
                             f"weight's input-channel axis must be {channels}/{g}; got weight "
                             f"shape {self.w_shape}")
        return int(g)

    def output_specs(self, inputs):
        x = inputs[0]
        batch, channels, size, w_first = self._layout(inputs)
        group = self.set_group(channels, w_first)
        out_channels, kernel = w_first[0], w_first[2:]
        self._check_bias(inputs, out_channels)
        out_size = _output_size(self, x.shape, size, kernel, self.pad, self.stride,
                                self.dilation)
        self.geometry = _Geometry(batch, channels, size, out_channels, kernel, self.pad,
                                  self.stride, self.dilation, group, out_size)
        self.y_shape = self._output(x.shape, out_channels, out_size)
        self.x_shape = x.shape
        return [(self.y_shape, np.result_type(*(v.dtype for v in inputs)))]

    def forward_arrays(self, xp, xs):
        geo = self.geometry
        y = geo.apply(xp, self.to_first(xp, xs[0], geo.batch), self.weight(xp, xs[1]))
        if len(xs) == 3:
            y += xs[2].reshape((-1,) + (1,) * self.spatial_ndim)
        return (self.from_first(xp, y, self.y_shape),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        geo = self.geometry
        gy = self.to_first(xp, gys[0], geo.batch)
        gx, gw = geo.grads(xp, self.to_first(xp, xs[0], geo.batch), self.weight(xp, xs[1]), gy,
                           need_grads[0], need_grads[1])
        grads = [None if gx is None else self.from_first(xp, gx, self.x_shape),
                 None if gw is None else self.weight_back(xp, gw)]
        if len(xs) == 3:
            grads.append(self.bias_grad(gy) if need_grads[2] else None)
        return tuple(grads)

    backward_graph = bilinear_backward_graph  # its backward works on columns


def convolution(x: Variable, weight: Variable, bias: Variable | None = None, base_axis: int = 1,
                pad: Sequence[int] | None = None, stride: Sequence[int] | None = None,
                dilation: Sequence[int] | None = None, group: int = 1,
                channel_last: bool = False, n_outputs: int = -1, outputs=None) -> Variable:
    """N-D convolution of ``x`` (sample axes up to ``base_axis``, then C and the spatial
    axes; C last with ``channel_last``) with ``weight`` (OC, C/group, *kernel), or
    (OC, *kernel, C/group) with ``channel_last``, and an optional ``bias`` (OC,)."""
    default_outputs("F.convolution", n_outputs, outputs)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Convolution(base_axis, pad, stride, dilation, group, channel_last)(*inputs)


class _Depthwise:
    """The weight layout of the depthwise forms: (C * multiplier, *kernel) or (C, *kernel),
    one input channel per group, so the per-group input-channel axis is left out."""

    def filter_ndim(self, n: int) -> int:
        return n + 1

    def filter_first(self, w_shape):
        return (w_shape[0], 1) + w_shape[1:]


def _depthwise_params(last: str) -> Export:
    def export(fn) -> Params:
        params = _convolution_params(fn)
        del params["group"], params["channel_last"]
        return {**params, last: int(getattr(fn, last))}
    return export


class DepthwiseConvolution(_Depthwise, Convolution):
    """Each input channel convolved with ``multiplier`` kernels of its own: weight
    (C * multiplier, *kernel), output channel c * multiplier + j from input channel c."""

    nnabla_spec = FunctionSpec("DepthwiseConvolution", "depthwise_convolution_param",
                               ("base_axis", "pad", "stride", "dilation", "multiplier"),
                               _depthwise_params("multiplier"),
                               call("depthwise_convolution", "base_axis", "pad", "stride",
                                    "dilation", "multiplier"))

    def __init__(self, base_axis: int, pad, stride, dilation, multiplier: int):
        super().__init__(base_axis, pad, stride, dilation, 1, False)
        self.multiplier = multiplier

    def filter_shape_text(self) -> str:
        return "(C * multiplier, *kernel)"

    def set_group(self, channels: int, w_first) -> int:
        m = self.multiplier
        if not isinstance(m, (int, np.integer)) or m < 1 or w_first[0] != channels * m:
            raise self.error(f"the weight must have shape (C * multiplier, *kernel) = "
                             f"({channels} * {m}, ...) for an input of {channels} channels with "
                             f"multiplier={m} (an int >= 1), got {self.w_shape}")
        self.group = channels
        return channels


def depthwise_convolution(x: Variable, weight: Variable, bias: Variable | None = None,
                          base_axis: int = 1, pad: Sequence[int] | None = None,
                          stride: Sequence[int] | None = None,
                          dilation: Sequence[int] | None = None,
                          multiplier: int = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """Depthwise convolution: ``weight`` (C * multiplier, *kernel), ``bias`` (C * multiplier,)."""
    default_outputs("F.depthwise_convolution", n_outputs, outputs)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return DepthwiseConvolution(base_axis, pad, stride, dilation, multiplier)(*inputs)


def _deconvolution_params(fn) -> Params:
    return {**_convolution_params(fn), "output_padding": ints(fn.output_padding)}


class Deconvolution(_Convolutional):
    """Transposed convolution: the input gradient of the convolution that maps the output to
    the input.  Weight (C, OC/group, *kernel), or (C, *kernel, OC/group) with channel_last;
    output size s (n - 1) + d (k - 1) + 1 - 2 p + output_padding per spatial axis."""

    nnabla_spec = FunctionSpec("Deconvolution", "deconvolution_param",
                               ("base_axis", "pad", "stride", "dilation", "group", "channel_last",
                                "output_padding"), _deconvolution_params,
                               call("deconvolution", "base_axis", "pad", "stride", "dilation",
                                    "group", "channel_last", "output_padding"))

    def __init__(self, base_axis: int, pad, stride, dilation, group: int, channel_last: bool,
                 output_padding):
        self.base_axis = base_axis
        self.pad = pad
        self.stride = stride
        self.dilation = dilation
        self.group = group
        self.channel_last = bool(channel_last)
        self.output_padding = output_padding

    def filter_shape_text(self) -> str:
        return "(C, *kernel, OC/group)" if self.channel_last else "(C, OC/group, *kernel)"

    def set_group(self, channels: int, w_first) -> int:
        g = self.group
        if (not isinstance(g, (int, np.integer)) or g < 1 or channels % g
                or w_first[0] != channels):
            raise self.error(f"with group={g}, the input's {channels} channels must divide by "
                             f"group and equal the weight's first axis; got weight shape "
                             f"{self.w_shape}")
        return int(g)

    def output_specs(self, inputs):
        x = inputs[0]
        batch, channels, size, w_first = self._layout(inputs)
        group = self.set_group(channels, w_first)
        out_channels, kernel = w_first[1] * group, w_first[2:]
        self._check_bias(inputs, out_channels)
        self.output_padding = int_tuple(self, "output_padding", self.output_padding,
                                        self.spatial_ndim, 0, 0)
        if any(o >= s for o, s in zip(self.output_padding, self.stride)):
            raise self.error(f"output_padding must be smaller than the stride on every axis, got "
                             f"output_padding {self.output_padding} and stride {self.stride}")
        out_size = tuple(s * (n - 1) + d * (k - 1) + 1 - 2 * p + o for n, k, p, s, d, o in zip(
            size, kernel, self.pad, self.stride, self.dilation, self.output_padding))
        if min(out_size) < 1:
            raise self.error(f"the output would have size {out_size} for an input of shape "
                             f"{x.shape}, kernel {kernel}, pad {self.pad}, stride {self.stride} "
                             f"and dilation {self.dilation}; use less padding")
        # The convolution from this function's output back to its input.
        self.geometry = _Geometry(batch, out_channels, out_size, channels, kernel, self.pad,
                                  self.stride, self.dilation, group, size)
        self.y_shape = self._output(x.shape, out_channels, out_size)
        self.x_shape = x.shape
        return [(self.y_shape, np.result_type(*(v.dtype for v in inputs)))]

    def forward_arrays(self, xp, xs):
        geo = self.geometry
        y = geo.input_grad(xp, self.weight(xp, xs[1]), self.to_first(xp, xs[0], geo.batch))
        # col2im hands back the interior of its padded image: the output gets its own array.
        y = xp.ascontiguousarray(y)
        if len(xs) == 3:
            y += xs[2].reshape((-1,) + (1,) * self.spatial_ndim)
        return (self.from_first(xp, y, self.y_shape),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        geo = self.geometry
        gy = self.to_first(xp, gys[0], geo.batch)
        grads = [None, None]
        if need_grads[1]:
            x = self.to_first(xp, xs[0], geo.batch)
            grads[1] = self.weight_back(xp, geo.weight_grad(xp, gy, x))
        if need_grads[0]:
            grads[0] = self.from_first(xp, geo.apply(xp, gy, self.weight(xp, xs[1])),
                                       self.x_shape)
        if len(xs) == 3:
            grads.append(self.bias_grad(gy) if need_grads[2] else None)
        return tuple(grads)

    backward_graph = bilinear_backward_graph  # its backward works on columns


def deconvolution(x: Variable, weight: Variable, bias: Variable | None = None,
                  base_axis: int = 1, pad: Sequence[int] | None = None,
                  stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
                  group: int = 1, channel_last: bool = False,
                  output_padding: Sequence[int] | None = None, n_outputs: int = -1,
                  outputs=None) -> Variable:
    """N-D transposed convolution of ``x`` (C channels) with ``weight`` (C, OC/group, *kernel),
    or (C, *kernel, OC/group) with ``channel_last``, and an optional ``bias`` (OC,)."""
    default_outputs("F.deconvolution", n_outputs, outputs)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Deconvolution(base_axis, pad, stride, dilation, group, channel_last,
                         output_padding)(*inputs)


class DepthwiseDeconvolution(_Depthwise, Deconvolution):
    """The transpose of a depthwise convolution: weight (C, *kernel); each group of
    ``divisor`` input channels sums into one output channel."""

    nnabla_spec = FunctionSpec("DepthwiseDeconvolution", "depthwise_deconvolution_param",
                               ("base_axis", "pad", "stride", "dilation", "divisor"),
                               _depthwise_params("divisor"),
                               call("depthwise_deconvolution", "base_axis", "pad", "stride",
                                    "dilation", "divisor"))

    def __init__(self, base_axis: int, pad, stride, dilation, divisor: int):
        super().__init__(base_axis, pad, stride, dilation, 1, False, None)
        self.divisor = divisor

    def filter_shape_text(self) -> str:
        return "(C, *kernel)"

    def set_group(self, channels: int, w_first) -> int:
        d = self.divisor
        if (not isinstance(d, (int, np.integer)) or d < 1 or channels % d
                or w_first[0] != channels):
            raise self.error(f"the input's {channels} channels must divide by divisor={d} (an "
                             f"int >= 1) and the weight must have shape (C, *kernel) with "
                             f"C = {channels}, got {self.w_shape}")
        self.group = channels // d
        return self.group


def depthwise_deconvolution(x: Variable, weight: Variable, bias: Variable | None = None,
                            base_axis: int = 1, pad: Sequence[int] | None = None,
                            stride: Sequence[int] | None = None,
                            dilation: Sequence[int] | None = None,
                            divisor: int = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """Depthwise deconvolution: ``weight`` (C, *kernel), ``bias`` (C / divisor,)."""
    default_outputs("F.depthwise_deconvolution", n_outputs, outputs)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return DepthwiseDeconvolution(base_axis, pad, stride, dilation, divisor)(*inputs)


# fused_convolution's activations: the class and how many nonlinearity_args it takes
_NONLINEARITIES = {
    "identity": (None, 0), "relu": (ReLU, 0), "sigmoid": (Sigmoid, 0), "tanh": (Tanh, 0),
    "leaky_relu": (LeakyReLU, 1), "elu": (ELU, 1), "relu6": (ReLU6, 0),
}
_FUSED_ROLES = ("bias", "beta", "gamma", "mean", "variance", "z")  # the optional inputs, in order
_NORM_ROLES = ("beta", "gamma", "mean", "variance")


class _Shaped(NamedTuple):
    """What the stages' ``output_specs`` read of an intermediate result."""

    shape: tuple
    dtype: np.dtype
    parent: None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _fused_convolution_params(fn) -> Params:
    geometry = fn.conv.geometry
    pad = geometry.pad if fn.pad_given is None else fn.pad_given  # as given: F.pad's widths too
    return {"base_axis": int(fn.axis), "pad": ints(pad), "stride": ints(geometry.stride),
            "dilation": ints(geometry.dilation), "group": geometry.group,
            "channel_last": fn.channel_last, "decay_rate": fn.decay_rate, "eps": fn.eps,
            "batch_stat": fn.batch_stat, "nonlinearity": fn.nonlinearity,
            "nonlinearity_args": [float(a) for a in fn.nonlinearity_args],
            "pad_mode": fn.pad_mode, "constant_value": fn.constant_value}


def _fused_convolution(xs, p, n):
    """The inputs a file lists are those given: x, weight, then bias (one axis) or the
    four statistics' parameters, then z."""
    x, weight, *rest = xs
    bias = rest.pop(0) if rest and rest[0].ndim == 1 else None
    norm = rest[:4] if len(rest) >= 4 else [None] * 4
    z = rest[-1] if len(rest) in (1, 5) else None
    return fused_convolution(x, weight, bias, *norm, z, p["base_axis"], p["pad"], p["stride"],
                             p["dilation"], p["group"], p["channel_last"], p["decay_rate"],
                             p["eps"], p["batch_stat"], p["nonlinearity"],
                             p["nonlinearity_args"], p["pad_mode"], p["constant_value"])


class FusedConvolution(Function):
    """nonlinearity(batch_normalization(convolution(pad(x), weight, bias)) + z) as one
    function, as nnabla's: the stages are dpnb's own functions run on arrays.  Backward
    computes them again from the inputs (the batch statistics without folding them into
    the running ones a second time) and goes back through them, so that forward keeps
    nothing but the output."""

    nnabla_spec = FunctionSpec("FusedConvolution", "fused_convolution_param",
                               ("base_axis", "pad", "stride", "dilation", "group",
                                "channel_last", "decay_rate", "eps", "batch_stat",
                                "nonlinearity", "nonlinearity_args", "pad_mode",
                                "constant_value"),
                               _fused_convolution_params, _fused_convolution)

    def __init__(self, roles: Sequence[str], base_axis: int, pad, stride, dilation, group: int,
                 channel_last: bool, decay_rate: float, eps: float, batch_stat: bool,
                 nonlinearity: str, nonlinearity_args: Sequence[float], pad_mode: str,
                 constant_value: float):
        self.roles = tuple(roles)  # which of _FUSED_ROLES follow x and weight in the inputs
        self.base_axis, self.pad_given, self.stride = base_axis, pad, stride
        self.dilation, self.group, self.channel_last = dilation, group, bool(channel_last)
        self.decay_rate, self.eps, self.batch_stat = float(decay_rate), float(eps), bool(batch_stat)
        self.nonlinearity, self.nonlinearity_args = nonlinearity, list(nonlinearity_args)
        self.pad_mode, self.constant_value = pad_mode, float(constant_value)
        if self.batch_stat and "mean" in self.roles:
            self.updated_inputs = (2 + self.roles.index("mean"), 2 + self.roles.index("variance"))
        activation, _ = _NONLINEARITIES[nonlinearity]
        self.activation = None if activation is None else activation(*self.nonlinearity_args)

    def output_specs(self, inputs):
        x, weight, given = inputs[0], inputs[1], dict(zip(self.roles, inputs[2:]))
        self.axis = base_axis_of(self, self.base_axis, x.ndim)
        self.widths, self.conv_pad = _fused_pad(self, self.pad_given, x.ndim - self.axis - 1,
                                                self.channel_last, self.pad_mode,
                                                self.constant_value)
        self.padder = (None if self.widths is None
                       else Pad(self.widths, self.pad_mode, self.constant_value))
        h = x if self.padder is None else _Shaped(*self.padder.output_specs([x])[0])
        self.conv = Convolution(self.base_axis, self.conv_pad, self.stride, self.dilation,
                                self.group, self.channel_last)
        bias = [given["bias"]] if "bias" in given else []
        h = _Shaped(*self.conv.output_specs([h, weight, *bias])[0])
        self.norm = None
        if "beta" in given:
            channel = h.ndim - 1 if self.channel_last else self.axis
            self.norm = BatchNormalization(_NORM_ROLES, (channel,), self.decay_rate, self.eps,
                                           self.batch_stat, False)
            # as nnabla's, the running statistics may be any variables (a test's identities)
            h = _Shaped(*self.norm.output_specs(
                [h, *(_Shaped(given[r].shape, given[r].dtype) for r in _NORM_ROLES)])[0])
        if "z" in given and given["z"].shape != h.shape:
            raise self.error(f"z must have the convolution's output shape {h.shape} (the "
                             f"residual added before the nonlinearity), got {given['z'].shape}")
        return [(h.shape, h.dtype)]

    def _stages(self, xp, xs, update: bool) -> tuple:
        """(padded x, convolution, normalization, sum with z, output) of ``xs``; with
        ``update``, batch statistics fold into the running ones, as forward does."""
        x, weight, given = xs[0], xs[1], dict(zip(self.roles, xs[2:]))
        padded = x if self.padder is None else self.padder.forward_arrays(xp, [x])[0]
        bias = [given["bias"]] if "bias" in given else []
        convolved = self.conv.forward_arrays(xp, [padded, weight, *bias])[0]
        normalized = convolved
        if self.norm is not None:
            # the running statistics' variables, which batch normalization updates
            self.norm.inputs = [None, *(self.inputs[2 + self.roles.index(r)]
                                        for r in _NORM_ROLES)] if update else []
            normalized = self.norm.forward_arrays(
                xp, [convolved, *(given[r] for r in _NORM_ROLES)])[0]
        summed = normalized + given["z"] if "z" in given else normalized
        y = summed if self.activation is None else self.activation.forward_arrays(xp, [summed])[0]
        return padded, convolved, normalized, summed, y

    def forward_arrays(self, xp, xs):
        return (self._stages(xp, xs, update=True)[-1],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        padded, convolved, normalized, summed, y = self._stages(xp, xs, update=False)
        need = dict(zip(("x", "weight", *self.roles), need_grads))
        grads = {}
        g = gys[0]
        if self.activation is not None:
            g = self.activation.backward_arrays(xp, [summed], [y], [g], [True])[0]
        if need.get("z"):
            grads["z"] = g
        through_conv = need["x"] or need["weight"] or need.get("bias", False)
        if self.norm is not None:
            given = dict(zip(self.roles, xs[2:]))
            norm_grads = self.norm.backward_arrays(
                xp, [convolved, *(given[r] for r in _NORM_ROLES)], [normalized], [g],
                [through_conv, *(need[r] for r in _NORM_ROLES)])
            g = norm_grads[0]
            grads.update(zip(_NORM_ROLES, norm_grads[1:]))
        if through_conv:
            bias = [xs[2]] if "bias" in self.roles else []
            conv_grads = self.conv.backward_arrays(
                xp, [padded, xs[1], *bias], None, [g],
                [need["x"], need["weight"], *([need["bias"]] if bias else [])])
            grads["weight"] = conv_grads[1]
            if bias:
                grads["bias"] = conv_grads[2]
            g = conv_grads[0]
            if need["x"]:
                grads["x"] = g if self.padder is None else self.padder.backward_arrays(
                    xp, [xs[0]], None, [g], [True])[0]
        return tuple(grads.get(name) for name in ("x", "weight", *self.roles))

    def composite(self, F, xs):
        """What it computes, as a graph of functions (its graph backward differentiates
        it); batch statistics as batch normalization's composite computes them, without
        folding them into the running ones."""
        x, weight, given = xs[0], xs[1], dict(zip(self.roles, xs[2:]))
        h = x if self.widths is None else F.pad(x, self.widths, self.pad_mode,
                                                 self.constant_value)
        h = F.convolution(h, weight, given.get("bias"), self.base_axis, self.conv_pad,
                          self.stride, self.dilation, self.group, self.channel_last)
        if self.norm is not None:
            h = self.norm.composite(F, [h, *(given[r] for r in _NORM_ROLES)])[0]
        if "z" in given:
            h = h + given["z"]
        activation = _NONLINEARITIES[self.nonlinearity][0]
        return h if activation is None else activation(*self.nonlinearity_args)(h)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its composite differentiated; the running statistics get none, as in backward."""
        need = [need and role not in ("mean", "variance")
                for need, role in zip(need_grads, ("x", "weight", *self.roles))]
        return composite_backward_graph(self, F, xs, ys, gys, need)


def _fused_pad(fn: Function, pad, n: int, channel_last: bool, pad_mode: str,
               constant_value: float):
    """(F.pad's widths or None, the convolution's own pad): a pad of one entry per
    spatial axis is the convolution's where it pads with zeros, else (and a pad of two
    entries per axis always) F.pad's widths, as in nnabla."""
    if pad is None:
        return None, None
    given = tuple(pad) if isinstance(pad, (tuple, list)) else (pad,)
    if len(given) == n and pad_mode == "constant" and constant_value == 0:
        return None, given
    if len(given) == n:
        widths = tuple(w for p in given for w in (p, p))
    elif len(given) == 2 * n:
        widths = given
    else:
        raise fn.error(f"pad must have {n} entries (one per spatial axis) or {2 * n} (before "
                       f"and after each), got {pad!r}")
    return (widths + (0, 0) if channel_last else widths), None


def fused_convolution(x: Variable, weight: Variable, bias: Variable | None = None,
                      beta: Variable | None = None, gamma: Variable | None = None,
                      mean: Variable | None = None, variance: Variable | None = None,
                      z: Variable | None = None, base_axis: int = 1,
                      pad: Sequence[int] | None = None, stride: Sequence[int] | None = None,
                      dilation: Sequence[int] | None = None, group: int = 1,
                      channel_last: bool = False, decay_rate: float = 0.9, eps: float = 1e-05,
                      batch_stat: bool = True, nonlinearity: str = "relu",
                      nonlinearity_args: Sequence[float] = [], pad_mode: str = "constant",
                      constant_value: float = 0, n_outputs: int = -1,
                      outputs=None) -> Variable:
    """nonlinearity(batch_normalization(convolution(pad(x), weight, bias)) + z), one
    function as nnabla's: the batch normalization (beta, gamma, mean and variance
    together, over the channel axis; excludes ``bias``) and the residual ``z`` are
    optional; the nonlinearity is identity, relu, sigmoid, tanh, leaky_relu [alpha],
    elu [alpha] or relu6 with its ``nonlinearity_args``."""
    owner = "F.fused_convolution"
    default_outputs(owner, n_outputs, outputs)
    norm = (beta, gamma, mean, variance)
    if any(v is not None for v in norm) and not all(v is not None for v in norm):
        raise argument_error(owner, "batch normalization needs beta, gamma, mean and variance "
                                    "together; give all four or none")
    if bias is not None and beta is not None:
        raise argument_error(owner, "a convolution bias and a batch normalization cannot be "
                                    "combined (the normalization removes the bias); drop bias")
    if nonlinearity not in _NONLINEARITIES:
        raise argument_error(owner, f"nonlinearity must be one of {', '.join(_NONLINEARITIES)}, "
                                    f"got {nonlinearity!r}")
    arity = _NONLINEARITIES[nonlinearity][1]
    if len(list(nonlinearity_args)) != arity:
        raise argument_error(owner, f"nonlinearity {nonlinearity!r} takes {arity} "
                                    f"nonlinearity_args, got {list(nonlinearity_args)!r}")
    given = dict(zip(_FUSED_ROLES, (bias, *norm, z)))
    roles = [role for role, v in given.items() if v is not None]
    return FusedConvolution(roles, base_axis, pad, stride, dilation, group, channel_last,
                            decay_rate, eps, batch_stat, nonlinearity, nonlinearity_args,
                            pad_mode, constant_value)(x, weight, *(given[r] for r in roles))


def _pairs(owner: Function, name: str, value, minimum: int) -> tuple[int, int]:
    """An int or two ints (vertical, horizontal) >= ``minimum``."""
    given = tuple(value) if isinstance(value, (tuple, list)) else (value,) * 2
    return int_tuple(owner, name, given, 2, 0, minimum)


def _patch_correlation_params(fn) -> Params:
    """nnabla's PatchCorrelation is the channel_last form (its F transposes the others)."""
    if not fn.channel_last:
        raise DpnbError("PatchCorrelation with channel_last=False cannot be written in "
                        "nnabla's format, whose PatchCorrelation takes NHWC arrays (nnabla "
                        "writes transposes around it); transpose x1 and x2 to NHWC and pass "
                        "channel_last=True")
    return plain({name: getattr(fn, name)
                  for name in ("patch", "shift", "patch_step", "shift_step", "padding")})


class PatchCorrelation(Function):
    """For each patch position of ``x1`` (N, C, H, W; NHWC with ``channel_last``) and each
    shift, the sum over channels and the patch of x1 times x2 at the shifted place, both
    zero-padded: shape (N, Cy, Cx, Ho, Wo), or (N, Ho, Wo, Cy, Cx)."""

    nnabla_spec = FunctionSpec("PatchCorrelation", "patch_correlation_param",
                               ("patch", "shift", "patch_step", "shift_step", "padding"),
                               _patch_correlation_params,
                               lambda xs, p, n: patch_correlation(
                                   *xs, p["patch"], p["shift"], p["patch_step"], p["shift_step"],
                                   p["padding"], channel_last=True))

    def __init__(self, patch, shift, patch_step, shift_step, padding, channel_last: bool):
        self.options = (patch, shift, patch_step, shift_step, padding)
        self.channel_last = bool(channel_last)

    def output_specs(self, inputs):
        x1, x2 = inputs
        if x1.ndim != 4 or x1.shape != x2.shape:
            raise self.error(f"x1 and x2 must be 4-D arrays of one shape ((N, C, H, W), or "
                             f"(N, H, W, C) with channel_last), got {x1.shape} and {x2.shape}")
        patch, shift, patch_step, shift_step, padding = self.options
        self.patch = _pairs(self, "patch", patch, 1)
        self.shift = _pairs(self, "shift", shift, 0)
        self.patch_step = _pairs(self, "patch_step", patch_step, 1)
        self.shift_step = _pairs(self, "shift_step", shift_step, 1)
        given = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,)
        if len(given) == 1:
            given *= 4
        elif len(given) == 2:
            given = (given[0], given[0], given[1], given[1])
        self.padding = int_tuple(self, "padding", given, 4, 0, 0)
        self.size = x1.shape[1:3] if self.channel_last else x1.shape[2:]
        top, bottom, left, right = self.padding
        self.padded = (self.size[0] + top + bottom, self.size[1] + left + right)
        self.out = tuple((p - k) // s + 1 for p, k, s in zip(self.padded, self.patch,
                                                             self.patch_step))
        if min(self.out) < 1:
            raise self.error(f"the patch {self.patch} is larger than the padded input "
                             f"{self.padded}; use a smaller patch or more padding")
        self.shifts = [range(-s, s + 1, step) for s, step in zip(self.shift, self.shift_step)]
        counts = tuple(len(r) for r in self.shifts)
        n = x1.shape[0]
        shape = (n,) + self.out + counts if self.channel_last else (n,) + counts + self.out
        return [(shape, x1.dtype)]

    def _padded(self, xp, x, margin: tuple[int, int]):
        """``x`` (channel-first) zero-padded by ``padding``, plus ``margin`` on each side."""
        top, _, left, _ = self.padding
        (my, mx), (h, w) = margin, self.size
        out = xp.zeros(x.shape[:2] + (self.padded[0] + 2 * my, self.padded[1] + 2 * mx), x.dtype)
        out[:, :, my + top:my + top + h, mx + left:mx + left + w] = x
        return out

    def _windows(self):
        """Each shift's place in the output and its view into x2's padded array, and the
        views of the patch offsets into an image of patch positions."""
        (sy, sx), (hp, wp) = self.shift, self.padded
        shifted = [((iy, ix), (Ellipsis, slice(sy + dy, sy + dy + hp),
                               slice(sx + dx, sx + dx + wp)))
                   for iy, dy in enumerate(self.shifts[0])
                   for ix, dx in enumerate(self.shifts[1])]
        (ho, wo), (ty, tx) = self.out, self.patch_step
        offsets = [(Ellipsis, slice(ky, ky + ty * (ho - 1) + 1, ty),
                    slice(kx, kx + tx * (wo - 1) + 1, tx))
                   for ky in range(self.patch[0]) for kx in range(self.patch[1])]
        return shifted, offsets

    def _first(self, xp, x):
        return xp.moveaxis(x, -1, 1) if self.channel_last else x

    def forward_arrays(self, xp, xs):
        x1 = self._padded(xp, self._first(xp, xs[0]), (0, 0))
        x2 = self._padded(xp, self._first(xp, xs[1]), self.shift)
        shifted, offsets = self._windows()
        counts = tuple(len(r) for r in self.shifts)
        y = xp.zeros((x1.shape[0],) + counts + self.out, x1.dtype)
        for (iy, ix), window in shifted:
            product = (x1 * x2[window]).sum(axis=1)
            for offset in offsets:
                y[:, iy, ix] += product[offset]
        return (xp.ascontiguousarray(y.transpose(0, 3, 4, 1, 2)) if self.channel_last else y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = gys[0].transpose(0, 3, 4, 1, 2) if self.channel_last else gys[0]
        x1 = self._padded(xp, self._first(xp, xs[0]), (0, 0))
        x2 = self._padded(xp, self._first(xp, xs[1]), self.shift)
        g1, g2 = xp.zeros_like(x1), xp.zeros_like(x2)
        shifted, offsets = self._windows()
        spread = xp.empty((x1.shape[0],) + self.padded, x1.dtype)
        for (iy, ix), window in shifted:
            spread[...] = 0
            for offset in offsets:
                spread[offset] += g[:, iy, ix]
            g1 += spread[:, None] * x2[window]
            g2[window] += spread[:, None] * x1
        top, _, left, _ = self.padding
        (sy, sx), (h, w) = self.shift, self.size
        g1 = g1[:, :, top:top + h, left:left + w]
        g2 = g2[:, :, sy + top:sy + top + h, sx + left:sx + left + w]
        if self.channel_last:
            g1, g2 = xp.moveaxis(g1, 1, -1), xp.moveaxis(g2, 1, -1)
        return tuple(xp.ascontiguousarray(gx) if need else None
                     for gx, need in zip((g1, g2), need_grads))

    backward_graph = bilinear_backward_graph  # bilinear in x1 and x2


def patch_correlation(x1: Variable, x2: Variable, patch: int | Sequence[int] = (1, 1),
                      shift: int | Sequence[int] = (0, 0),
                      patch_step: int | Sequence[int] = (1, 1),
                      shift_step: int | Sequence[int] = (1, 1),
                      padding: int | Sequence[int] = (0, 0, 0, 0),
                      channel_last: bool = False) -> Variable:
    """The correlation of each ``patch`` of ``x1`` with the patches of ``x2`` shifted by up
    to ``shift`` in steps of ``shift_step`` (FlowNet's correlation layer), patches every
    ``patch_step``, inputs zero-padded by ``padding`` (top, bottom, left, right; or two
    values or one)."""
    return PatchCorrelation(patch, shift, patch_step, shift_step, padding, channel_last)(x1, x2)
