"""One training step of the seed tutorial's network (convolution, affine,
softmax cross-entropy, mean on a (4, 1, 32, 32) batch; forward, zero_grad,
backward, Adam update): dpnb against the real nnabla on one CPU thread.

The step is so small that it measures the per-function Python overhead of the
define-and-run graph rather than arithmetic.  Each framework runs the same step
code in its own process (nnabla with the Python given by ``--nnabla-python``,
$DPNB_NNABLA_PYTHON, or /root/nnvenv/bin/python where it exists), several times
alternately; the table shows the medians of the per-run median step times;
``--record`` writes them to benchmarks/results/tutorial_step.json, ``--json PATH`` to PATH.

    python benchmarks/tutorial_step.py [--steps 300] [--runs 5] [--nnabla-python PATH]
                                       [--json PATH] [--record]
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
from pathlib import Path
from types import ModuleType

from timing import NNABLA_MISSING, alternate_with_nnabla, nnabla_parser, output_of

ROOT = Path(__file__).resolve().parents[1]


def dpnb_timing() -> ModuleType:
    """dpnb.testing's timing module, loaded from its file alone: the Python that runs
    nnabla's worker cannot import the dpnb package."""
    spec = importlib.util.spec_from_file_location("dpnb_testing_timing",
                                                  ROOT / "dpnb" / "testing" / "timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(framework: str, steps: int) -> dict:
    """Build the tutorial network with ``framework`` ("dpnb" or "nnabla") under the
    name ``nn`` and time its training step."""
    import importlib

    import numpy as np

    nn = importlib.import_module(framework)
    F = importlib.import_module(f"{framework}.functions")
    PF = importlib.import_module(f"{framework}.parametric_functions")
    S = importlib.import_module(f"{framework}.solvers")
    initializer = importlib.import_module(f"{framework}.initializer")
    ext_utils = importlib.import_module(f"{framework}.ext_utils")

    ctx = ext_utils.get_extension_context("cpu")
    nn.set_default_context(ctx)
    b, c, h, w, n_class = 4, 1, 32, 32, 2
    x, y = nn.Variable((b, c, h, w)), nn.Variable((b, 1))
    x.d = np.random.RandomState(0).rand(b, c, h, w)
    y.d = np.random.RandomState(1).choice(n_class, b).reshape((b, 1))
    w_init = initializer.UniformInitializer(
        initializer.calc_uniform_lim_glorot(1, 0.5, kernel=(1, 1)), rng=np.random.RandomState(0))
    with nn.context_scope(ctx):
        hidden = PF.convolution(x, 1, (3, 3), (1, 1), (1, 1), w_init=w_init)
        pred = PF.affine(hidden, n_class, w_init=w_init)
        loss = F.mean(F.softmax_cross_entropy(pred, y))
    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())

    def step():
        loss.forward()
        solver.zero_grad()
        loss.backward()
        solver.update()

    version = getattr(nn, "__version__", None)
    return {"step_s": dpnb_timing().median_seconds(step, steps, warmup=20), "loss": float(loss.d),
            "version": version}


def main() -> None:
    args = nnabla_parser(__doc__, "tutorial_step", steps=300, runs=5).parse_args()
    output = output_of(args)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps)))
        return

    runs = alternate_with_nnabla(__file__, args)
    result: dict = {"benchmark": "tutorial_step", "steps": args.steps, "runs": args.runs,
                    "machine": platform.machine(), "cpus": os.cpu_count()}
    for name, rs in runs.items():
        result[name] = {"step_s": statistics.median(r["step_s"] for r in rs), "runs": rs}
    print(f"Tutorial network train step (conv, affine, softmax_cross_entropy, mean; Adam), "
          f"batch 4, 1 thread, median of {args.runs} runs x {args.steps} steps")
    print(f"{'':8} {'step us':>9}")
    for name in runs:
        print(f"{name:8} {1e6 * result[name]['step_s']:9.1f}")
    if "nnabla" in result:
        result["nnabla_version"] = runs["nnabla"][0]["version"]
        result["ratio_time"] = result["dpnb"]["step_s"] / result["nnabla"]["step_s"]
        print(f"dpnb / nnabla {result['nnabla_version']}: time {result['ratio_time']:.2f}x "
              "(target <= 1.0)")
    else:
        print(NNABLA_MISSING)
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
