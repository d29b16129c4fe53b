"""The detection functions beyond the cases recorded from nnabla: RoI Align on NHWC (which
nnabla's CPU build refuses) against nnabla's NCHW record, the order equal scores are
visited in, the checks at the door, and what dpnb does where nnabla's kernels say nothing."""
from pathlib import Path

import numpy as np
import pytest
from nnabla_cases import functions_detection as cases

import dpnb as nn
import dpnb.functions as F
from dpnb.errors import DpnbError
from dpnb.functions.detection import _StdSort, _visiting_order

RECORD = np.load(Path(__file__).parent / "fixtures" / "nnabla" / "functions" / "detection.npz")


def test_roi_align_channel_last_is_the_transposed_channel_first_of_nnabla():
    """NHWC in and out, as nnabla's CUDA build: the values and input gradient nnabla's
    CPU build recorded for NCHW, transposed."""
    name = "roi_align sampling_ratio=2 spatial_scale=(0.7, 1.5)"
    x = nn.Variable.from_numpy_array(cases.FEATURES.transpose(0, 2, 3, 1).copy(), need_grad=True)
    y = F.roi_align(x, nn.Variable.from_numpy_array(cases.ROIS[:3]), (3, 2), (0.7, 1.5), 2,
                    channel_last=True)
    y.forward()
    np.testing.assert_allclose(y.d, RECORD[f"{name}::y0"].transpose(0, 2, 3, 1), rtol=1e-5,
                               atol=1e-6)
    gy = np.random.RandomState(100).randn(*RECORD[f"{name}::y0"].shape)  # the fixture's
    x.grad.zero()
    y.backward(gy.transpose(0, 2, 3, 1))
    np.testing.assert_allclose(x.g, RECORD[f"{name}::g0"].transpose(0, 2, 3, 1), rtol=1e-5,
                               atol=1e-6)


def test_std_sort_orders_descending_and_keeps_short_runs_stable():
    """libstdc++ sorts runs of up to 16 by insertion, which keeps equal keys in place; any
    length comes out descending, through the heap sort too."""
    rng = np.random.RandomState(0)
    for n in (1, 2, 5, 16, 17, 100, 1000):
        keys = np.round(rng.rand(n) * 3).astype(np.float32)
        order = _StdSort(keys).sorted()
        assert sorted(order) == list(range(n))
        assert np.all(np.diff(keys[order]) <= 0)
        if n <= 16:
            assert order == np.argsort(-keys, kind="stable").tolist()
    heap = _StdSort(np.round(rng.rand(50) * 3))
    heap.heap_sort(0, 50)
    assert np.all(np.diff(np.array(heap.key)[heap.a]) <= 0)


def test_visiting_order_sorts_fast_where_no_counted_scores_tie():
    """Without ties among the counted scores any descending sort gives their order."""
    scores = np.array([0.0, 0.5, 0.0, 0.9, 0.1] * 5, np.float32)
    scores[1::5] += np.arange(5, dtype=np.float32) / 100
    scores[3::5] += np.arange(5, dtype=np.float32) / 100
    scores[4::5] += np.arange(5, dtype=np.float32) / 100
    counted = scores != 0
    fast = _visiting_order(scores, counted)
    exact = np.array(_StdSort(scores).sorted())
    assert fast[counted[fast]].tolist() == exact[counted[exact]].tolist()


def test_onnx_nms_follows_the_data_at_each_forward():
    """nnabla computes the indices once, when the graph is built; dpnb again at each forward
    (the output takes its new count)."""
    boxes = nn.Variable.from_numpy_array(np.array([[[0, 0, 1, 1], [0, 0, 1, 0.9],
                                                    [2, 2, 3, 3]]], np.float32))
    scores = nn.Variable.from_numpy_array(np.array([[[0.9, 0.8, 0.7]]], np.float32))
    y = F.onnx_non_max_suppression(boxes, scores, 0, 10, 0.5, 0.1)
    assert y.shape == (2, 3) and y.d.dtype == np.uint64
    y.forward()
    assert y.d.tolist() == [[0, 0, 0], [0, 0, 2]]
    scores.d = np.array([[[0.9, 0.95, 0.05]]], np.float32)
    y.forward()
    assert y.d.tolist() == [[0, 0, 1]]


def test_nms_functions_carry_no_gradient():
    x = nn.Variable.from_numpy_array(cases.DETECTIONS, need_grad=True)
    assert not F.nms_detection2d(x).need_grad
    b, s = (nn.Variable.from_numpy_array(a, need_grad=True) for a in (cases.BOXES, cases.SCORES))
    assert not F.onnx_non_max_suppression(b, s, max_output_boxes_per_class=3).need_grad


def test_roi_align_box_without_samples_gives_nan_and_no_gradient():
    """A box whose bins hold no samples (x2 < x1 rounds the count up to 0) divides zero by
    zero in nnabla's kernel: NaN out, nothing back."""
    x = nn.Variable.from_numpy_array(cases.FEATURES, need_grad=True)
    y = F.roi_align(x, nn.Variable.from_numpy_array(cases.ROIS[3:]), (2, 2))
    y.forward()
    assert np.isnan(y.d).all()
    x.grad.zero()
    y.backward(np.ones(y.shape))
    assert not x.g.any()


@pytest.mark.parametrize("call, message", [
    (lambda: F.nms_detection2d(nn.Variable((2, 4, 5))), "at least one class"),
    (lambda: F.nms_detection2d(nn.Variable((2, 4, 6)), nms_per_class=1), "must be a bool"),
    (lambda: F.onnx_non_max_suppression(nn.Variable((1, 3, 4)), nn.Variable((1, 2, 4))),
     "scores must be 3-D"),
    (lambda: F.onnx_non_max_suppression(nn.Variable((1, 3, 4)), nn.Variable((1, 2, 3)), 2),
     "center_point_box must be 0"),
    (lambda: F.onnx_non_max_suppression(nn.Variable((1, 3, 4)), nn.Variable((1, 2, 3)), 0, -1),
     "max_output_boxes_per_class must be >= 0"),
    (lambda: F.roi_align(nn.Variable((1, 2, 4, 4)), nn.Variable((3, 4)), (2, 2)),
     r"boxes must be \(K, 5\)"),
    (lambda: F.roi_align(nn.Variable((1, 2, 4, 4)), nn.Variable((3, 5)), (2, 0)),
     "output_size must be 2 ints > 0"),
    (lambda: F.roi_align(nn.Variable((1, 2, 4, 4)), nn.Variable((3, 5)), (2, 2), (1.0,)),
     "spatial_scale must be 2 numbers"),
])
def test_arguments_are_checked_at_the_door(call, message):
    with pytest.raises(DpnbError, match=message):
        call()


def test_roi_align_batch_index_out_of_range_is_an_error():
    """As nnabla's CPU build: the batch index, truncated, must name a sample."""
    x = nn.Variable.from_numpy_array(cases.FEATURES)
    y = F.roi_align(x, nn.Variable.from_numpy_array(np.array([[2, 0, 0, 2, 2]], np.float32)),
                    (2, 2))
    with pytest.raises(DpnbError, match=r"batch index 2.0; it must lie in \[0, 2\)"):
        y.forward()
