"""Warping images by sampling grids and flows: affine_grid (the sampling grid of an affine
map), warp_by_grid (an image read at grid points, bilinearly or at the nearest pixel,
with zero, repeat or reflect padding; 2-D and 3-D) and warp_by_flow (an image read at
its pixels moved by a flow, bilinearly with clamped indices), as nnabla's.

warp_by_grid and warp_by_flow share one sampler: every sampled point reads the
source at the 2^d corners around it (one for nearest), each with a weight; the source is
read as rows of channels (one ``take`` of whole rows for all corners) and the data
gradient is summed back as whole rows too, in rounds of distinct targets (on NumPy;
``add_at`` of whole rows on CuPy).  Their gradients are those of the forward with the corners' indices held fixed,
as nnabla's; the graph backward (second order) differentiates the same computation
built from dpnb functions."""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..graph import Function, Variable
from .base import (add_at, argument_error, default_outputs, flag_of, round_half_away,
                   workspace)
from .graph_module import composite_backward_graph, linear_backward_graph
from .specs import FunctionSpec, attrs, call, ints, without_params

__all__ = ["affine_grid", "warp_by_grid", "warp_by_flow"]


# -- the sampler shared by warp_by_grid and warp_by_flow ---------------------------------

@dataclass
class _Axis:
    """One spatial axis of the source at every sampled point (arrays of shape (B, N)):
    the lower neighbour's index (nearest: the nearest pixel's), the upper one's (default
    lo + 1), how far the point lies from lo towards hi (None: nearest), and the derivative
    of that fraction with respect to the coordinate the caller gave."""

    size: int
    lo: object
    p: object = None
    slope: object = None
    hi: object = None


@dataclass
class _Corner:
    """One corner read for every point: its row in the (B * N_in, C) source, whether it
    lies inside the source (outside reads 0), and which neighbour (0 lo, 1 hi) it takes
    on each axis."""

    row: object
    inside: object
    side: tuple


def _corners(xp, axes: list[_Axis]) -> list[_Corner]:
    """The corners around every point, rows counted over the whole batch."""
    sizes = [a.size for a in axes]
    strides = [math.prod(sizes[j + 1:]) for j in range(len(sizes))]
    batch, points = axes[0].lo.shape
    base = (xp.arange(batch) * math.prod(sizes)).reshape(batch, 1)
    # each axis's neighbours once: (row offset along it, inside it, side)
    choices = []
    for a, size, stride in zip(axes, sizes, strides):
        picks = [a.lo] if a.p is None else [a.lo, a.lo + 1 if a.hi is None else a.hi]
        choices.append([(xp.clip(index, 0, size - 1) * stride, (index >= 0) & (index < size),
                         side) for side, index in enumerate(picks)])
    corners = []
    for picks in itertools.product(*choices):
        row, inside = base, None
        for offset, ok, _ in picks:
            inside = ok if inside is None else inside & ok
            row = row + offset
        corners.append(_Corner(row.reshape(-1), inside.reshape(-1),
                               tuple(side for _, _, side in picks)))
    return corners


def _weight(axes: list[_Axis], corner: _Corner, skip: int | None = None):
    """The corner's weight (0 outside the source), flat; with ``skip``, that of the other
    axes only (the weight's derivative along ``skip`` but for its sign)."""
    w = corner.inside
    for j, (a, side) in enumerate(zip(axes, corner.side)):
        if a.p is not None and j != skip:
            w = w * (a.p if side else 1 - a.p).reshape(-1)
    return w


def _plan(xp, axes: list[_Axis], dtype):
    """The corners, their rows (M, K) and their weights (M, K) in ``dtype``, corners last
    so that one ``take`` reads all of a point's corners as one (K, C) block."""
    corners = _corners(xp, axes)
    index = xp.stack([c.row for c in corners], axis=1)
    weights = xp.stack([_weight(axes, c) for c in corners], axis=1).astype(dtype, copy=False)
    return corners, index, weights


def _read(xp, rows, index):
    """The source ``rows`` (B * N_in, C) at every point's corners: (M, K, C), in the
    reusable scratch buffer on the CPU (valid until the next ``workspace`` call); the
    indices are in range by construction, and NumPy's checking mode would read into a
    copy of ``out``."""
    if xp is not np:
        return xp.take(rows, index, axis=0)
    read = workspace(xp, index.shape + rows.shape[1:], rows.dtype)
    return np.take(rows, index, axis=0, out=read, mode="clip")


