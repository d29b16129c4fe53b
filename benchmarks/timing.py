"""Timing shared by the benchmark scripts: warm up, then time each call."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def timings(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """The median of ``timings``: robust to the noise of a shared machine."""
    return statistics.median(timings(fn, repeats, warmup))


ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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
