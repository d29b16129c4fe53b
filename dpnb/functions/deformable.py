"""Convolutions whose sampling grid is an input: deformable convolution (DCN, with the
modulation mask of DCNv2), a convolution of x bilinearly sampled at the kernel's
positions moved by learned offsets, and adaptive separable convolution, a per-pixel
product of a vertical and a horizontal 1-D kernel.  Both are 2-D and channel-first, as
in nnabla.  Deformable convolution is a deformable im2col (a row gather of the four
bilinear corners) followed by the GEMM of dpnb's convolution."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable
from .base import (add_at, argument_error, base_axis_of, default_outputs, int_tuple,
                   workspace)
from .graph_module import composite_backward_graph
from .specs import FunctionSpec, Params, ints, without_params

__all__ = ["deformable_convolution", "adaptive_separable_convolution"]


# -- where the kernel samples --------------------------------------------------------

class _Grid:
    """The sampling geometry of one deformable convolution: input (B, C, H, W) split into
    ``dg`` deformable groups, kernel (Kh, Kw), output (Ho, Wo).  The samples are taken
    from x zero-padded by one pixel and laid out channel-last, (B * dg * (H+2) * (W+2),
    C/dg), so that each bilinear corner is one row and every corner of a sample inside
    (-1, H) x (-1, W) lies in the padded image."""

    def __init__(self, batch, channels, size, dg, kernel, pad, stride, dilation, out_size):
        self.batch, self.channels, self.dg = batch, channels, dg
        (self.height, self.width), (self.kh, self.kw) = size, kernel
        self.out_size, self.stride = out_size, stride
        self.k, self.p = self.kh * self.kw, out_size[0] * out_size[1]
        self.padded = (self.height + 2, self.width + 2)
        # the rows of the four corners after the top-left one's
        self.shifts = (0, 1, self.padded[1], self.padded[1] + 1)
        ho, wo, i, j = np.meshgrid(np.arange(out_size[0]), np.arange(out_size[1]),
                                   np.arange(self.kh), np.arange(self.kw), indexing="ij")
        # the undeformed positions, (2, P, K): output position major, kernel position minor
        self.base = np.stack([(ho * stride[0] - pad[0] + i * dilation[0]).reshape(self.p, self.k),
                              (wo * stride[1] - pad[1] + j * dilation[1]).reshape(self.p, self.k)])
        self.reach = tuple(slice(None, (n - 1) * s + 1, s) for n, s in zip(out_size, stride))

    def at_outputs(self, xp, a, per_position: int):
        """An offset- or mask-like array (B, dg * K * per_position, H, W) read where the
        outputs' windows start, as (per_position, B, dg, P, K)."""
        a = a.reshape((self.batch, self.dg, self.k, per_position, self.height, self.width))
        a = a[(Ellipsis,) + self.reach]
        return a.transpose(3, 0, 1, 4, 5, 2).reshape(per_position, self.batch, self.dg,
                                                     self.p, self.k)

    def to_inputs(self, xp, g, per_position: int, dtype):
        """The transpose of ``at_outputs``: (per_position, B, dg, P, K) placed back in an
        array of the offset's or mask's shape, zero where no window starts."""
        out = xp.zeros((self.batch, self.dg, self.k, per_position, self.height, self.width),
                       dtype)
        g = g.reshape((per_position, self.batch, self.dg) + self.out_size + (self.k,))
        out[(Ellipsis,) + self.reach] = g.transpose(1, 2, 5, 0, 3, 4)
        return out.reshape(self.batch, -1, self.height, self.width)

    def positions(self, xp, offset):
        """The sampling positions (h, w), each (B, dg, P, K)."""
        moved = self.at_outputs(xp, offset, 2) + xp.asarray(self.base[:, None, None],
                                                            offset.dtype)
        return moved[0], moved[1]

    def top_left(self, xp, h, w):
        """The rows of the samples' top-left bilinear corners in the padded channel-last
        image, (B * dg * P * K,); the other corners lie ``shifts`` rows further.  A sample
        outside the image reads any row (its weights are 0)."""
        hp, wp = self.padded
        top = xp.clip(xp.floor(h), -1, self.height - 1).astype(np.int64) + 1
        left = xp.clip(xp.floor(w), -1, self.width - 1).astype(np.int64) + 1
        image = xp.arange(self.batch * self.dg).reshape(self.batch, self.dg, 1, 1) * (hp * wp)
        return (image + top * wp + left).reshape(-1)

    def rows(self, xp, h, w):
        """The rows of the four bilinear corners, (4, B * dg * P * K)."""
        first = self.top_left(xp, h, w)
        return xp.stack([first + shift for shift in self.shifts])

    def image_rows(self, xp, x, dtype):
        """x (B, C, H, W) as the padded channel-last rows the corners are read from."""
        hp, wp = self.padded
        cdg = self.channels // self.dg
        rows = xp.zeros((self.batch, self.dg, hp, wp, cdg), dtype)
        rows[:, :, 1:-1, 1:-1] = x.reshape(self.batch, self.dg, cdg, self.height,
                                           self.width).transpose(0, 1, 3, 4, 2)
        return rows.reshape(-1, cdg)

    def image_back(self, rows):
        """The transpose of ``image_rows``: padded rows back to (B, C, H, W)."""
        hp, wp = self.padded
        rows = rows.reshape(self.batch, self.dg, hp, wp, -1)[:, :, 1:-1, 1:-1]
        return rows.transpose(0, 1, 4, 2, 3).reshape(self.batch, self.channels, self.height,
                                                     self.width)