def _scatter(xp, g, corners: list[_Corner], index, weights, gy_rows) -> None:
    """The adjoint of the read: each point's gradient row ``gy_rows`` (M, C), weighted,
    added into the rows ``g`` (B * N_in, C) of those of its corners (``index``, M × K)
    that lie inside the source.

    On NumPy, whole rows go in by fancy-index ``+=``, which keeps one of repeated
    targets, so each corner's points go in rounds of distinct targets: a claim table
    written with the points' ids and read back picks one point per target each round
    (whichever write lands, exactly one point reads its own id).  The points left after
    ``_ROUNDS`` rounds (a grid that piles many points into one cell) go by ``add.at``.
    Rows of C values move several times faster than ``add.at``'s single elements."""
    if xp is not np:  # CuPy: atomic adds of whole rows
        values = weights[:, :, None] * gy_rows[:, None, :]
        add_at(xp, g, index.reshape(-1), values.reshape(-1, g.shape[1]))
        return
    claim = np.empty(g.shape[0], np.int64)
    as_items = np.dtype((np.void, g.shape[1] * g.itemsize))  # a row as one item for put
    g_items = g.reshape(-1).view(as_items)
    for k, corner in enumerate(corners):
        targets = np.ascontiguousarray(index[:, k])
        weight = np.ascontiguousarray(weights[:, k])
        waiting = None if corner.inside.all() else np.flatnonzero(corner.inside)
        for _ in range(_ROUNDS):
            points = np.arange(targets.size) if waiting is None else waiting
            at = targets if waiting is None else targets.take(waiting)
            np.put(claim, at, points)
            won = claim.take(at) == points
            done = bool(won.all())
            if done and waiting is None:
                values = gy_rows * weight[:, None]
            else:
                if not done:
                    points, at, waiting = points[won], at[won], points[~won]
                values = gy_rows.take(points, axis=0)
                values *= weight.take(points)[:, None]
            values += g.take(at, axis=0)
            np.put(g_items, at, values.reshape(-1).view(as_items))
            if done:
                break
        else:
            np.add.at(g, targets[waiting], gy_rows[waiting] * weight[waiting, None])


_ROUNDS = 8


