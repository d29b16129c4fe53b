"""Object detection cases (see functions.py): YOLO-style and ONNX non-maximum suppression
and RoI Align.

The NMS functions have no gradient (grad=False).  Their inputs include scores rounded to
quarters over more than 16 boxes, so that equal scores are many and libstdc++'s std::sort,
which nnabla sorts with and which is not stable, decides which of them suppresses which.
RoI Align is linear in its input, so its gradient is the true derivative (fd=True); the
boxes get none (need_grad False), as in nnabla.  nnabla's CPU build refuses
channel_last=True, so no case records it."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def detections(batch: int, boxes: int, classes: int, tied: bool) -> np.ndarray:
    """(batch, boxes, 5 + classes): centres in [0, 1), sizes in [0, 0.5), scores in [0, 1)
    (rounded to quarters where ``tied``)."""
    x = R.rand(batch, boxes, 5 + classes)
    x[..., 2:4] *= 0.5
    if tied:
        x[..., 4:] = np.round(x[..., 4:] * 4) / 4
    return x.astype(np.float32)


def onnx_inputs(batch: int, boxes: int, classes: int, tied: bool) -> tuple:
    """Boxes (batch, boxes, 4) in [0, 1) and scores (batch, classes, boxes) (rounded to
    fifths where ``tied``)."""
    scores = R.rand(batch, classes, boxes)
    if tied:
        scores = np.round(scores * 5) / 5
    return R.rand(batch, boxes, 4).astype(np.float32), scores.astype(np.float32)


DETECTIONS = detections(2, 7, 3, tied=False)
TIED_DETECTIONS = detections(2, 40, 3, tied=True)
BOXES, SCORES = onnx_inputs(2, 9, 3, tied=False)
TIED_BOXES, TIED_SCORES = onnx_inputs(1, 40, 2, tied=True)

FEATURES = R.randn(2, 3, 6, 7).astype(np.float32)
ROIS = np.array([[0, 0.5, 1.0, 5.0, 4.5], [1, -2.0, 0.0, 8.0, 7.0], [1, 2.2, 2.4, 2.6, 3.1],
                 [0, 3.0, 3.0, 1.0, 1.5]], np.float32)  # the last has x2 < x1, y2 < y1


def nms(label: str, x: np.ndarray, **kw) -> Case:
    return Case(f"nms_detection2d {label}", lambda lib, v: lib.F.nms_detection2d(v, **kw), (x,),
                grad=False)


def onnx(label: str, boxes: np.ndarray, scores: np.ndarray, *args) -> Case:
    return Case(f"onnx_non_max_suppression {label}",
                lambda lib, b, s: lib.F.onnx_non_max_suppression(b, s, *args), (boxes, scores),
                grad=False)


def roi(label: str, rois: np.ndarray, *args, **kw) -> Case:
    return Case(f"roi_align {label}", lambda lib, x, b: lib.F.roi_align(x, b, *args, **kw),
                (FEATURES, rois), need_grad=(True, False))


CASES = [
    nms("defaults", DETECTIONS),
    nms("by objectness", DETECTIONS, nms_per_class=False),
    nms("thresh=0.2 nms=0.1", DETECTIONS, thresh=0.2, nms=0.1),
    nms("tied per class", TIED_DETECTIONS, thresh=0.1, nms=0.2),
    nms("tied by objectness", TIED_DETECTIONS, thresh=0.1, nms=0.2, nms_per_class=False),
    onnx("defaults", BOXES, SCORES),
    onnx("corners", BOXES, SCORES, 0, 100, 0.3, 0.2),
    onnx("centres at most 2", BOXES, SCORES, 1, 2, 0.1, 0.0),
    onnx("iou_threshold=1", BOXES, SCORES, 0, 5, 1.0, 0.5),
    onnx("tied corners", TIED_BOXES, TIED_SCORES, 0, 100, 0.2, 0.2),
    onnx("tied centres", TIED_BOXES, TIED_SCORES, 1, 100, 0.05, 0.0),
    roi("defaults", ROIS[:3], (2, 3)),
    roi("sampling_ratio=2 spatial_scale=(0.7, 1.5)", ROIS[:3], (3, 2), (0.7, 1.5), 2),
    roi("sampling_ratio=1 reversed box", ROIS, (2, 2), sampling_ratio=1),
    roi("one box 1x1", ROIS[1:2], [1, 1], spatial_scale=[0.5, 0.5]),
]