class _Bilinear:
    """The bilinear weights of the four corners of samples at (h, w), each (B, dg, P, K),
    zero for a sample outside (-1, H) x (-1, W) (nnabla reads zeros there), and their
    derivatives along h and along w."""

    def __init__(self, xp, grid: _Grid, h, w):
        inside = (h > -1) & (w > -1) & (h < grid.height) & (w < grid.width)
        self.inside = inside.astype(h.dtype)
        self.lh, self.lw = h - xp.floor(h), w - xp.floor(w)

    def weights(self, scale):
        """The corners' weights times ``scale`` (the mask): top-left, top-right,
        bottom-left, bottom-right."""
        lh, lw, a = self.lh, self.lw, self.inside * scale
        return ((1 - lh) * (1 - lw) * a, (1 - lh) * lw * a, lh * (1 - lw) * a, lh * lw * a)

    def along_h(self):
        lw, a = self.lw, self.inside
        return (-(1 - lw) * a, -lw * a, (1 - lw) * a, lw * a)

    def along_w(self):
        lh, a = self.lh, self.inside
        return (-(1 - lh) * a, (1 - lh) * a, -lh * a, lh * a)


class _CornerRows(Function):
    """The rows of the bilinear corners of the samples and the whole parts of their
    positions (h and w floored, (B, dg, P, K)), as constants of the offsets (no
    gradient): a part of deformable convolution's graph form."""

    no_nnabla_spec = "a part of deformable convolution's graph backward"
    differentiable = False

    def __init__(self, grid: _Grid):
        self.grid = grid

    def output_specs(self, inputs):
        grid = self.grid
        return [((4, grid.batch * grid.dg * grid.p * grid.k), np.int64),
                *[((grid.batch, grid.dg, grid.p, grid.k), inputs[0].dtype)] * 2]

    def forward_arrays(self, xp, xs):
        h, w = self.grid.positions(xp, xs[0])
        return self.grid.rows(xp, h, w), xp.floor(h), xp.floor(w)


def _einsum(xp, spec, a, b, out):
    """``einsum(spec, a, b)``, into ``out`` where given (CuPy's einsum has no ``out``)."""
    if xp is np:
        return np.einsum(spec, a, b, out=out)
    if out is None:
        return xp.einsum(spec, a, b)
    out[...] = xp.einsum(spec, a, b)
    return out


# -- deformable convolution ------------------------------------------------------------

def _deformable_params(fn) -> Params:
    return {"base_axis": int(fn.axis), "pad": ints(fn.pad), "stride": ints(fn.stride),
            "dilation": ints(fn.dilation), "group": int(fn.group),
            "deformable_group": int(fn.deformable_group), "channel_last": bool(fn.channel_last)}


