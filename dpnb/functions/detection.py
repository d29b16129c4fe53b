"""Object detection: non-maximum suppression of YOLO-style detections
(``nms_detection2d``) and ONNX's NonMaxSuppression (``onnx_non_max_suppression``), and
RoI Align (``roi_align``), as nnabla 1.39's CPU functions compute them.

Suppression is sequential and data-dependent, so it runs on the host (NumPy) whatever
the context, in the input's float type as nnabla's kernels do, with the pairwise
overlaps computed a block of boxes at a time.  Boxes are visited in the order
libstdc++'s ``std::sort`` leaves them (nnabla sorts with it, and it is not stable), so
equal scores resolve as in nnabla; the NMS functions have no gradient.  RoI Align is
linear in its input: per box a matrix over the rows times the image times a matrix over
the columns, and its gradient the transposed products."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..context import to_module
from ..graph import Function, Variable
from .base import argument_error, default_outputs, flag_of, number_of
from .graph_module import linear_backward_graph
from .specs import FunctionSpec, attrs, call, ints, none_to

__all__ = ["nms_detection2d", "onnx_non_max_suppression", "roi_align"]


# -- the order nnabla visits boxes in: libstdc++'s std::sort, scores descending ---------

_INSERTION_RUN = 16  # libstdc++'s _S_threshold: shorter runs are left to insertion sort


class _StdSort:
    """The permutation libstdc++'s ``std::sort`` makes of 0..n-1 with the comparison
    ``key[i] > key[j]`` (introsort: median-of-three quicksort down to runs of 16, heap
    sort past 2 log2(n) levels, then one insertion sort).  Equal keys end in the order it
    leaves them.  nnabla's order is undefined for NaN keys; the loops here stay in bounds
    and give an order of their own then."""

    def __init__(self, keys: np.ndarray):
        self.key = keys.tolist()
        self.a = list(range(len(self.key)))

    def before(self, i: int, j: int) -> bool:
        return self.key[i] > self.key[j]

    def sorted(self) -> list[int]:
        n = len(self.a)
        if n > 1:
            self.introsort(0, n, 2 * (n.bit_length() - 1))
            self.final_insertion_sort(n)
        return self.a

    def introsort(self, first: int, last: int, depth: int) -> None:
        while last - first > _INSERTION_RUN:
            if depth == 0:
                self.heap_sort(first, last)
                return
            depth -= 1
            cut = self.partition_pivot(first, last)
            self.introsort(cut, last, depth)
            last = cut

    def partition_pivot(self, first: int, last: int) -> int:
        a, before = self.a, self.before
        x, y, z = first + 1, first + (last - first) // 2, last - 1
        if before(a[x], a[y]):
            median = y if before(a[y], a[z]) else z if before(a[x], a[z]) else x
        else:
            median = x if before(a[x], a[z]) else z if before(a[y], a[z]) else y
        a[first], a[median] = a[median], a[first]
        pivot, low, high = a[first], first + 1, last
        while True:
            while low < last - 1 and before(a[low], pivot):
                low += 1
            high -= 1
            while high > first and before(pivot, a[high]):
                high -= 1
            if low >= high:
                return low
            a[low], a[high] = a[high], a[low]
            low += 1

    def heap_sort(self, first: int, last: int) -> None:
        n = last - first
        for parent in range((n - 2) // 2, -1, -1):
            self.adjust_heap(first, parent, n, self.a[first + parent])
        while n > 1:
            n -= 1
            value = self.a[first + n]
            self.a[first + n] = self.a[first]
            self.adjust_heap(first, 0, n, value)

    def adjust_heap(self, first: int, hole: int, n: int, value: int) -> None:
        a, before, top, child = self.a, self.before, hole, hole
        while child < (n - 1) // 2:
            child = 2 * (child + 1)
            if before(a[first + child], a[first + child - 1]):
                child -= 1
            a[first + hole] = a[first + child]
            hole = child
        if n % 2 == 0 and child == (n - 2) // 2:
            child = 2 * (child + 1)
            a[first + hole] = a[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and before(a[first + parent], value):
            a[first + hole] = a[first + parent]
            hole, parent = parent, (parent - 1) // 2
        a[first + hole] = value

    def final_insertion_sort(self, n: int) -> None:
        a, before = self.a, self.before
        for i in range(1, n):
            value, j = a[i], i
            if i < _INSERTION_RUN and before(value, a[0]):
                a[1:i + 1] = a[0:i]
                a[0] = value
                continue
            while j > 0 and before(value, a[j - 1]):
                a[j] = a[j - 1]
                j -= 1
            a[j] = value


def _visiting_order(scores: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """The indices of ``scores`` as nnabla's std::sort orders them, descending; only the
    order of the ``counted`` entries matters to the caller, so without ties among them
    (nor NaNs) any descending sort gives it."""
    if np.isnan(scores).any() or np.unique(scores[counted]).size < int(counted.sum()):
        return np.array(_StdSort(scores).sorted(), np.int64)
    return np.argsort(-scores, kind="stable")


# -- overlaps -----------------------------------------------------------------------

_ROWS = 1 << 22  # overlaps computed at once, to bound memory


def _pairwise_iou(lo_x, hi_x, lo_y, hi_y, w, h, rows=None) -> np.ndarray:
    """The intersection over union of boxes ``rows`` (default: all) with every box, as
    nnabla computes it in the boxes' float type (0 where they do not overlap); each box
    given by its extent on both axes and its width and height."""
    rows = slice(None) if rows is None else rows
    wi = np.minimum(hi_x[rows, None], hi_x) - np.maximum(lo_x[rows, None], lo_x)
    hgt = np.minimum(hi_y[rows, None], hi_y) - np.maximum(lo_y[rows, None], lo_y)
    area = w * h
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = (wi * hgt) / ((area[rows, None] + area) - wi * hgt)
    return np.where((wi <= 0) | (hgt <= 0), np.zeros((), iou.dtype), iou)


def _centred_extents(boxes: np.ndarray) -> tuple:
    """(lo_x, hi_x, lo_y, hi_y, w, h) of boxes given as (x centre, y centre, w, h)."""
    x, y, w, h = (boxes[:, i] for i in range(4))
    return x - w / 2, x + w / 2, y - h / 2, y + h / 2, w, h


def _corner_extents(boxes: np.ndarray) -> tuple:
    """(lo_x, hi_x, lo_y, hi_y, w, h) of boxes given by two opposite corners (y1, x1, y2,
    x2), in either order."""
    lo_y, hi_y = np.minimum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 0], boxes[:, 2])
    lo_x, hi_x = np.minimum(boxes[:, 1], boxes[:, 3]), np.maximum(boxes[:, 1], boxes[:, 3])
    return lo_x, hi_x, lo_y, hi_y, hi_x - lo_x, hi_y - lo_y


def _greedy_survivors(extents: tuple, threshold, limit: int = 0) -> np.ndarray:
    """Which of the boxes (in visiting order) survive greedy suppression: each survivor
    removes the later boxes that overlap it by more than ``threshold``; past ``limit``
    survivors (0: no limit) the rest count as removed.  The overlaps with later boxes come
    in blocks of rows, and only rows that overlap a later box are visited."""
    n = extents[0].shape[0]
    alive = np.ones(n, bool)
    step = max(1, min(256, _ROWS // max(1, n)))
    for start in range(0, n - 1, step):
        rows = np.arange(start, min(n, start + step))
        later = [e[start:] for e in extents]
        over = (_pairwise_iou(*later, rows=rows - start) > threshold) \
            & (np.arange(start, n) > rows[:, None])
        for r in np.flatnonzero(over.any(axis=1)):
            if alive[rows[r]]:
                alive[start:] &= ~over[r]
        if limit and alive[:rows[-1] + 1].sum() >= limit:
            alive[rows[-1] + 1:] = False
            break
    return alive


# -- YOLO-style detections ------------------------------------------------------------

class NmsDetection2d(Function):
    """Detections (B, N, 5 + C) of (x, y, w, h, objectness, class probabilities): the
    boxes copied, objectness and objectness * probability zeroed below ``thresh``, then
    suppressed (zeroed) where a box of higher score overlaps by IoU > ``nms``: per class
    with the class scores, greedily (``nms_per_class``), else with the objectness, a box
    losing all its scores to any box ranked before it, suppressed or not (nnabla's)."""

    nnabla_spec = FunctionSpec("NmsDetection2d", "nms_detection2d_param",
                               ("thresh", "nms", "nms_per_class"),
                               attrs("thresh", "nms", "nms_per_class"),
                               call("nms_detection2d", "thresh", "nms", "nms_per_class"))

    differentiable = False

    def __init__(self, thresh: float, nms: float, nms_per_class: bool):
        self.thresh, self.nms, self.nms_per_class = thresh, nms, nms_per_class

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim != 3 or x.shape[2] <= 5:
            raise self.error(f"x must be 3-D (batch, boxes, 5 + classes) with at least one "
                             f"class, got shape {x.shape}")
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x = to_module(xs[0], np)
        thresh = np.float32(self.thresh)
        y = x.copy()
        objectness = np.where(x[..., 4] < thresh, 0, x[..., 4]).astype(x.dtype)
        y[..., 4] = objectness
        scores = objectness[..., None] * x[..., 5:]
        y[..., 5:] = np.where(scores < thresh, 0, scores)
        for b in range(x.shape[0]):
            if self.nms_per_class:
                self._per_class(y[b])
            else:
                self._by_objectness(y[b])
        return (xp.asarray(y),)

    def _per_class(self, y: np.ndarray) -> None:
        """Greedy suppression of each class's scores in ``y`` (N, 5 + C), in place."""
        crowded = np.flatnonzero((y[:, 5:] != 0).sum(axis=0) > 1)  # others suppress none
        for k in crowded + 5:
            scores = y[:, k]
            order = _visiting_order(scores, scores != 0)
            candidates = order[scores[order] != 0]
            extents = _centred_extents(y[candidates, :4])
            scores[candidates[~_greedy_survivors(extents, np.float32(self.nms))]] = 0

    def _by_objectness(self, y: np.ndarray) -> None:
        """Suppression by objectness in ``y`` (N, 5 + C), in place: a box ranked after
        one it overlaps by more than ``nms`` loses all its scores."""
        order = _visiting_order(y[:, 4], y[:, 4] != 0)
        extents = _centred_extents(y[order, :4])
        positions = np.flatnonzero(y[order, 4] != 0)
        step = max(1, _ROWS // max(1, len(order)))
        for start in range(0, len(positions), step):
            rows = positions[start:start + step]
            over = _pairwise_iou(*extents, rows=rows) > np.float32(self.nms)
            earlier = np.arange(len(order)) < rows[:, None]
            lost = order[rows[(over & earlier).any(axis=1)]]
            y[lost, 4:] = 0


def nms_detection2d(x: Variable, thresh: float | None = None, nms: float | None = None,
                    nms_per_class: bool | None = None, n_outputs: int = -1,
                    outputs=None) -> Variable:
    """Non-maximum suppression of YOLO-style detections (B, N, 5 + C): see
    NmsDetection2d; ``thresh`` 0.5, ``nms`` 0.45 and ``nms_per_class`` True by default."""
    owner = "F.nms_detection2d"
    default_outputs(owner, n_outputs, outputs)
    thresh = number_of(owner, "thresh", none_to(thresh, 0.5))
    nms = number_of(owner, "nms", none_to(nms, 0.45))
    per_class = flag_of(owner, "nms_per_class", none_to(nms_per_class, True))
    return NmsDetection2d(thresh, nms, per_class)(x)


# -- ONNX's NonMaxSuppression ----------------------------------------------------------

class ONNXNonMaxSuppression(Function):
    """The (batch, class, box) indices (uint64, as nnabla's) of the boxes kept by greedy
    suppression per batch and class: boxes (B, N, 4) as corners (y1, x1, y2, x2) or, with
    ``center_point_box``, as (x centre, y centre, w, h); scores (B, C, N) kept where >=
    ``score_threshold``; a box removed where one of higher score overlaps it by IoU >
    ``iou_threshold``; at most ``max_output_boxes_per_class`` each (0: none).  nnabla
    computes it when the graph is built and its forward does nothing; dpnb computes it
    then too (for the output's shape) and again at each forward, from the data then."""

    nnabla_spec = FunctionSpec("ONNXNonMaxSuppression", "onnx_non_max_suppression_param",
                               ("center_point_box", "max_output_boxes_per_class",
                                "iou_threshold", "score_threshold"),
                               attrs("center_point_box", "max_output_boxes_per_class",
                                     "iou_threshold", "score_threshold"),
                               call("onnx_non_max_suppression", "center_point_box",
                                    "max_output_boxes_per_class", "iou_threshold",
                                    "score_threshold"))

    differentiable = False

    def __init__(self, center_point_box: int, max_output_boxes_per_class: int,
                 iou_threshold: float, score_threshold: float):
        self.center_point_box = center_point_box
        self.max_output_boxes_per_class = max_output_boxes_per_class
        self.iou_threshold, self.score_threshold = iou_threshold, score_threshold

    def output_specs(self, inputs):
        boxes, scores = inputs
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise self.error(f"boxes must be 3-D (batch, boxes, 4), got shape {boxes.shape}")
        if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] \
                or scores.shape[2] != boxes.shape[1]:
            raise self.error(f"scores must be 3-D (batch, classes, boxes) = ({boxes.shape[0]}, "
                             f"C, {boxes.shape[1]}) for boxes of shape {boxes.shape}, got "
                             f"shape {scores.shape}")
        count = 0
        if boxes.data.allocated and scores.data.allocated:
            count = len(self._selected(to_module(boxes.d, np), to_module(scores.d, np)))
        return [((count, 3), np.dtype(np.uint64))]

    def _selected(self, boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """The (M, 3) indices nnabla's kernel selects, on host arrays."""
        rows = []
        limit = self.max_output_boxes_per_class
        extents_of = _centred_extents if self.center_point_box else _corner_extents
        for b in range(boxes.shape[0] if limit else 0):
            for k in range(scores.shape[1]):
                s = scores[b, k]
                kept = s >= np.float32(self.score_threshold)
                order = _visiting_order(s, kept)
                candidates = order[kept[order]]
                extents = extents_of(boxes[b, candidates])
                chosen = candidates[_greedy_survivors(extents, np.float32(self.iou_threshold),
                                                      limit)]
                rows += [(b, k, i) for i in chosen[:limit].tolist()]
        return np.array(rows, np.uint64).reshape(len(rows), 3)

    def forward_arrays(self, xp, xs):
        selected = self._selected(to_module(xs[0], np), to_module(xs[1], np))
        if selected.shape != self.outputs[0].shape:  # the count is known only now
            self.outputs[0].data.reset_shape(selected.shape, force=True)
        return (xp.asarray(selected),)


def onnx_non_max_suppression(boxes: Variable, scores: Variable,
                             center_point_box: int | None = None,
                             max_output_boxes_per_class: int | None = None,
                             iou_threshold: float | None = None,
                             score_threshold: float | None = None, n_outputs: int = -1,
                             outputs=None) -> Variable:
    """ONNX's NonMaxSuppression: the (M, 3) indices (batch, class, box) of the boxes kept;
    see ONNXNonMaxSuppression.  Defaults: corners, no box (max 0), thresholds 0."""
    owner = "F.onnx_non_max_suppression"
    default_outputs(owner, n_outputs, outputs)
    center = number_of(owner, "center_point_box", none_to(center_point_box, 0), integer=True)
    if center not in (0, 1):
        raise argument_error(owner, f"center_point_box must be 0 (corners y1, x1, y2, x2) or "
                                    f"1 (x centre, y centre, w, h), got {center}")
    limit = number_of(owner, "max_output_boxes_per_class", none_to(max_output_boxes_per_class, 0),
                      integer=True)
    if limit < 0:
        raise argument_error(owner, f"max_output_boxes_per_class must be >= 0, got {limit}")
    iou = number_of(owner, "iou_threshold", none_to(iou_threshold, 0.0))
    score = number_of(owner, "score_threshold", none_to(score_threshold, 0.0))
    return ONNXNonMaxSuppression(center, limit, iou, score)(boxes, scores)


# -- RoI Align ------------------------------------------------------------------------

_CHUNK = 1 << 24  # elements of the per-box intermediate products computed at once


def _sampling_matrices(x1, x2, size: int, out: int, sampling_ratio: int):
    """Per box, the (out, size) matrix averaging the bilinear samples of one axis: box k
    spans [x1[k], x2[k]) split into ``out`` bins of ``grid[k]`` samples each (the
    ``sampling_ratio``, else the bin's size rounded up), a sample beyond [-1, size]
    counting as zero; and ``grid``.  In the boxes' float type, as nnabla's kernel."""
    t = x1.dtype.type
    step = (x2 - x1) / t(out)
    with np.errstate(invalid="ignore", over="ignore"):
        grid = (np.full(step.shape, sampling_ratio) if sampling_ratio > 0
                else np.ceil(step).astype(np.int64))
    samples = max(1, int(grid.max(initial=1)))
    k, o, s = np.ogrid[:len(x1), :out, :samples]
    with np.errstate(divide="ignore", invalid="ignore"):  # no samples: no valid ones below
        sub = step / grid.astype(x1.dtype)
        at = (x1[:, None, None] + o.astype(t) * step[:, None, None]
              + s.astype(t) * sub[:, None, None]) + t(0.5) * sub[:, None, None]
    valid = (s < grid[:, None, None]) & ~((at < -1) | (at > size))
    at = np.where(valid, np.maximum(at, 0), 0).astype(x1.dtype)
    low = at.astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, low, low + 1)
    frac = np.where(edge, 0, at - np.floor(at)).astype(x1.dtype)
    matrix = np.zeros((len(x1), out, size), x1.dtype)
    rows = np.broadcast_to(k * out + o, low.shape)
    flat = matrix.reshape(-1, size)
    np.add.at(flat, (rows[valid], low[valid]), (1 - frac)[valid])
    np.add.at(flat, (rows[valid], high[valid]), frac[valid])
    return matrix, grid


class RoiAlign(Function):
    """Features (K, C, OH, OW) of ``boxes`` (K, 5) = (batch index, x1, y1, x2, y2) in
    ``input`` (N, C, H, W): the box scaled by ``spatial_scale`` (y, x) and shifted by half
    a pixel, each output bin the mean of bilinear samples on a grid of
    ``sampling_ratio`` (else the bin's size rounded up) per axis.  Linear in the input;
    the boxes get no gradient, as in nnabla.  ``channel_last`` (NHWC), which nnabla's CPU
    build refuses, computes as its CUDA one."""

    nnabla_spec = FunctionSpec("RoiAlign", "roi_align_param",
                               ("output_size", "spatial_scale", "sampling_ratio",
                                "channel_last"),
                               lambda fn: {"output_size": ints(fn.output_size),
                                           "spatial_scale": list(fn.spatial_scale),
                                           "sampling_ratio": fn.sampling_ratio,
                                           "channel_last": fn.channel_last},
                               call("roi_align", "output_size", "spatial_scale",
                                    "sampling_ratio", "channel_last"))

    grad_skips_inputs = (0,)  # backward reads the boxes alone

    def __init__(self, output_size: tuple[int, int], spatial_scale: tuple[float, float],
                 sampling_ratio: int, channel_last: bool):
        self.output_size, self.spatial_scale = output_size, spatial_scale
        self.sampling_ratio, self.channel_last = sampling_ratio, channel_last

    def output_specs(self, inputs):
        x, boxes = inputs
        if x.ndim != 4:
            raise self.error(f"input must be 4-D (N, C, H, W){' in NHWC' * self.channel_last}"
                             f", got shape {x.shape}")
        if boxes.ndim != 2 or boxes.shape[1] != 5:
            raise self.error(f"boxes must be (K, 5) rows of (batch index, x1, y1, x2, y2), "
                             f"got shape {boxes.shape}")
        self.x_shape = x.shape
        n, c, h, w = self._first_shape(x.shape)
        oh, ow = self.output_size
        shape = (boxes.shape[0], oh, ow, c) if self.channel_last else (boxes.shape[0], c, oh, ow)
        return [(shape, x.dtype)]

    def _first_shape(self, shape):
        """``shape`` of the input as (N, C, H, W)."""
        return (shape[0], shape[3], shape[1], shape[2]) if self.channel_last else tuple(shape)

    def _maps(self, xp, boxes, dtype):
        """(batch index, rows matrices (K, OH, H) scaled by 1 / samples, columns matrices
        (K, OW, W), boxes without samples (their output is NaN, as nnabla's)) of the
        boxes."""
        n, _, h, w = self._first_shape(self.x_shape)
        b = to_module(boxes, np).astype(dtype)
        index = np.trunc(b[:, 0]).astype(np.int64)
        wrong = np.flatnonzero((index < 0) | (index >= n))
        if len(wrong):
            raise self.error(f"box {wrong[0]} has batch index {b[wrong[0], 0]}; it must lie in "
                             f"[0, {n}) for an input of {n} samples")
        t = b.dtype.type
        scale_y, scale_x = (t(np.float32(s)) for s in self.spatial_scale)
        x1, y1 = b[:, 1] * scale_x - t(0.5), b[:, 2] * scale_y - t(0.5)
        x2, y2 = b[:, 3] * scale_x - t(0.5), b[:, 4] * scale_y - t(0.5)
        rows, grid_y = _sampling_matrices(y1, y2, h, self.output_size[0], self.sampling_ratio)
        columns, grid_x = _sampling_matrices(x1, x2, w, self.output_size[1], self.sampling_ratio)
        count = grid_x * grid_y
        with np.errstate(divide="ignore"):
            rows *= (t(1) / np.where(count == 0, 1, count).astype(dtype))[:, None, None]
        return index, xp.asarray(rows), xp.asarray(columns), count == 0

    def _groups(self, index):
        """The boxes of each sample, in chunks that bound the intermediate products."""
        _, c, h, w = self._first_shape(self.x_shape)
        oh, ow = self.output_size
        chunk = max(1, _CHUNK // max(1, c * oh * max(h, w, ow)))
        for sample in np.unique(index):
            boxes = np.flatnonzero(index == sample)
            for start in range(0, len(boxes), chunk):
                yield int(sample), boxes[start:start + chunk]

    def forward_arrays(self, xp, xs):
        x, boxes = xs
        if self.channel_last:
            x = xp.moveaxis(x, -1, 1)
        index, rows, columns, empty = self._maps(xp, boxes, x.dtype)
        _, c, h, w = x.shape
        oh, ow = self.output_size
        y = xp.zeros((len(index), c, oh, ow), x.dtype)
        for sample, ks in self._groups(index):
            ks_x = xp.asarray(ks)
            # rows of every box at once: (C, Kc * OH, W), then each box's columns
            t = xp.matmul(rows[ks_x].reshape(-1, h), x[sample])
            t = t.reshape(c, len(ks), oh, w).transpose(1, 0, 2, 3)
            y[ks_x] = xp.matmul(t, columns[ks_x].transpose(0, 2, 1)[:, None])
        if empty.any():
            y[xp.asarray(np.flatnonzero(empty))] = np.nan
        return (xp.ascontiguousarray(xp.moveaxis(y, 1, -1)) if self.channel_last else y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[0]:
            return (None, None)
        gy = xp.moveaxis(gys[0], -1, 1) if self.channel_last else gys[0]
        n, c, h, w = self._first_shape(self.x_shape)
        index, rows, columns, _ = self._maps(xp, xs[1], gy.dtype)
        oh = self.output_size[0]
        gx = xp.zeros((n, c, h, w), gy.dtype)
        for sample, ks in self._groups(index):
            ks_x = xp.asarray(ks)
            u = xp.matmul(gy[ks_x], columns[ks_x][:, None])  # (Kc, C, OH, W)
            u = u.transpose(1, 0, 2, 3).reshape(c, len(ks) * oh, w)
            gx[sample] += xp.matmul(rows[ks_x].reshape(-1, h).T, u)
        return (xp.ascontiguousarray(xp.moveaxis(gx, 1, -1)) if self.channel_last else gx, None)

    backward_graph = linear_backward_graph  # linear in the input; the boxes only place


def roi_align(input: Variable, boxes: Variable, output_size: Sequence[int],
              spatial_scale: Sequence[float] = (1.0, 1.0), sampling_ratio: int | None = None,
              channel_last: bool | None = None, n_outputs: int = -1,
              outputs=None) -> Variable:
    """RoI Align (Mask R-CNN): ``output_size`` (height, width) features of each box
    (batch index, x1, y1, x2, y2) of ``boxes``; see RoiAlign.  ``sampling_ratio`` <= 0
    (the default, -1) samples each bin by its size rounded up."""
    owner = "F.roi_align"
    default_outputs(owner, n_outputs, outputs)
    size = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,)
    if len(size) != 2 or not all(isinstance(s, (int, np.integer)) and s > 0 for s in size):
        raise argument_error(owner, f"output_size must be 2 ints > 0 (height, width), got "
                                    f"{output_size!r}")
    scale = tuple(spatial_scale) if isinstance(spatial_scale, (tuple, list)) else ()
    if len(scale) != 2:
        raise argument_error(owner, f"spatial_scale must be 2 numbers (y, x), got "
                                    f"{spatial_scale!r}")
    scale = tuple(number_of(owner, "spatial_scale", s) for s in scale)
    ratio = number_of(owner, "sampling_ratio", none_to(sampling_ratio, -1), integer=True)
    last = flag_of(owner, "channel_last", none_to(channel_last, False))
    return RoiAlign(tuple(int(s) for s in size), scale, ratio, last)(input, boxes)
