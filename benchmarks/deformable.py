"""F.deformable_convolution's forward and backward (DCNv2: offsets and a mask, every
input taking a gradient) against dpnb's own F.convolution of the same shape (batch 8,
64 -> 64 maps, 3x3, 32x32, pad 1, one BLAS thread): what the bilinear im2col and its
scatter cost beside a plain im2col convolution.

Each function runs in its own process, several times alternately; the table shows the
medians of the per-run median step times.  ``--record`` writes them to
benchmarks/results/deformable.json, ``--json PATH`` to PATH.

    python benchmarks/deformable.py [--steps 10] [--runs 3] [--json PATH] [--record]
"""
from __future__ import annotations

import argparse
import json
import statistics

from timing import add_output_options, output_of, run_worker

from dpnb.testing import median_seconds

BATCH, MAPS, SIZE, KERNEL = 8, 64, 32, 3
WORKERS = ("deformable", "convolution")


def worker(name: str, steps: int) -> dict:
    import numpy as np

    import dpnb as nn
    import dpnb.functions as F

    rng = np.random.RandomState(0)

    def variable(values):
        return nn.Variable.from_numpy_array(values.astype(np.float32), need_grad=True)

    x = variable(rng.randn(BATCH, MAPS, SIZE, SIZE))
    w = variable(rng.randn(MAPS, MAPS, KERNEL, KERNEL) * 0.05)
    b = variable(np.zeros(MAPS))
    if name == "deformable":
        k = KERNEL * KERNEL
        offset = variable(rng.uniform(-2, 2, (BATCH, 2 * k, SIZE, SIZE)))
        mask = variable(rng.rand(BATCH, k, SIZE, SIZE))
        y = F.deformable_convolution(x, w, offset, mask, b, pad=(1, 1))
    else:
        y = F.convolution(x, w, b, pad=(1, 1))

    def step():
        y.forward()
        y.backward(clear_buffer=True)

    return {"step_s": median_seconds(step, steps, warmup=2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker", choices=WORKERS)
    add_output_options(parser, "deformable")
    args = parser.parse_args()
    output = output_of(args)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps)))
        return

    runs = {name: [] for name in WORKERS}
    for _ in range(args.runs):
        for name in WORKERS:
            runs[name].append(run_worker(__file__, name, "--steps", str(args.steps)))
    result = {name: {"step_s": statistics.median(r["step_s"] for r in rs), "runs": rs}
              for name, rs in runs.items()}
    result["ratio_time"] = result["deformable"]["step_s"] / result["convolution"]["step_s"]
    print(f"forward + backward, batch {BATCH}, {MAPS} -> {MAPS} maps, {KERNEL}x{KERNEL}, "
          f"{SIZE}x{SIZE}, pad 1, 1 thread, median of {args.runs} runs x {args.steps} steps")
    for name in WORKERS:
        print(f"{name:12} {1e3 * result[name]['step_s']:8.1f} ms")
    print(f"deformable / convolution: {result['ratio_time']:.2f}x (target <= 3)")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
