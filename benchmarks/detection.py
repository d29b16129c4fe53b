"""The detection functions on one CPU thread: dpnb against the real nnabla, RoI Align
forward and backward (Mask R-CNN's head: 256 boxes, 7x7 bins, 2x2 samples, on 2 maps of 64
channels, 50x50), YOLOv2's NMS per class (845 boxes, 80 classes, batch 4) and ONNX NMS
(1000 boxes, 20 classes, at most 100 each).

Each framework runs the same code in its own process (nnabla with the Python given by
``--nnabla-python``, $DPNB_NNABLA_PYTHON, or /root/nnvenv/bin/python where it exists),
several times alternately; the table shows the medians of the per-run median times and
dpnb's time over nnabla's.  ``--record`` writes them to benchmarks/results/detection.json,
``--json PATH`` to PATH.

    python benchmarks/detection.py [--steps 20] [--runs 3] [--nnabla-python PATH]
                                   [--json PATH] [--record]
"""
from __future__ import annotations

import json
import statistics

from timing import NNABLA_MISSING, alternate_with_nnabla, nnabla_parser, output_of
from tutorial_step import dpnb_timing

TASKS = ("roi_align", "nms_detection2d", "onnx_nms")


def worker(framework: str, steps: int) -> dict:
    """Median seconds of each task with ``framework`` ("dpnb" or "nnabla") as ``nn``."""
    import importlib

    import numpy as np

    nn = importlib.import_module(framework)
    F = importlib.import_module(f"{framework}.functions")
    rng = np.random.RandomState(0)

    features = nn.Variable.from_numpy_array(rng.randn(2, 64, 50, 50).astype(np.float32),
                                            need_grad=True)
    corners = np.sort(rng.uniform(0, 50, (256, 2, 2)), axis=1).reshape(256, 4)
    rois = np.concatenate([rng.randint(0, 2, (256, 1)), corners], 1).astype(np.float32)
    aligned = F.roi_align(features, nn.Variable.from_numpy_array(rois), (7, 7), (1.0, 1.0), 2)
    gy = rng.randn(*aligned.shape).astype(np.float32)

    def roi_step():
        aligned.forward()
        features.grad.zero()
        aligned.backward(gy)

    yolo = rng.rand(4, 845, 85).astype(np.float32)
    yolo[..., 2:4] *= 0.3
    yolo[..., 5:] = rng.dirichlet(np.ones(80) * 0.1, (4, 845))
    nms = F.nms_detection2d(nn.Variable.from_numpy_array(yolo), 0.05, 0.45, True)
    boxes = nn.Variable.from_numpy_array(rng.rand(1, 1000, 4).astype(np.float32))
    scores = nn.Variable.from_numpy_array(rng.rand(1, 20, 1000).astype(np.float32))

    def onnx_step():  # nnabla computes it when the graph is built, so the graph is built
        F.onnx_non_max_suppression(boxes, scores, 0, 100, 0.5, 0.3).forward()

    timing = dpnb_timing()
    return {"roi_align": timing.median_seconds(roi_step, steps, warmup=2),
            "nms_detection2d": timing.median_seconds(nms.forward, steps, warmup=2),
            "onnx_nms": timing.median_seconds(onnx_step, steps, warmup=2),
            "version": getattr(nn, "__version__", None)}


def main() -> None:
    args = nnabla_parser(__doc__, "detection", steps=20, runs=3).parse_args()
    output = output_of(args)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps)))
        return

    runs = alternate_with_nnabla(__file__, args)
    result: dict = {"benchmark": "detection", "steps": args.steps, "runs": args.runs}
    for name, rs in runs.items():
        result[name] = {task: statistics.median(r[task] for r in rs) for task in TASKS}
        result[name]["runs"] = rs
    print(f"Detection functions, 1 thread, median of {args.runs} runs x {args.steps} steps (ms)")
    print(f"{'':8}" + "".join(f"{task:>17}" for task in TASKS))
    for name in runs:
        print(f"{name:8}" + "".join(f"{1e3 * result[name][task]:17.2f}" for task in TASKS))
    if "nnabla" in result:
        result["nnabla_version"] = runs["nnabla"][0]["version"]
        result["ratio_time"] = {task: result["dpnb"][task] / result["nnabla"][task]
                                for task in TASKS}
        print(f"dpnb / nnabla {result['nnabla_version']}: " + ", ".join(
            f"{task} {ratio:.2f}x" for task, ratio in result["ratio_time"].items()))
    else:
        print(NNABLA_MISSING)
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
