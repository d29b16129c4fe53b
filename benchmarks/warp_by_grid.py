"""Bilinear warping by a sampling grid, forward and backward (batch 8, 32 channels,
64x64, a random affine grid, zero padding, align_corners False, one thread): dpnb's
F.warp_by_grid against PyTorch's grid_sample on the same data.

Each framework runs in its own process, several times alternately; the table shows the
medians of the per-run median times of one forward + backward (gradients to the image
and to the grid) and of the forward alone.  ``--record`` writes them to
benchmarks/results/warp_by_grid.json, ``--json PATH`` to PATH.

    python benchmarks/warp_by_grid.py [--steps 20] [--runs 3] [--json PATH] [--record]
"""
from __future__ import annotations


from timing import (add_ratios, alternate_workers, median_figures, output_of,
                    serve_as_worker, worker_parser)

from dpnb.testing import median_seconds

BATCH, CHANNELS, SIZE = 8, 32, 64


def inputs():
    """The image and the grid both frameworks warp: x (B, C, H, W) and the points of
    random affine maps near the identity (B, H, W, 2), in float32."""
    import numpy as np

    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, CHANNELS, SIZE, SIZE).astype(np.float32)
    theta = np.concatenate([np.eye(2), np.zeros((2, 1))], axis=1) + 0.2 * rng.randn(BATCH, 2, 3)
    t = (2 * np.arange(SIZE) + 1) / SIZE - 1          # pixel centres, align_corners False
    ys, xs = np.meshgrid(t, t, indexing="ij")
    points = np.stack([xs.ravel(), ys.ravel(), np.ones(SIZE * SIZE)], axis=1)
    grid = (points @ theta.transpose(0, 2, 1)).reshape(BATCH, SIZE, SIZE, 2)
    return x, grid.astype(np.float32)


def dpnb_worker(steps: int) -> dict:
    import dpnb as nn
    import dpnb.functions as F

    x_data, grid_data = inputs()
    x = nn.Variable.from_numpy_array(x_data, need_grad=True)
    grid = nn.Variable.from_numpy_array(grid_data, need_grad=True)
    y = F.warp_by_grid(x, grid, "linear", "zero", False)

    def step():
        y.forward(clear_no_need_grad=True)
        x.grad.zero()
        grid.grad.zero()
        y.backward()

    return {"step_s": median_seconds(step, steps, warmup=2),
            "forward_s": median_seconds(lambda: y.forward(), steps, warmup=2)}


def torch_worker(steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    x_data, grid_data = inputs()
    x = torch.from_numpy(x_data).requires_grad_(True)
    grid = torch.from_numpy(grid_data).requires_grad_(True)

    def sample():
        return torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                                               align_corners=False)

    def step():
        x.grad = grid.grad = None
        y = sample()
        y.backward(torch.ones_like(y))

    def forward():
        with torch.no_grad():
            sample()

    return {"step_s": median_seconds(step, steps, warmup=2),
            "forward_s": median_seconds(forward, steps, warmup=2), "torch": torch.__version__}


def main() -> None:
    args = worker_parser(__doc__, "warp_by_grid").parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return

    runs = alternate_workers(__file__, args.runs, args.steps)
    result = median_figures(runs, ("step_s", "forward_s"))
    print(f"warp_by_grid bilinear, batch {BATCH}, {CHANNELS} channels, {SIZE}x{SIZE}, 1 thread, "
          f"median of {args.runs} runs x {args.steps} steps")
    print(f"{'':8} {'fwd+bwd ms':>11} {'forward ms':>11}")
    for name, r in result.items():
        print(f"{name:8} {1e3 * r['step_s']:11.1f} {1e3 * r['forward_s']:11.1f}")
    if add_ratios(result, ratio_time="step_s", ratio_forward="forward_s"):
        print(f"dpnb / torch: forward + backward {result['ratio_time']:.2f}x (target <= 2), "
              f"forward {result['ratio_forward']:.2f}x")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
