"""One training step of ResNet-23 (nmaps=64, batch 64, 32x32, Adam, one BLAS
thread): dpnb against PyTorch's CPU build on the identical network.

Each framework runs in its own process, several times alternately; the table
shows the medians of the per-run median step times and of the peak memory
above the process's footprint before the network was built; ``--record`` writes them to
benchmarks/results/train_step.json, ``--json PATH`` to PATH.

    python benchmarks/train_step.py [--steps 10] [--runs 3] [--json PATH] [--record]
"""
from __future__ import annotations

from timing import (add_ratios, alternate_workers, dpnb_adam_step_seconds,
                    median_figures, output_of, peak_rss_mib, rss_mib, serve_as_worker,
                    torch_adam_step, worker_parser)

from dpnb.testing import median_seconds

BATCH, NMAPS, NCLS = 64, 64, 10


def dpnb_resnet23_loss(batch: int = BATCH, nmaps: int = NMAPS):
    """The mean cross-entropy of dpnb.models.resnet23_prediction on fixed random data."""
    import numpy as np
    import dpnb as nn
    import dpnb.functions as F
    from dpnb.models import resnet23_prediction

    rng = np.random.RandomState(0)
    image, label = nn.Variable((batch, 3, 32, 32)), nn.Variable((batch, 1))
    image.d = rng.randn(batch, 3, 32, 32)
    label.d = rng.randint(0, NCLS, (batch, 1))
    return F.mean(F.softmax_cross_entropy(resnet23_prediction(image, ncls=NCLS, nmaps=nmaps),
                                          label))


def torch_resnet23(nmaps: int = NMAPS, ncls: int = NCLS):
    """dpnb.models.resnet23_prediction, layer for layer, as a PyTorch module."""
    import torch
    from torch import nn as tnn

    def conv_bn(cin, cout, k):
        return [tnn.Conv2d(cin, cout, k, padding=k // 2, bias=False), tnn.BatchNorm2d(cout)]

    class Bottleneck(tnn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = tnn.Sequential(*conv_bn(c, c // 2, 1), tnn.ReLU(),
                                       *conv_bn(c // 2, c // 2, 3), tnn.ReLU(),
                                       *conv_bn(c // 2, c, 1))

        def forward(self, x):
            return torch.relu(self.body(x) + x)

    layers = [*conv_bn(3, nmaps, 3), tnn.ReLU()]
    for unit in range(2, 9):
        layers.append(Bottleneck(nmaps))
        if unit in (3, 5, 7):
            layers.append(tnn.MaxPool2d(2))
    layers += [tnn.AvgPool2d(4), tnn.Flatten(), tnn.Linear(nmaps, ncls)]
    return tnn.Sequential(*layers)


def torch_resnet23_loss(batch: int = BATCH, nmaps: int = NMAPS, device: str = "cpu"):
    """``torch_resnet23``'s cross-entropy on fixed random data on ``device``, as
    ``(loss function, parameters)``."""
    import torch
    from torch import nn as tnn

    torch.manual_seed(0)
    model = torch_resnet23(nmaps).to(device)
    image = torch.randn(batch, 3, 32, 32, device=device)
    label = torch.randint(0, NCLS, (batch,), device=device)
    return (lambda: tnn.functional.cross_entropy(model(image), label)), list(model.parameters())


def dpnb_worker(steps: int) -> dict:
    from dpnb import kernels

    kernels.load()  # Numba's libraries before the baseline, as PyTorch's are in its worker
    base = rss_mib()
    loss = dpnb_resnet23_loss()
    return {"step_s": dpnb_adam_step_seconds(loss, steps), "peak_mib": peak_rss_mib() - base}


def torch_worker(steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    base = rss_mib()
    step = torch_adam_step(*torch_resnet23_loss())
    return {"step_s": median_seconds(step, steps, warmup=2), "peak_mib": peak_rss_mib() - base,
            "torch": torch.__version__}


def main() -> None:
    args = worker_parser(__doc__, "train_step").parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return

    runs = alternate_workers(__file__, args.runs, args.steps)
    result = median_figures(runs, ("step_s", "peak_mib"))
    print(f"ResNet-23 train step, batch {BATCH}, nmaps {NMAPS}, 1 thread, "
          f"median of {args.runs} runs x {args.steps} steps")
    print(f"{'':8} {'step ms':>9} {'peak MiB':>9}")
    for name, r in result.items():
        print(f"{name:8} {1e3 * r['step_s']:9.1f} {r['peak_mib']:9.1f}")
    if add_ratios(result, ratio_time="step_s", ratio_memory="peak_mib"):
        print(f"dpnb / torch: time {result['ratio_time']:.2f}x (target <= 1.0), "
              f"memory {result['ratio_memory']:.2f}x (target <= 1.0)")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