def _transposed(xp, a):
    """``a`` (B, P, Q) as a new contiguous (B, Q, P).  On NumPy the copy goes in slabs of
    P: one copy walks the source with a stride of a whole row of Q, and a power-of-two
    stride (Q = 4096 floats) makes its reads evict each other from the cache; slabs of
    at least 8 rows and about 32 KiB stay in it (32 x 4096 float32: 0.47 ms against 0.96
    whole, (4096, 32) back: 0.33 against 0.63, on the shared machine)."""
    if xp is not np:
        return xp.ascontiguousarray(a.transpose(0, 2, 1))
    batch, p, q = a.shape
    out = np.empty((batch, q, p), a.dtype)
    step = max(8, 32768 // max(1, q * a.itemsize))
    for i in range(0, p, step):
        np.copyto(out[:, :, i:i + step], a[:, i:i + step].transpose(0, 2, 1))
    return out


def _position_grads(xp, dots, axes: list[_Axis], corners: list[_Corner]) -> list:
    """The gradient of each axis's coordinate input at every point (flat), from ``dots``
    (M, K): each corner's source row times the point's output gradient, summed over
    channels; the derivative of the corner weights weighs them."""
    grads = [None if a.p is None else 0 for a in axes]
    if all(g is None for g in grads):
        return grads
    for k, corner in enumerate(corners):
        dot = dots[:, k]
        for j, a in enumerate(axes):
            if a.p is not None:
                part = _weight(axes, corner, skip=j) * dot
                grads[j] = grads[j] + part if corner.side[j] else grads[j] - part
    return [None if g is None else g * a.slope.reshape(-1) for g, a in zip(grads, axes)]


class _Warp(Function):
    """A source image (B, C, *S_in), or (B, *S_in, C) ``channel_last``, read at points
    that the second input places; subclasses say where (``axes``: per spatial axis, in
    the source's order) and how each axis's coordinate gradient goes back to that input
    (``coordinate_grad``).  Output (B, C, *S_out), or (B, *S_out, C)."""

    channel_last = False

    def axes(self, xp, where) -> list[_Axis]:
        raise NotImplementedError

    def coordinate_grad(self, xp, grads: list, where):
        """The gradient of the second input from those of each axis's coordinate
        (flat, (B * N,)); None where the coordinates take none (nearest)."""
        raise NotImplementedError

    def coordinate_variables(self, F, where) -> list[Variable]:
        """Each axis's coordinate as a (B, N) variable of the graph, for the composite."""
        raise NotImplementedError

    def _layout(self, x_shape, out_spatial) -> None:
        """Keep the shapes forward and backward need."""
        self.batch = x_shape[0]
        self.channels = x_shape[-1] if self.channel_last else x_shape[1]
        self.in_spatial = tuple(x_shape[1:-1] if self.channel_last else x_shape[2:])
        self.out_spatial = tuple(out_spatial)
        self.out_shape = self._shape(self.out_spatial)

    def _rows(self, xp, a):
        """An image (channels first or last) as rows of channels: (B * prod(spatial), C)."""
        if self.channel_last:
            return a.reshape(-1, self.channels)
        return _transposed(xp, a.reshape(self.batch, self.channels, -1)).reshape(
            -1, self.channels)

    def _image(self, xp, rows, spatial):
        """Rows of channels back to an image of the input's layout."""
        if self.channel_last:
            return rows.reshape(self._shape(spatial))
        moved = _transposed(xp, rows.reshape(self.batch, -1, self.channels))
        return moved.reshape(self._shape(spatial))

    def _shape(self, spatial):
        if self.channel_last:
            return (self.batch,) + tuple(spatial) + (self.channels,)
        return (self.batch, self.channels) + tuple(spatial)

    def forward_arrays(self, xp, xs):
        x, where = xs
        rows = self._rows(xp, x)
        _, index, weights = _plan(xp, self.axes(xp, where), rows.dtype)
        out = xp.einsum("mk,mkc->mc", weights, _read(xp, rows, index))
        return (self._image(xp, out.astype(x.dtype, copy=False), self.out_spatial),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        x, where = xs
        gy = gys[0]
        axes = self.axes(xp, where)
        corners, index, weights = _plan(xp, axes, gy.dtype)
        gy_rows = self._rows(xp, gy)
        gx = g_where = None
        if need_grads[0]:
            g = xp.zeros((self.batch * math.prod(self.in_spatial), self.channels), gy.dtype)
            _scatter(xp, g, corners, index, weights, gy_rows)
            gx = self._image(xp, g, self.in_spatial).astype(x.dtype, copy=False)
        if need_grads[1]:
            dots = xp.einsum("mkc,mc->mk", _read(xp, self._rows(xp, x), index), gy_rows)
            grads = _position_grads(xp, dots, axes, corners)
            g_where = self.coordinate_grad(xp, grads, where).astype(where.dtype, copy=False)
        return (gx, g_where)

    def composite(self, F, xs):
        """The forward as a graph of dpnb functions (for the graph backward): the plan's
        indices and masks are constants of the graph, each axis's fraction is its slope
        times the coordinate plus an offset, so gradients of every order come out."""
        x, where = xs
        plan = _WarpPlan(self)(where)
        index, inside, slope, offset = plan
        coordinates = self.coordinate_variables(F, where)
        n_axes = len(self.in_spatial)
        fractions = [None] * n_axes
        for j in range(n_axes):
            if self.linear:
                fractions[j] = slope[j] * coordinates[j] + offset[j]
        rows = x if self.channel_last else F.transpose(
            F.reshape(x, (self.batch, self.channels, -1)), (0, 2, 1))
        rows = F.reshape(rows, (self.batch, -1, self.channels))
        read = F.gather(rows, index, axis=1, batch_dims=1)  # (B, K * N, C)
        k = inside.shape[1]
        read = F.reshape(read, (self.batch, k, -1, self.channels))
        out = None
        for i, sides in enumerate(self.corner_sides()):
            w = inside[:, i]
            for j, side in enumerate(sides):
                if fractions[j] is not None:
                    w = w * (fractions[j] if side else 1 - fractions[j])
            part = read[:, i] * F.reshape(w, w.shape + (1,))
            out = part if out is None else out + part
        if self.channel_last:
            return F.reshape(out, self.out_shape)
        return F.reshape(F.transpose(out, (0, 2, 1)), self.out_shape)

    backward_graph = composite_backward_graph

    def corner_sides(self) -> list[tuple]:
        """Which neighbour each corner takes on each axis, in ``_corners``' order."""
        n_axes = len(self.in_spatial)
        return list(itertools.product(*([(0, 1)] * n_axes))) if self.linear \
            else [(0,) * n_axes]


class _WarpPlan(Function):
    """Where a warp reads, as arrays its composite uses: the corners' indices in each
    source (B, K * N), their inside masks (B, K, N), and per axis the slope and offset
    making the fraction from the coordinate (d, B, N).  Constants of the graph: no
    gradient goes back through them."""

    no_nnabla_spec = "a part of a warp's backward graph"
    differentiable = False

    def __init__(self, warp: _Warp):
        self.warp = warp

    def output_specs(self, inputs):
        w = self.warp
        k, n = len(w.corner_sides()), math.prod(w.out_spatial)
        dtype = inputs[0].dtype
        d = len(w.in_spatial)
        return [((w.batch, k * n), np.dtype(np.int64)), ((w.batch, k, n), dtype),
                ((d, w.batch, n), dtype), ((d, w.batch, n), dtype)]

    def forward_arrays(self, xp, xs):
        (where,) = xs
        w = self.warp
        axes = w.axes(xp, where)
        corners = _corners(xp, axes)
        per_batch = math.prod(w.in_spatial)
        shape = (w.batch, -1)
        index = xp.stack([c.row.reshape(shape) % per_batch for c in corners], axis=1)
        inside = xp.stack([c.inside.reshape(shape) for c in corners], axis=1)
        coordinates = w.axis_coordinates(xp, where)
        slopes, offsets = [], []
        for a, t in zip(axes, coordinates):
            if a.p is None:
                slopes.append(xp.zeros(t.shape, where.dtype))
                offsets.append(xp.zeros(t.shape, where.dtype))
            else:
                slopes.append(a.slope.astype(where.dtype))
                offsets.append((a.p - a.slope * t).astype(where.dtype))
        return (index.reshape(w.batch, -1), inside.astype(where.dtype),
                xp.stack(slopes), xp.stack(offsets))


# -- warp_by_grid ----------------------------------------------------------------------

_MODES = ("linear", "nearest")
_PADDINGS = ("zero", "repeat", "reflect")


def _reflected(xp, s, low: float, high: float):
    """``s`` folded into [low, high] by reflecting at both ends, and the fold's
    derivative (+1 or -1); a range of width 0 gives ``low``."""
    length = high - low
    if length <= 0:
        return xp.full(s.shape, low, s.dtype), xp.zeros(s.shape, s.dtype)
    below, above = s < low, s > high
    d = xp.where(below, low - s, s - high)
    n = xp.floor(d / length)
    r = d - n * length
    even = (n % 2) == 0
    folded = xp.where(below, xp.where(even, low + r, high - r),
                      xp.where(above, xp.where(even, high - r, low + r), s))
    sign = xp.where(below | above, xp.where(even, -1.0, 1.0), 1.0)
    return folded.astype(s.dtype), sign.astype(s.dtype)


def _source_coordinate(xp, g, size: int, padding: str, align_corners: bool):
    """A normalized grid coordinate (-1 .. 1 across the source) as a source pixel
    coordinate after padding, and its derivative with respect to ``g``."""
    if align_corners:
        s, scale = (g + 1) * (size - 1) / 2, (size - 1) / 2
    else:
        s, scale = ((g + 1) * size - 1) / 2, size / 2
    if padding == "zero":
        return s, xp.full(s.shape, scale, s.dtype)
    if padding == "repeat":
        inside = (s >= 0) & (s <= size - 1)
        return xp.clip(s, 0, size - 1), inside.astype(s.dtype) * scale
    if align_corners:
        folded, sign = _reflected(xp, s, 0.0, float(size - 1))
        return folded, sign * scale
    folded, sign = _reflected(xp, 2 * s, -1.0, 2.0 * size - 1)
    folded = folded * 0.5
    inside = (folded >= 0) & (folded <= size - 1)
    return xp.clip(folded, 0, size - 1), sign * inside * scale


class WarpByGrid(_Warp):
    """x (B, C, *S_in) read at the points of ``grid`` (B, *S_out, d), normalized source
    coordinates (x, y[, z]) in -1 .. 1: bilinearly (trilinearly) or at the nearest pixel,
    with zero, repeat (clamp) or reflect padding outside."""

    nnabla_spec = FunctionSpec("WarpByGrid", "warp_by_grid_param",
                               ("mode", "padding_mode", "align_corners", "channel_last"),
                               attrs("mode", "padding_mode", "align_corners", "channel_last"),
                               call("warp_by_grid", "mode", "padding_mode", "align_corners",
                                    "channel_last"))

    def __init__(self, mode: str, padding_mode: str, align_corners: bool, channel_last: bool):
        self.mode, self.padding_mode = mode, padding_mode
        self.align_corners, self.channel_last = align_corners, channel_last
        self.linear = mode == "linear"

    def output_specs(self, inputs):
        x, grid = inputs
        if grid.ndim not in (4, 5) or x.ndim != grid.ndim or grid.shape[-1] != grid.ndim - 2:
            raise self.error(f"x and grid must be 4-D with a grid of shape (B, H, W, 2), or 5-D "
                             f"with a grid of shape (B, D, H, W, 3); got x {x.shape} and grid "
                             f"{grid.shape}")
        if x.shape[0] != grid.shape[0]:
            raise self.error(f"x and grid must have one batch size, got x {x.shape} and grid "
                             f"{grid.shape}")
        self._layout(x.shape, grid.shape[1:-1])
        return [(self.out_shape, x.dtype)]

    def axis_coordinates(self, xp, grid):
        """Each source axis's grid component, (B, N), in the source's axis order."""
        d = grid.shape[-1]
        flat = grid.reshape(self.batch, -1, d)
        return [flat[:, :, d - 1 - j] for j in range(d)]

    def axes(self, xp, grid):
        axes = []
        for size, g in zip(self.in_spatial, self.axis_coordinates(xp, grid)):
            f, slope = _source_coordinate(xp, g, size, self.padding_mode, self.align_corners)
            with np.errstate(invalid="ignore"):
                if self.linear:
                    lo = xp.floor(f)
                    axes.append(_Axis(size, lo.astype(np.int64), f - lo, slope))
                else:
                    axes.append(_Axis(size, round_half_away(xp, f).astype(np.int64)))
        return axes

    def coordinate_grad(self, xp, grads, grid):
        if not self.linear:
            return xp.zeros(grid.shape, grid.dtype)  # the nearest pixel moves in steps
        d = grid.shape[-1]
        return xp.stack([grads[d - 1 - k] for k in range(d)], axis=-1).reshape(grid.shape)

    def coordinate_variables(self, F, grid):
        d = grid.shape[-1]
        return [F.reshape(grid[..., d - 1 - j], (self.batch, -1)) for j in range(d)]


def _choice(owner: str, name: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        raise argument_error(owner, f"{name} must be one of {', '.join(map(repr, choices))}, "
                                    f"got {value!r}")
    return value


def warp_by_grid(x: Variable, grid: Variable, mode: str = "linear", padding_mode: str = "zero",
                 align_corners: bool = False, channel_last: bool = False, n_outputs: int = -1,
                 outputs=None) -> Variable:
    """x (B, C, H, W) or (B, C, D, H, W) sampled at ``grid`` (B, Ho, Wo, 2) or
    (B, Do, Ho, Wo, 3) of normalized coordinates (x, y[, z]); gradients go to x and (linear
    mode) to the grid."""
    owner = "F.warp_by_grid"
    default_outputs(owner, n_outputs, outputs)
    return WarpByGrid(_choice(owner, "mode", mode, _MODES),
                      _choice(owner, "padding_mode", padding_mode, _PADDINGS),
                      flag_of(owner, "align_corners", align_corners),
                      flag_of(owner, "channel_last", channel_last))(x, grid)


# -- warp_by_flow ----------------------------------------------------------------------

class WarpByFlow(_Warp):
    """data (N, C, H, W) read bilinearly at each pixel moved by ``flow`` (N, 2, H, W):
    (x + flow[:, 0], y + flow[:, 1]), its neighbours' indices clamped into the image (so
    the fraction may leave 0 .. 1 at the borders, as nnabla's)."""

    nnabla_spec = without_params("WarpByFlow", "warp_by_flow")
    linear = True

    def output_specs(self, inputs):
        data, flow = inputs
        if data.ndim != 4 or flow.ndim != 4 or flow.shape[1] != 2 or \
                flow.shape[0] != data.shape[0] or flow.shape[2:] != data.shape[2:]:
            raise self.error(f"data must be (N, C, H, W) and flow (N, 2, H, W) of the same N, "
                             f"H and W; got data {data.shape} and flow {flow.shape}")
        self._layout(data.shape, data.shape[2:])
        return [(data.shape, data.dtype)]

    def axis_coordinates(self, xp, flow):
        """Each axis's flow component, (B, N): y then x."""
        flat = flow.reshape(self.batch, 2, -1)
        return [flat[:, 1], flat[:, 0]]

    def axes(self, xp, flow):
        height, width = self.in_spatial
        ys, xs = xp.meshgrid(xp.arange(height), xp.arange(width), indexing="ij")
        axes = []
        for size, base, t in zip(self.in_spatial, (ys, xs), self.axis_coordinates(xp, flow)):
            f = base.reshape(1, -1).astype(flow.dtype) + t
            below = xp.floor(f)
            lo = xp.clip(below, 0, size - 1)
            hi = xp.clip(below + 1, 0, size - 1).astype(np.int64)
            axes.append(_Axis(size, lo.astype(np.int64), f - lo, xp.ones(f.shape, flow.dtype),
                              hi))
        return axes

    def coordinate_grad(self, xp, grads, flow):
        gy_axis, gx_axis = (g.reshape(self.batch, -1) for g in grads)
        return xp.stack([gx_axis, gy_axis], axis=1).reshape(flow.shape)

    def coordinate_variables(self, F, flow):
        return [F.reshape(flow[:, 1], (self.batch, -1)), F.reshape(flow[:, 0], (self.batch, -1))]


def warp_by_flow(data: Variable, flow: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """data (N, C, H, W) warped by the per-pixel displacement ``flow`` (N, 2, H, W), read
    bilinearly with indices clamped to the image; gradients go to both."""
    default_outputs("F.warp_by_flow", n_outputs, outputs)
    return WarpByFlow()(data, flow)


# -- affine_grid -----------------------------------------------------------------------

def _target_grid(xp, size: tuple[int, ...], align_corners: bool, dtype):
    """The output points in normalized coordinates, (x, y[, z], 1) per point: (N, d + 1);
    a size of 1 gives NaN, as nnabla's 0 / 0."""
    axes = []
    for s in size:
        with np.errstate(invalid="ignore", divide="ignore"):
            t = 2.0 * xp.arange(s, dtype=dtype) / dtype.type(s - 1) - 1
        axes.append(t if align_corners else t * dtype.type((s - 1) / s))
    mesh = xp.meshgrid(*axes, indexing="ij")
    columns = [m.reshape(-1) for m in reversed(mesh)]
    columns.append(xp.ones(columns[0].shape, dtype))
    return xp.stack(columns, axis=1).astype(dtype)


class AffineGrid(Function):
    """The grid of normalized source coordinates that the affine maps ``theta`` (B, 2, 3)
    or (B, 3, 4) send the output points of ``size`` to: (B, *size, d)."""

    nnabla_spec = FunctionSpec("AffineGrid", "affine_grid_param", ("size", "align_corners"),
                               attrs("align_corners", size=lambda fn: ints(fn.size)),
                               call("affine_grid", "size", "align_corners"))

    grad_depends_on_inputs = False  # linear in theta

    def __init__(self, size: tuple[int, ...], align_corners: bool):
        self.size, self.align_corners = size, align_corners

    def output_specs(self, inputs):
        (theta,) = inputs
        d = len(self.size)
        if theta.ndim != 3 or theta.shape[1:] != (d, d + 1):
            raise self.error(f"theta must have shape (B, {d}, {d + 1}) for a {d}-D size "
                             f"{self.size}, got {theta.shape}")
        self.batch = theta.shape[0]
        return [((self.batch,) + self.size + (d,), theta.dtype)]

    def forward_arrays(self, xp, xs):
        (theta,) = xs
        target = _target_grid(xp, self.size, self.align_corners, theta.dtype)
        grid = xp.matmul(target, theta.transpose(0, 2, 1))  # (B, N, d)
        return (grid.reshape(self.outputs[0].shape),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        d = len(self.size)
        g = gys[0].reshape(self.batch, -1, d)
        target = _target_grid(xp, self.size, self.align_corners, g.dtype)
        return (xp.matmul(g.transpose(0, 2, 1), target),)

    backward_graph = linear_backward_graph


def affine_grid(theta: Variable, size: Sequence[int], align_corners: bool = False,
                n_outputs: int = -1, outputs=None) -> Variable:
    """The sampling grid (B, H, W, 2) or (B, D, H, W, 3) for warp_by_grid of the affine
    maps ``theta`` (B, 2, 3) or (B, 3, 4) over output points of ``size``."""
    owner = "F.affine_grid"
    default_outputs(owner, n_outputs, outputs)
    if isinstance(size, (int, np.integer)) or not all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0
            for s in size) or len(size) not in (2, 3):
        raise argument_error(owner, f"size must be 2 or 3 positive ints (H, W) or (D, H, W), "
                                    f"got {size!r}")
    return AffineGrid(tuple(int(s) for s in size), flag_of(owner, "align_corners",
                                                         align_corners))(theta)
