"""One WGAN-GP critic step (a convolutional critic on 32x32 images, batch 16, the
gradient penalty through ``nn.grad``, Adam, one BLAS thread): dpnb against PyTorch's
``autograd.grad(create_graph=True)`` on the identical network.

Each framework runs in its own process, several times alternately; the table shows the
medians of the per-run median step times, of the gradient-penalty step and, to tell the
second-order machinery from the kernels, of the same critic's first-order step (the
Wasserstein loss alone).  ``--record`` writes them to
benchmarks/results/gradient_penalty.json, ``--json PATH`` to PATH.

    python benchmarks/gradient_penalty.py [--steps 10] [--runs 3] [--json PATH] [--record]
"""
from __future__ import annotations


from timing import (add_ratios, alternate_workers, median_figures, output_of,
                    serve_as_worker, worker_parser)

from dpnb.testing import median_seconds

BATCH, CHANNELS, SIZE, LAMBDA, SLOPE = 16, 3, 32, 10.0, 0.2
MAPS = (32, 64, 128)   # the critic's convolutions: kernel 4, stride 2, pad 1


def dpnb_worker(steps: int) -> dict:
    import numpy as np

    import dpnb as nn
    import dpnb.functions as F
    import dpnb.parametric_functions as PF
    import dpnb.solvers as S

    def critic(x):
        h = x
        for i, maps in enumerate(MAPS):
            h = F.leaky_relu(PF.convolution(h, maps, (4, 4), pad=(1, 1), stride=(2, 2),
                                            name=f"conv{i}"), SLOPE)
        return PF.affine(h, 1, name="fc")

    rng = np.random.default_rng(0)  # float32 draws, as torch.randn's
    real, fake = nn.Variable((BATCH, CHANNELS, SIZE, SIZE)), nn.Variable((BATCH, CHANNELS, SIZE, SIZE))
    x_hat = nn.Variable((BATCH, CHANNELS, SIZE, SIZE), need_grad=True)
    (grad_x,) = nn.grad([critic(x_hat)], [x_hat])
    norm = F.sum(F.reshape(grad_x, (BATCH, -1)) ** 2, axis=1) ** 0.5
    wasserstein = F.mean(critic(fake)) - F.mean(critic(real))
    with_penalty = wasserstein + LAMBDA * F.mean((norm - 1) ** 2)
    solver = S.Adam(1e-4, 0.0, 0.9)
    solver.set_parameters(nn.get_parameters())

    def step(loss):
        real.d = rng.standard_normal(real.shape, np.float32)
        fake.d = rng.standard_normal(fake.shape, np.float32)
        alpha = rng.random((BATCH, 1, 1, 1), np.float32)
        x_hat.d = alpha * real.d + (1 - alpha) * fake.d
        loss.forward(clear_no_need_grad=True)
        solver.zero_grad()
        loss.backward(clear_buffer=True)
        solver.update()

    return {"step_s": median_seconds(lambda: step(with_penalty), steps, warmup=2),
            "first_order_s": median_seconds(lambda: step(wasserstein), steps, warmup=2)}


def torch_worker(steps: int) -> dict:
    import torch
    from torch import nn as tnn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers, cin = [], CHANNELS
    for maps in MAPS:
        layers += [tnn.Conv2d(cin, maps, 4, stride=2, padding=1), tnn.LeakyReLU(SLOPE)]
        cin = maps
    final = SIZE // 2 ** len(MAPS)
    critic = tnn.Sequential(*layers, tnn.Flatten(), tnn.Linear(cin * final * final, 1))
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.0, 0.9))

    def step(penalty: bool):
        real = torch.randn(BATCH, CHANNELS, SIZE, SIZE)
        fake = torch.randn(BATCH, CHANNELS, SIZE, SIZE)
        loss = critic(fake).mean() - critic(real).mean()
        if penalty:
            alpha = torch.rand(BATCH, 1, 1, 1)
            x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            (grad_x,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
            norm = grad_x.reshape(BATCH, -1).pow(2).sum(dim=1).sqrt()
            loss = loss + LAMBDA * ((norm - 1) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return {"step_s": median_seconds(lambda: step(True), steps, warmup=2),
            "first_order_s": median_seconds(lambda: step(False), steps, warmup=2),
            "torch": torch.__version__}


def main() -> None:
    args = worker_parser(__doc__, "gradient_penalty").parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return

    runs = alternate_workers(__file__, args.runs, args.steps)
    result = median_figures(runs, ("step_s", "first_order_s"))
    print(f"WGAN-GP critic step, batch {BATCH}, {SIZE}x{SIZE}, maps {MAPS}, 1 thread, "
          f"median of {args.runs} runs x {args.steps} steps")
    print(f"{'':8} {'penalty ms':>11} {'first order ms':>15}")
    for name, r in result.items():
        print(f"{name:8} {1e3 * r['step_s']:11.1f} {1e3 * r['first_order_s']:15.1f}")
    if add_ratios(result, ratio_time="step_s", ratio_first_order="first_order_s"):
        print(f"dpnb / torch: gradient-penalty step {result['ratio_time']:.2f}x (target <= 1.5), "
              f"first-order step of the same critic {result['ratio_first_order']:.2f}x")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
