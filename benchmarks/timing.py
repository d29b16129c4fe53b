"""What the training benchmarks share beyond dpnb.testing's timing: whether PyTorch,
their reference, is installed, a fresh worker process per framework, and the time of
dpnb's Adam training step."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from dpnb.testing import ONE_THREAD, median_seconds


def torch_installed() -> bool:
    """Whether this Python can import PyTorch, the reference of the training benchmarks."""
    probe = [sys.executable, "-c", "import torch"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def run_worker(script: str, *args: str) -> dict:
    """Run ``script --worker ...`` in a fresh one-thread process and return the JSON
    object its last output line holds (each framework measured in its own process)."""
    cmd = [sys.executable, script, "--worker", *args]
    out = subprocess.run(cmd, env={**os.environ, **ONE_THREAD}, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} worker failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def dpnb_adam_step_seconds(loss, steps: int) -> float:
    """Median seconds of a dpnb training step of ``loss`` (forward, backward, Adam update
    of every parameter), the step the training benchmarks compare with PyTorch's."""
    import dpnb as nn
    import dpnb.solvers as S

    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())

    def step():
        loss.forward(clear_no_need_grad=True)
        solver.zero_grad()
        loss.backward(clear_buffer=True)
        solver.update()

    return median_seconds(step, steps, warmup=2)
