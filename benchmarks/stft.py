"""F.stft forward and backward (batch 8 of 16000 samples, n_fft 512, hop 128, Hann window,
centred with reflection, one thread): dpnb against PyTorch's ``torch.stft`` (complex
result, then its real and imaginary parts) on the same data.

Each framework runs in its own process, several times alternately; the table shows the
medians of the per-run median times of a forward and backward step (the gradients of
both parts seeded with fixed arrays) and of a forward alone.  ``--record`` writes them
to benchmarks/results/stft.json, ``--json PATH`` to PATH.

    python benchmarks/stft.py [--steps 10] [--runs 3] [--json PATH] [--record]
"""
from __future__ import annotations


from timing import (add_ratios, alternate_workers, median_figures, output_of,
                    serve_as_worker, worker_parser)

from dpnb.testing import median_seconds

BATCH, SAMPLES, N_FFT, HOP = 8, 16000, 512, 128
FRAMES = SAMPLES // HOP + 1  # centred: padded by N_FFT // 2 on each side


def data():
    """The signals and the gradients seeded into the real and imaginary parts."""
    import numpy as np

    rng = np.random.RandomState(0)
    shape = (BATCH, N_FFT // 2 + 1, FRAMES)
    return (rng.randn(BATCH, SAMPLES).astype(np.float32),
            rng.randn(*shape).astype(np.float32), rng.randn(*shape).astype(np.float32))


def dpnb_worker(steps: int) -> dict:
    import dpnb as nn
    import dpnb.functions as F

    signals, g_r, g_i = data()
    x = nn.Variable.from_numpy_array(signals, need_grad=True)
    y_r, y_i = F.stft(x, N_FFT, HOP, N_FFT, "hanning", True, "reflect")
    both = F.sink(y_r, y_i, one_input_grad=False)

    def forward():
        both.forward()

    def step():
        both.forward()
        y_r.g, y_i.g = g_r, g_i
        x.grad.zero()
        both.backward()

    return {"step_s": median_seconds(step, steps, warmup=2),
            "forward_s": median_seconds(forward, steps, warmup=2)}


def torch_worker(steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    signals, g_r, g_i = (torch.from_numpy(a) for a in data())
    window = torch.hann_window(N_FFT, periodic=True)
    x = signals.clone().requires_grad_(True)

    def transform():
        y = torch.stft(x, N_FFT, HOP, N_FFT, window, center=True, pad_mode="reflect",
                       return_complex=True)
        return y.real, y.imag

    def forward():
        with torch.no_grad():
            transform()

    def step():
        x.grad = None
        torch.autograd.backward(transform(), (g_r, g_i))

    return {"step_s": median_seconds(step, steps, warmup=2),
            "forward_s": median_seconds(forward, steps, warmup=2),
            "torch": torch.__version__}


def main() -> None:
    args = worker_parser(__doc__, "stft").parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return

    runs = alternate_workers(__file__, args.runs, args.steps)
    result = median_figures(runs, ("step_s", "forward_s"))
    print(f"STFT, batch {BATCH} x {SAMPLES} samples, n_fft {N_FFT}, hop {HOP}, Hann, centred "
          f"(reflect), 1 thread, median of {args.runs} runs x {args.steps} steps")
    print(f"{'':8} {'forward+backward ms':>20} {'forward ms':>11}")
    for name, r in result.items():
        print(f"{name:8} {1e3 * r['step_s']:20.2f} {1e3 * r['forward_s']:11.2f}")
    if add_ratios(result, ratio_time="step_s", ratio_forward="forward_s"):
        print(f"dpnb / torch: forward and backward {result['ratio_time']:.2f}x (target <= 2), "
              f"forward {result['ratio_forward']:.2f}x")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