def _deformable_build(xs, p, n):
    mask = xs[3] if len(xs) == 5 or (len(xs) == 4 and xs[3].ndim != 1) else None
    bias = xs[-1] if len(xs) == 5 or (len(xs) == 4 and mask is None) else None
    return deformable_convolution(xs[0], xs[1], xs[2], mask, bias, p["base_axis"], p["pad"],
                                  p["stride"], p["dilation"], p["group"],
                                  p["deformable_group"], p["channel_last"])


class DeformableConvolution(Function):
    """2-D convolution of x sampled bilinearly at the kernel's positions moved by
    ``offset`` (B, dg * Kh * Kw * 2, H, W: per deformable group and kernel position the
    pair (dy, dx)), each sample scaled by ``mask`` (B, dg * Kh * Kw, H, W) where given;
    both are read at the input pixel where each output's window starts."""

    nnabla_spec = FunctionSpec("DeformableConvolution", "deformable_convolution_param",
                               ("base_axis", "pad", "stride", "dilation", "group",
                                "deformable_group", "channel_last"),
                               _deformable_params, _deformable_build)

    def __init__(self, base_axis: int, pad, stride, dilation, group: int, deformable_group: int,
                 channel_last: bool):
        self.base_axis, self.pad, self.stride, self.dilation = base_axis, pad, stride, dilation
        self.group, self.deformable_group = group, deformable_group
        self.channel_last = channel_last

    def _roles(self, inputs):
        """Whether a mask and a bias are given: a fourth input of one axis is the bias."""
        n = len(inputs)
        if not 3 <= n <= 5:
            raise self.error(f"takes x, weight, offset, then mask and bias if given: 3 to 5 "
                             f"inputs, got {n}")
        self.has_mask = n == 5 or (n == 4 and inputs[3].ndim != 1)
        self.has_bias = n == 5 or (n == 4 and not self.has_mask)
        self.grad_skips_inputs = (n - 1,) if self.has_bias else ()

    def _check_counts(self, channels: int, out_channels: int, w_channels: int) -> None:
        g, dg = self.group, self.deformable_group
        for name, value in (("group", g), ("deformable_group", dg)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise self.error(f"{name} must be an int >= 1, got {value!r}")
        if channels % g or out_channels % g or w_channels * g != channels:
            raise self.error(f"with group={g}, the input's {channels} channels and the weight's "
                             f"{out_channels} output channels must divide by group and the "
                             f"weight's second axis must be {channels}/{g}, got {w_channels}")
        if channels % dg or out_channels % dg:
            raise self.error(f"the input's {channels} channels and the {out_channels} output "
                             f"channels must divide by deformable_group={dg}, as in nnabla")

    def output_specs(self, inputs):
        self._roles(inputs)
        x, w, offset = inputs[:3]
        if self.channel_last:
            raise self.error("channel_last=True is not supported, as in nnabla (no backend has "
                             "it); transpose x to channel-first (B, C, H, W)")
        self.axis = axis = base_axis_of(self, self.base_axis, x.ndim)
        if x.ndim - axis - 1 != 2:
            raise self.error(f"only 2-D deformable convolution exists, as in nnabla: x must have "
                             f"a channel axis and 2 spatial axes after base_axis={axis}, got "
                             f"shape {x.shape}")
        if w.ndim != 4:
            raise self.error(f"weight must have shape (OC, C/group, Kh, Kw), got {w.shape}")
        self.pad = int_tuple(self, "pad", self.pad, 2, 0, 0)
        self.stride = int_tuple(self, "stride", self.stride, 2, 1, 1)
        self.dilation = int_tuple(self, "dilation", self.dilation, 2, 1, 1)
        channels, size = x.shape[axis], x.shape[axis + 1:]
        out_channels, kernel = w.shape[0], w.shape[2:]
        self._check_counts(channels, out_channels, w.shape[1])
        dg, k = self.deformable_group, kernel[0] * kernel[1]
        sample = x.shape[:axis]
        expected = sample + (2 * dg * k,) + size
        if offset.shape != expected:
            raise self.error(f"offset must have shape {expected} (the sample axes, "
                             f"2 * deformable_group * Kh * Kw, then x's spatial size), got "
                             f"{offset.shape}")
        if self.has_mask:
            expected = sample + (dg * k,) + size
            if inputs[3].shape != expected:
                raise self.error(f"mask must have shape {expected} (the sample axes, "
                                 f"deformable_group * Kh * Kw, then x's spatial size), got "
                                 f"{inputs[3].shape}")
            if not any(p < (n + 1) // 2 for p, n in zip(self.pad, kernel)):
                raise self.error(f"pad {self.pad} puts the kernel's centre in the padding "
                                 f"(nnabla refuses it with a mask): pad less than half the "
                                 f"kernel {tuple(kernel)} on one axis at least")
        if self.has_bias and inputs[-1].shape != (out_channels,):
            raise self.error(f"bias must have shape ({out_channels},), got {inputs[-1].shape}")
        out_size = []
        for n, kn, p, s, d in zip(size, kernel, self.pad, self.stride, self.dilation):
            o = (n + 2 * p - d * (kn - 1) - 1) // s + 1
            if o < 1 or (o - 1) * s >= n:
                raise self.error(f"input {tuple(size)}, kernel {tuple(kernel)}, pad {self.pad}, "
                                 f"stride {self.stride}, dilation {self.dilation} give no output "
                                 f"whose window starts inside the offset map; pad less")
            out_size.append(o)
        batch = int(np.prod(sample, dtype=np.int64))
        self.grid = _Grid(batch, channels, size, dg, kernel, self.pad, self.stride,
                          self.dilation, tuple(out_size))
        self.shapes = [v.shape for v in inputs]
        self.y_shape = sample + (out_channels,) + tuple(out_size)
        return [(self.y_shape, np.result_type(*(v.dtype for v in inputs)))]

    # -- the columns and the GEMM --------------------------------------------------------
    def _sampling(self, xp, xs):
        """The rows of the samples' top-left corners (S = B * dg * P * K,), their four
        corners' bilinear weights times the mask (S, 4), the bilinear geometry and the mask
        (B, dg, P, K) or 1."""
        grid = self.grid
        h, w = grid.positions(xp, xs[2])
        mask = grid.at_outputs(xp, xs[3], 1)[0] if self.has_mask else 1
        bilinear = _Bilinear(xp, grid, h, w)
        weights = xp.stack(bilinear.weights(mask), axis=-1).reshape(-1, 4)
        return grid.top_left(xp, h, w), weights, bilinear, mask

    def _image(self, xp, x, dtype):
        return self.grid.image_rows(xp, x.reshape(self.grid.batch, self.grid.channels,
                                                  *self.shapes[0][-2:]), dtype)

    def _chunks(self, xp, size: int, width: int):
        """Slices of ``size`` samples in chunks whose corners (4 * ``width`` numbers each)
        stay in the cache between the gather and the arithmetic that reads them: about
        4 MiB on the CPU; one chunk on the GPU, where each call is a kernel launch."""
        step = size if xp is not np else max(256, (1 << 20) // (4 * width))
        return [slice(a, min(a + step, size)) for a in range(0, size, step)]

    def _corners(self, xp, image, first, chunk):
        """The four corners of the samples ``chunk``, (n, 4, C/dg), gathered by one take
        into workspace slot 0."""
        n = chunk.stop - chunk.start
        corners = workspace(xp, (n, 4, image.shape[1]), image.dtype)
        rows = first[chunk, None] + xp.asarray(self.grid.shifts)
        if xp is np:  # mode "raise" would gather into a temporary, then copy
            image.take(rows, axis=0, out=corners, mode="clip")
        else:
            xp.take(image, rows, axis=0, out=corners)
        return corners

    def _columns(self, xp, image, first, weights, out):
        """The deformable im2col: the corners' rows weighted and summed, (S, C/dg), in
        ``out`` where it has the right shape and dtype."""
        shape = (first.size, image.shape[1])
        if out is None or out.shape != shape or out.dtype != image.dtype:
            out = xp.empty(shape, image.dtype)
        for chunk in self._chunks(xp, *shape):
            _einsum(xp, "sk,skc->sc", weights[chunk], self._corners(xp, image, first, chunk),
                    out[chunk])
        return out

    def _to_gemm(self, xp, a):
        """(B, dg, P, K, C/dg) as the GEMM's (B, group, P, K * C/group)."""
        grid, g = self.grid, self.group
        b, p, k, c = grid.batch, grid.p, grid.k, grid.channels
        if grid.dg > 1:
            a = a.transpose(0, 2, 3, 1, 4)
        a = a.reshape(b, p, k, g, c // g)
        if g > 1:
            a = a.transpose(0, 3, 1, 2, 4)
        return a.reshape(b, g, p, k * (c // g))

    def _from_gemm(self, xp, a):
        """The transpose of ``_to_gemm``: (B, group, P, K * C/group) as (B, dg, P, K, C/dg)."""
        grid, g = self.grid, self.group
        b, p, k, c, dg = grid.batch, grid.p, grid.k, grid.channels, grid.dg
        a = a.reshape(b, g, p, k, c // g)
        if g > 1:
            a = a.transpose(0, 2, 3, 1, 4)
        a = a.reshape(b, p, k, dg, c // dg)
        if dg > 1:
            a = a.transpose(0, 3, 1, 2, 4)
        return a.reshape(b, dg, p, k, c // dg)

    def _weight_matrix(self, w):
        """The weight (OC, C/group, Kh, Kw) as (group, OC/group, K * C/group)."""
        oc, cg = w.shape[:2]
        w = w.reshape(self.group, oc // self.group, cg, self.grid.k)
        return w.transpose(0, 1, 3, 2).reshape(self.group, oc // self.group, -1)

    def forward_arrays(self, xp, xs):
        grid = self.grid
        first, weights, bilinear, mask = self._sampling(xp, xs)
        image = self._image(xp, xs[0], self.outputs[0].dtype)
        kept = getattr(self, "_kept", None)
        columns = self._columns(xp, image, first, weights, kept and kept[-1])
        # the backward reads the sampling and the columns again: keep them for it, with
        # copies of the inputs they come from (a few per cent of the columns' size)
        inputs = [a.copy() for a in xs[:4 if self.has_mask else 3]]
        self._kept = (inputs, first, weights, bilinear, mask, image, columns)
        columns = columns.reshape(grid.batch, grid.dg, grid.p, grid.k, -1)
        y = xp.matmul(self._weight_matrix(xs[1]), self._to_gemm(xp, columns).swapaxes(-1, -2))
        y = y.reshape(grid.batch, -1, grid.p)
        if self.has_bias:
            y += xs[-1].reshape(-1, 1)
        return (y.reshape(self.y_shape),)

    def _kept_for(self, xp, xs):
        """What the forward on these inputs kept, computed again where they changed since
        (their data set between the forward and the backward, or no forward ran)."""
        kept = getattr(self, "_kept", None)
        inputs = xs[:4 if self.has_mask else 3]
        if kept is None or len(kept[0]) != len(inputs) or not all(
                a.shape == b.shape and bool(xp.array_equal(a, b))
                for a, b in zip(kept[0], inputs)):
            first, weights, bilinear, mask = self._sampling(xp, xs)
            image = self._image(xp, xs[0], self.outputs[0].dtype)
            kept = (inputs, first, weights, bilinear, mask, image,
                    self._columns(xp, image, first, weights, None))
        return kept[1:]

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        grid = self.grid
        w = xs[1]
        gy = gys[0].reshape(grid.batch, self.group, -1, grid.p)
        grads = [None] * len(xs)
        if self.has_bias and need_grads[-1]:
            grads[-1] = gy.sum(axis=(0, 3)).reshape(-1)
        if not any(need_grads[:4 if self.has_mask else 3]):
            return tuple(grads)
        first, weights, bilinear, mask, image, columns = self._kept_for(xp, xs)
        if need_grads[1]:
            gemm = self._to_gemm(xp, columns.reshape(grid.batch, grid.dg, grid.p, grid.k, -1))
            gw = xp.matmul(gy, gemm).sum(axis=0)
            oc, cg = self.shapes[1][:2]
            grads[1] = gw.reshape(self.group, oc // self.group, grid.k, cg).transpose(
                0, 1, 3, 2).reshape(self.shapes[1])
        need_x, need_offset = need_grads[0], need_grads[2]
        need_mask = self.has_mask and need_grads[3]
        if not (need_x or need_offset or need_mask):
            return tuple(grads)
        wm = self._weight_matrix(w)
        gemm = workspace(xp, gy.shape[:2] + (grid.p, wm.shape[-1]),
                         np.result_type(gy.dtype, wm.dtype), 1)
        gcolumns = self._from_gemm(xp, xp.matmul(gy.swapaxes(-1, -2), wm, out=gemm))
        gcolumns = gcolumns.reshape(columns.shape)
        if need_offset or need_mask:
            dots = xp.empty((first.size, 4), gcolumns.dtype)
            for chunk in self._chunks(xp, *gcolumns.shape):
                _einsum(xp, "skc,sc->sk", self._corners(xp, image, first, chunk),
                        gcolumns[chunk], dots[chunk])
            dots = [dots[:, c].reshape(bilinear.lh.shape) for c in range(4)]
            if need_offset:
                along = [sum(d * a for d, a in zip(dots, part(bilinear)))
                         for part in (_Bilinear.along_h, _Bilinear.along_w)]
                goffset = xp.stack(along) * mask
                grads[2] = grid.to_inputs(xp, goffset, 2, goffset.dtype).reshape(self.shapes[2])
            if need_mask:
                gmask = sum(d * wt for d, wt in zip(dots, bilinear.weights(1)))
                grads[3] = grid.to_inputs(xp, gmask[None], 1, gmask.dtype).reshape(self.shapes[3])
        if need_x:
            grads[0] = self._image_grad(xp, gcolumns, first, weights).reshape(self.shapes[0])
        return tuple(grads)

    def _image_grad(self, xp, gcolumns, first, weights):
        """col2im of the deformable columns: each corner's weighted column gradient added
        into its row of the padded image, then the padding dropped."""
        grid, cdg = self.grid, gcolumns.shape[1]
        image = xp.zeros((grid.batch * grid.dg * grid.padded[0] * grid.padded[1], cdg),
                         gcolumns.dtype)
        flat = image.reshape(-1)
        # one flat index (NumPy's fast add.at) for the top-left corners; the other corners
        # lie a fixed number of rows further, so they add into views of the image shifted so
        # (in chunks that stay in the cache)
        for chunk in self._chunks(xp, *gcolumns.shape):
            n = chunk.stop - chunk.start
            index = workspace(xp, (n, cdg), first.dtype, 2)
            xp.add((first[chunk] * cdg)[:, None], xp.arange(cdg), out=index)
            index = index.reshape(-1)
            values = workspace(xp, (4, n, cdg), gcolumns.dtype, 3)
            xp.multiply(weights[chunk].T[:, :, None], gcolumns[chunk], out=values)
            for shift, v in zip(grid.shifts, values):
                add_at(xp, flat[shift * cdg:], index, v.reshape(-1))
        return grid.image_back(image)

    # -- the same as a graph, for the graph backward --------------------------------------
    def composite(self, F, xs):
        """What it computes as a graph of functions: the corners gathered by row, weighted
        by the bilinear weights computed from the offsets, then the GEMM; its graph backward
        differentiates this."""
        grid, g = self.grid, self.group
        b, dg, p, k, c = grid.batch, grid.dg, grid.p, grid.k, grid.channels
        x, w, offset = xs[0], xs[1], xs[2]
        off = F.reshape(offset, (b, dg, k, 2, grid.height, grid.width))
        off = F.slice(off, (0,) * 6, (b, dg, k, 2) + tuple(r.stop for r in grid.reach),
                      (1, 1, 1, 1) + grid.stride)
        off = F.reshape(F.transpose(off, (3, 0, 1, 4, 5, 2)), (2, b, dg, p, k))
        base = Variable.from_numpy_array(grid.base[:, None, None].astype(offset.dtype))
        moved = off + F.broadcast(base, (2, b, dg, p, k))
        h = F.reshape(F.slice(moved, (0,) * 5, (1, b, dg, p, k)), (b, dg, p, k))
        wpos = F.reshape(F.slice(moved, (1, 0, 0, 0, 0), (2, b, dg, p, k)), (b, dg, p, k))
        inside = (F.greater_scalar(h, -1.0) * F.greater_scalar(wpos, -1.0)
                  * F.less_scalar(h, float(grid.height)) * F.less_scalar(wpos, float(grid.width)))
        if self.has_mask:
            m = F.reshape(F.transpose(F.slice(
                F.reshape(xs[3], (b, dg, k, grid.height, grid.width)), (0,) * 5,
                (b, dg, k) + tuple(r.stop for r in grid.reach), (1, 1, 1) + grid.stride),
                (0, 1, 3, 4, 2)), (b, dg, p, k))
            inside = inside * m
        rows, h_floor, w_floor = _CornerRows(grid)(offset)
        lh, lw = h - h_floor, wpos - w_floor  # F.floor's gradient is 1 (nnabla's), not 0
        weights = [(1 - lh) * (1 - lw), (1 - lh) * lw, lh * (1 - lw), lh * lw]
        weights = F.reshape(F.stack(*[wt * inside for wt in weights], axis=0), (4, -1, 1))
        image = F.pad(F.reshape(x, (b, dg, c // dg, grid.height, grid.width)), (1, 1, 1, 1))
        image = F.reshape(F.transpose(image, (0, 1, 3, 4, 2)), (-1, c // dg))
        corners = F.gather(image, rows, axis=0)
        columns = F.reshape(F.sum(corners * F.broadcast(weights, corners.shape), axis=0),
                            (b, dg, p, k, c // dg))
        columns = F.reshape(F.transpose(columns, (0, 2, 3, 1, 4)), (b, p, k, g, c // g))
        columns = F.reshape(F.transpose(columns, (0, 3, 1, 2, 4)), (b * g, p, k * (c // g)))
        oc = w.shape[0]
        wm = F.reshape(F.transpose(F.reshape(w, (g, oc // g, c // g, k)), (0, 1, 3, 2)),
                       (1, g, oc // g, k * (c // g)))
        wm = F.reshape(F.broadcast(wm, (b, g, oc // g, k * (c // g))), (b * g, oc // g, -1))
        y = F.reshape(F.batch_matmul(wm, columns, transpose_b=True), (b, oc, p))
        if self.has_bias:
            y = y + F.broadcast(F.reshape(xs[-1], (1, oc, 1)), (b, oc, p))
        return F.reshape(y, self.y_shape)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """The composite differentiated (its first-order gradient is backward_arrays')."""
        return composite_backward_graph(self, F, xs, ys, gys, need_grads)


def deformable_convolution(x: Variable, weight: Variable, offset: Variable,
                           mask: Variable | None = None, bias: Variable | None = None,
                           base_axis: int = 1, pad: Sequence[int] | None = None,
                           stride: Sequence[int] | None = None,
                           dilation: Sequence[int] | None = None, group: int = 1,
                           deformable_group: int = 1, channel_last: bool = False,
                           n_outputs: int = -1, outputs=None) -> Variable:
    """2-D deformable convolution of ``x`` (B, C, H, W) with ``weight`` (OC, C/group, Kh,
    Kw): x sampled bilinearly (zero outside) at each kernel position moved by ``offset``
    (B, deformable_group * Kh * Kw * 2, H, W; (dy, dx) pairs) and scaled by ``mask``
    (B, deformable_group * Kh * Kw, H, W; DCNv2) where given, plus ``bias`` (OC,)."""
    default_outputs("F.deformable_convolution", n_outputs, outputs)
    if not isinstance(channel_last, (bool, np.bool_)):
        raise argument_error("F.deformable_convolution",
                             f"channel_last must be a bool, got {channel_last!r}")
    inputs = [x, weight, offset] + [v for v in (mask, bias) if v is not None]
    return DeformableConvolution(base_axis, pad, stride, dilation, group, deformable_group,
                                 bool(channel_last))(*inputs)


# -- adaptive separable convolution ------------------------------------------------------

class AdaptiveSeparableConvolution(Function):
    """y(b, c, h, w) = sum over (j, i) of kv(b, j, h, w) kh(b, i, h, w) x(b, c, h + j, w + i):
    a per-pixel 2-D kernel, the outer product of a vertical and a horizontal one."""

    nnabla_spec = without_params("AdaptiveSeparableConvolution", "adaptive_separable_convolution")

    def output_specs(self, inputs):
        x, kv, kh = inputs
        if x.ndim != 4 or kv.ndim != 4 or kh.ndim != 4:
            raise self.error(f"x, vertical_kernel and horizontal_kernel must be 4-D (B, C, H, W), "
                             f"(B, Kv, H', W'), (B, Kh, H', W'), got {x.shape}, {kv.shape}, "
                             f"{kh.shape}")
        b, c, height, width = x.shape
        oh, ow = height - kv.shape[1] + 1, width - kh.shape[1] + 1
        if kv.shape[0] != b or kh.shape[0] != b:
            raise self.error(f"the batch sizes must agree: x {b}, vertical_kernel {kv.shape[0]}, "
                             f"horizontal_kernel {kh.shape[0]}")
        if oh < 1 or ow < 1:
            raise self.error(f"the kernels (Kv={kv.shape[1]}, Kh={kh.shape[1]}) must not exceed "
                             f"the input's height and width ({height}, {width})")
        for name, k, axis, n, lo in (("vertical", kv, 2, height, oh), ("vertical", kv, 3, width, ow),
                                     ("horizontal", kh, 2, height, oh),
                                     ("horizontal", kh, 3, width, ow)):
            if not lo <= k.shape[axis] <= n:
                raise self.error(f"the {name} kernel's axis {axis} must be in [{lo}, {n}] (the "
                                 f"output's size to the input's), got shape {k.shape}")
        self.shapes = [v.shape for v in inputs]
        self.out = (oh, ow)
        return [((b, c, oh, ow), np.result_type(*(v.dtype for v in inputs)))]

    def _terms(self, kv, kh):
        """The (j, i, window, kernel weight (B, 1, oH, oW)) of each term of the sum."""
        (oh, ow), kvn, khn = self.out, self.shapes[1][1], self.shapes[2][1]
        for j in range(kvn):
            for i in range(khn):
                yield (j, i, (slice(None), slice(None), slice(j, j + oh), slice(i, i + ow)),
                       kv[:, j:j + 1, :oh, :ow] * kh[:, i:i + 1, :oh, :ow])

    def forward_arrays(self, xp, xs):
        x, kv, kh = xs
        y = sum(x[window] * weight for _, _, window, weight in self._terms(kv, kh))
        return (y.astype(self.outputs[0].dtype, copy=False),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        x, kv, kh = xs
        gy = gys[0]
        oh, ow = self.out
        gx = xp.zeros(x.shape, gy.dtype) if need_grads[0] else None
        gkv = xp.zeros(kv.shape, gy.dtype) if need_grads[1] else None
        gkh = xp.zeros(kh.shape, gy.dtype) if need_grads[2] else None
        for j, i, window, weight in self._terms(kv, kh):
            if gx is not None:
                gx[window] += gy * weight
            if gkv is not None or gkh is not None:
                both = (gy * x[window]).sum(axis=1, keepdims=True)
                if gkv is not None:
                    gkv[:, j:j + 1, :oh, :ow] += both * kh[:, i:i + 1, :oh, :ow]
                if gkh is not None:
                    gkh[:, i:i + 1, :oh, :ow] += both * kv[:, j:j + 1, :oh, :ow]
        return gx, gkv, gkh

    def composite(self, F, xs):
        """The sum of products of slices, as a graph of functions."""
        x, kv, kh = xs
        (oh, ow), (b, c) = self.out, self.shapes[0][:2]
        shape = (b, c, oh, ow)

        def window(v, start, size):
            return F.slice(v, start, tuple(s + n for s, n in zip(start, size)))

        terms = []
        for j in range(self.shapes[1][1]):
            for i in range(self.shapes[2][1]):
                weight = (window(kv, (0, j, 0, 0), (b, 1, oh, ow))
                          * window(kh, (0, i, 0, 0), (b, 1, oh, ow)))
                terms.append(window(x, (0, 0, j, i), shape) * F.broadcast(weight, shape))
        return F.add_n(*terms) if len(terms) > 1 else terms[0]

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """The composite differentiated."""
        return composite_backward_graph(self, F, xs, ys, gys, need_grads)


def adaptive_separable_convolution(x: Variable, vertical_kernel: Variable,
                                   horizontal_kernel: Variable, n_outputs: int = -1,
                                   outputs=None) -> Variable:
    """Adaptive separable convolution of ``x`` (B, C, H, W) with per-pixel vertical
    (B, Kv, H', W') and horizontal (B, Kh, H', W') kernels: output (B, C, H-Kv+1, W-Kh+1)."""
    default_outputs("F.adaptive_separable_convolution", n_outputs, outputs)
    return AdaptiveSeparableConvolution()(x, vertical_kernel, horizontal_kernel)
