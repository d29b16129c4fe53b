"""One training step of a fixed-point quantized CNN (PF.fixed_point_quantized_convolution
twice, PF.fixed_point_quantized_affine; 8-bit weights and biases, straight-through
gradients within the range; batch 32 of 1x28x28, Adam, one BLAS thread): dpnb against
PyTorch running the same network with the quantization written as a straight-through
estimator of its own ops.

Each framework runs in its own process, several times alternately; the table shows the
medians of the per-run median step times, with and without the quantization (the plain
PF.convolution / PF.affine network), so that the cost of the quantized layers is told from
that of the kernels.  ``--record`` writes them to benchmarks/results/compression.json,
``--json PATH`` to PATH.

    python benchmarks/compression.py [--steps 10] [--runs 3] [--json PATH] [--record]
"""
from __future__ import annotations


from timing import (add_ratios, alternate_workers, median_figures, output_of,
                    serve_as_worker, worker_parser)

from dpnb.testing import median_seconds

BATCH, SIZE, CLASSES = 32, 28, 10
MAPS = (16, 32)            # the convolutions: kernel 3, pad 1, each followed by 2x2 pooling
N_BITS, DELTA = 8, 2**-4   # the fixed-point format of weights and biases


def dpnb_worker(steps: int) -> dict:
    import numpy as np

    import dpnb as nn
    import dpnb.functions as F
    import dpnb.parametric_functions as PF
    import dpnb.solvers as S

    def network(x, quantized: bool):
        h = x
        for i, maps in enumerate(MAPS):
            if quantized:
                h = PF.fixed_point_quantized_convolution(h, maps, (3, 3), pad=(1, 1), n_w=N_BITS,
                                                         delta_w=DELTA, n_b=N_BITS,
                                                         delta_b=DELTA, name=f"q{i}")
            else:
                h = PF.convolution(h, maps, (3, 3), pad=(1, 1), name=f"c{i}")
            h = F.max_pooling(F.relu(h), (2, 2))
        if quantized:
            return PF.fixed_point_quantized_affine(h, CLASSES, n_w=N_BITS, delta_w=DELTA,
                                                   n_b=N_BITS, delta_b=DELTA, name="qfc")
        return PF.affine(h, CLASSES, name="fc")

    rng = np.random.RandomState(0)
    x, t = nn.Variable((BATCH, 1, SIZE, SIZE)), nn.Variable((BATCH, 1))
    times = {}
    for label, quantized in (("step_s", True), ("plain_s", False)):
        loss = F.mean(F.softmax_cross_entropy(network(x, quantized), t))
        solver = S.Adam(1e-3)
        solver.set_parameters(nn.get_parameters())

        def step():
            x.d, t.d = rng.randn(*x.shape), rng.randint(0, CLASSES, t.shape)
            loss.forward(clear_no_need_grad=True)
            solver.zero_grad()
            loss.backward(clear_buffer=True)
            solver.update()

        times[label] = median_seconds(step, steps, warmup=2)
        nn.clear_parameters()
    return times


def torch_worker(steps: int) -> dict:
    import torch
    from torch import nn as tnn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    high = (2 ** (N_BITS - 1) - 1) * DELTA

    def quantized(w):
        """Fixed-point w (rounded halves away from zero, saturated) whose gradient passes
        where w lies in the range."""
        q = torch.clamp(torch.sign(w) * torch.floor(w.abs() / DELTA + 0.5) * DELTA, -high, high)
        inside = w * ((w >= -high) & (w <= high))
        return inside + (q - inside).detach()

    class Network(tnn.Module):
        def __init__(self, quantize: bool):
            super().__init__()
            self.quantize = quantize
            self.convs = tnn.ModuleList([tnn.Conv2d(1, MAPS[0], 3, padding=1),
                                         tnn.Conv2d(MAPS[0], MAPS[1], 3, padding=1)])
            self.fc = tnn.Linear(MAPS[1] * (SIZE // 4) ** 2, CLASSES)

        def weights(self, layer):
            if not self.quantize:
                return layer.weight, layer.bias
            return quantized(layer.weight), quantized(layer.bias)

        def forward(self, x):
            for conv in self.convs:
                w, b = self.weights(conv)
                x = torch.max_pool2d(torch.relu(torch.conv2d(x, w, b, padding=1)), 2)
            w, b = self.weights(self.fc)
            return torch.nn.functional.linear(x.flatten(1), w, b)

    times = {}
    for label, quantize in (("step_s", True), ("plain_s", False)):
        net = Network(quantize)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

        def step():
            x = torch.randn(BATCH, 1, SIZE, SIZE)
            t = torch.randint(0, CLASSES, (BATCH,))
            loss = torch.nn.functional.cross_entropy(net(x), t)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        times[label] = median_seconds(step, steps, warmup=2)
    return times | {"torch": torch.__version__}


def main() -> None:
    args = worker_parser(__doc__, "compression").parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return

    runs = alternate_workers(__file__, args.runs, args.steps)
    result = median_figures(runs, ("step_s", "plain_s"))
    print(f"fixed-point quantized CNN step, batch {BATCH}, {SIZE}x{SIZE}, maps {MAPS}, "
          f"1 thread, median of {args.runs} runs x {args.steps} steps")
    print(f"{'':8} {'quantized ms':>13} {'plain ms':>9}")
    for name, r in result.items():
        print(f"{name:8} {1e3 * r['step_s']:13.1f} {1e3 * r['plain_s']:9.1f}")
    if add_ratios(result, ratio_time="step_s", ratio_plain="plain_s"):
        print(f"dpnb / torch: quantized step {result['ratio_time']:.2f}x, plain step of the "
              f"same network {result['ratio_plain']:.2f}x")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
