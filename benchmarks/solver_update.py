"""Adam's update over flat parameter storage against a per-parameter loop.

Creates 160 parameter tensors shaped like a small ResNet's (about 1.8 M floats)
with nn.get_parameter_or_create, then times ``solver.update()`` of dpnb's Adam
(a few whole-array operations over the one run of adjacent parameters) against
a reference in this script that does the same in-place Adam arithmetic on each
parameter's arrays in turn, and against the same loop written with plain
expressions (temporaries).  Prints a table of medians; ``--record`` writes it to
benchmarks/results/solver_update.json, ``--json PATH`` to PATH.

Run as ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/solver_update.py
[--repeats 30] [--json PATH] [--record]``."""
import argparse
import math
import os
import platform

import numpy as np

from timing import add_output_options, output_of

import dpnb as nn
import dpnb.solvers as S
from dpnb.testing import median_seconds

WARMUP = 3
HYPER = dict(alpha=1e-3, beta1=0.9, beta2=0.999, eps=1e-8)


def resnet_like_shapes() -> list[tuple[int, ...]]:
    """160 shapes: a stem, four stages of 3x3 convolutions with batch-norm beta and
    gamma, 1x1 shortcut convolutions between stages, and a two-layer affine head."""
    shapes = [(16, 3, 3, 3), (16,), (16,)]
    for channels, convs in ((16, 14), (32, 14), (64, 12), (128, 8)):
        for i in range(convs):
            inmaps = channels // 2 if i == 0 and channels > 16 else channels
            shapes += [(channels, inmaps, 3, 3), (channels,), (channels,)]
    for inmaps, outmaps in ((16, 32), (32, 64), (64, 128)):
        shapes += [(outmaps, inmaps, 1, 1), (outmaps,), (outmaps,)]
    shapes += [(128, 64), (64,), (64, 10), (10,)]
    return shapes


class PerParameterAdam:
    """The arithmetic of S.Adam applied to one parameter's arrays at a time."""

    def __init__(self, params: dict, alpha: float, beta1: float, beta2: float, eps: float):
        self.params = list(params.values())
        self.alpha, self.beta1, self.beta2, self.eps = alpha, beta1, beta2, eps
        self.m = [np.zeros_like(p.d) for p in self.params]
        self.v = [np.zeros_like(p.d) for p in self.params]
        self.tmp = [np.empty_like(p.d) for p in self.params]
        self.t = 0

    def _alpha_t(self) -> float:
        self.t += 1
        return self.alpha * math.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)

    def update_in_place(self) -> None:
        """The same in-place operations as the fused update, per parameter."""
        alpha_t, b1, b2 = self._alpha_t(), self.beta1, self.beta2
        for p, m, v, tmp in zip(self.params, self.m, self.v, self.tmp):
            w, g = p.d, p.g
            m *= b1
            m += np.multiply(g, 1 - b1, out=tmp)
            v *= b2
            np.multiply(g, g, out=tmp)
            tmp *= 1 - b2
            v += tmp
            np.sqrt(v, out=tmp)
            tmp += self.eps
            np.divide(m, tmp, out=tmp)
            tmp *= alpha_t
            w -= tmp

    def update_plain(self) -> None:
        """The same rule written as plain expressions, per parameter."""
        alpha_t, b1, b2 = self._alpha_t(), self.beta1, self.beta2
        for p, m, v in zip(self.params, self.m, self.v):
            w, g = p.d, p.g
            m[...] = b1 * m + (1 - b1) * g
            v[...] = b2 * v + (1 - b2) * g * g
            w -= alpha_t * m / (np.sqrt(v) + self.eps)


def max_difference(params: dict, initial: dict, fused, reference) -> float:
    """Largest |difference| between one fused step and one reference step from the same start."""
    fused()
    after = {n: p.d.copy() for n, p in params.items()}
    for n, p in params.items():
        p.d = initial[n]
    reference()
    return max(float(np.abs(p.d - after[n]).max()) for n, p in params.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed updates of each method")
    add_output_options(parser, "solver_update")
    args = parser.parse_args()
    output = output_of(args)
    rng = np.random.RandomState(0)
    shapes = resnet_like_shapes()
    for i, shape in enumerate(shapes):
        nn.get_parameter_or_create(f"p{i:03d}", shape, rng.randn(*shape) * 0.1)
    params = nn.get_parameters()
    for p in params.values():
        p.g = rng.randn(*p.shape)
    values = sum(p.size for p in params.values())
    initial = {n: p.d.copy() for n, p in params.items()}

    solver = S.Adam(**HYPER)
    solver.set_parameters(params)
    difference = max_difference(params, initial, solver.update,
                                PerParameterAdam(params, **HYPER).update_in_place)

    reference = PerParameterAdam(params, **HYPER)
    medians = {
        "fused": median_seconds(solver.update, args.repeats, WARMUP),
        "per_parameter_in_place": median_seconds(reference.update_in_place, args.repeats,
                                                  WARMUP),
        "per_parameter_plain": median_seconds(PerParameterAdam(params, **HYPER).update_plain,
                                              args.repeats, WARMUP),
    }
    speedups = {name: seconds / medians["fused"] for name, seconds in medians.items()}

    labels = {"fused": "fused, dpnb.solvers.Adam (runs: %d)" % len(solver.runs),
              "per_parameter_in_place": "per-parameter loop, same in-place ops",
              "per_parameter_plain": "per-parameter loop, plain expressions"}
    print(f"Adam update: {len(shapes)} parameters, {values:,} float32 values, "
          f"NumPy {np.__version__}, median of {args.repeats}")
    print(f"{'method':<42}{'median ms':>10}{'ratio to fused':>16}")
    for name, seconds in medians.items():
        print(f"{labels[name]:<42}{seconds * 1e3:>10.3f}{speedups[name]:>16.2f}")
    print(f"max |fused - per-parameter| after one step: {difference:.3g}")

    output.write({
        "benchmark": "solver_update",
        "solver": "Adam",
        "hyperparameters": HYPER,
        "parameters": len(shapes),
        "values": values,
        "dtype": "float32",
        "runs": len(solver.runs),
        "repeats": args.repeats,
        "median_seconds": medians,
        "ratio_to_fused": speedups,
        "max_abs_difference_one_step": difference,
        "environment": {
            "numpy": np.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        },
    }, indent=2)


if __name__ == "__main__":
    main()
