"""Saving and loading ResNet-23's parameters (nmaps 64) and Adam states in each file
format dpnb writes (.npz, nnabla's .h5 and .protobuf), against ``np.savez`` /
``np.load`` of the same arrays, measured in the same run.

Each figure is the median of several saves (or loads) into a temporary folder;
the table shows the ratio to the NumPy reference (target: .h5 within 1.5x of
.npz).  ``--record`` writes the results to benchmarks/results/fileio.json,
``--json PATH`` to PATH.

    python benchmarks/fileio.py [--repeats 7] [--json PATH] [--record]
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile

import numpy as np

from timing import add_output_options, output_of

from dpnb.testing import median_seconds

FORMATS = (".npz", ".h5", ".protobuf")


def build():
    """ResNet-23's parameters and an Adam solver that has taken one step."""
    import dpnb as nn
    import dpnb.functions as F
    import dpnb.solvers as S
    from dpnb.models import resnet23_prediction

    rng = np.random.RandomState(0)
    image, label = nn.Variable((2, 3, 32, 32)), nn.Variable((2, 1))
    image.d, label.d = rng.randn(2, 3, 32, 32), rng.randint(0, 10, (2, 1))
    loss = F.mean(F.softmax_cross_entropy(resnet23_prediction(image, nmaps=64), label))
    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())
    loss.forward()
    solver.zero_grad()
    loss.backward()
    solver.update()
    return nn, solver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    add_output_options(parser, "fileio")
    args = parser.parse_args()
    output = output_of(args)
    nn, solver = build()
    params = nn.get_parameters(grad_only=False)
    arrays = {name: np.asarray(v.d) for name, v in params.items()}
    states = {f"{name}/{key}": np.asarray(v.d) for name, state in solver.get_states().items()
              for key, v in state.pstate.items()}
    megabytes = sum(a.nbytes for a in arrays.values()) / 2**20
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        reference = os.path.join(tmp, "reference.npz")
        reference_states = os.path.join(tmp, "reference_states.npz")

        def load_reference(path):
            with np.load(path) as archive:
                return {k: archive[k] for k in archive.files}

        rows["np.savez / np.load"] = {
            "parameters save": median_seconds(lambda: np.savez(reference, **arrays), args.repeats),
            "parameters load": median_seconds(lambda: load_reference(reference), args.repeats),
            "states save": median_seconds(lambda: np.savez(reference_states, **states),
                                          args.repeats),
            "states load": median_seconds(lambda: load_reference(reference_states),
                                          args.repeats)}
        for ext in FORMATS:
            path, state_path = os.path.join(tmp, "params" + ext), os.path.join(tmp, "states" + ext)
            rows[ext] = {
                "parameters save": median_seconds(lambda: nn.save_parameters(path), args.repeats),
                "parameters load": median_seconds(lambda: nn.load_parameters(path), args.repeats),
                "states save": median_seconds(lambda: solver.save_states(state_path),
                                              args.repeats),
                "states load": median_seconds(lambda: solver.load_states(state_path),
                                              args.repeats)}
    base = rows["np.savez / np.load"]
    columns = list(base)
    print(f"ResNet-23 (nmaps 64): {len(arrays)} parameters, {megabytes:.1f} MiB; Adam states "
          f"of {len(solver.get_states())} parameters; median of {args.repeats}, ms (x np.savez)")
    print(f"{'format':<20}" + "".join(f"{c:>22}" for c in columns))
    for name, row in rows.items():
        print(f"{name:<20}" + "".join(f"{row[c] * 1e3:>12.1f} ({row[c] / base[c]:5.2f}x)"
                                      for c in columns))
    h5 = max(rows[".h5"][c] / rows[".npz"][c] for c in columns)
    print(f".h5 against .npz, worst of the four: {h5:.2f}x (target <= 1.5)")
    output.write({
        "benchmark": "fileio", "parameters": len(arrays), "mebibytes": megabytes,
        "repeats": args.repeats, "median_seconds": rows, "h5_vs_npz_worst": h5,
        "environment": {"numpy": np.__version__, "python": platform.python_version(),
                        "machine": platform.machine(), "cpus": os.cpu_count()}}, indent=2)


if __name__ == "__main__":
    main()
