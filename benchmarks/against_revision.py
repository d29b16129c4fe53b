"""This checkout's all_reduce, cluster and training-step figures against those of an
earlier revision, measured in the same run: did a change of code (not of machine) move
them?

Both revisions are checked out into temporary ``git worktree``s (HEAD and
``--reference``, by default cac59f8, the code before issue 25's moves), where the
benchmarks record their results (``--record`` where they take it), so that no result
file of this checkout is written but this script's own: ``--record`` writes it to
benchmarks/results/against_revision.json, ``--json PATH`` to PATH.  Each round runs
every benchmark once in each tree, alternating which goes first; each benchmark also
measures its own reference (raw mpi4py, plain ipyparallel), whose ratio is shown beside
the times because it cancels the machine's drift.  Prints, per figure, the median over
rounds of the reference revision, of this one, and their ratio.

    python benchmarks/against_revision.py [--reference REV] [--rounds 4]
                                          [--benchmarks allreduce,cluster,train_step]
                                          [--json PATH] [--record]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from revisions import BEFORE_ISSUE_25, checked_out, short
from timing import add_output_options, output_of


def json_figures(tree: Path, name: str, paths: dict) -> dict[str, float]:
    """Figures from the result file the benchmark wrote in ``tree``: name -> key path."""
    result = json.loads((tree / "benchmarks" / "results" / f"{name}.json").read_text())
    values = {}
    for figure, path in paths.items():
        value = result
        for key in path:
            value = value[key]
        values[figure] = float(value)
    return values


def allreduce_figures(tree: Path, stdout: str) -> dict[str, float]:
    """The quick run's figures, which it prints (it writes no result file)."""
    reducer = re.search(r"reducer ([\d.]+) ms \(([\d.]+)x raw\), all_reduce\(list\) ([\d.]+) ms",
                        stdout)
    tiny = re.search(r"one-element checked all_reduce ([\d.]+) us, raw mpi4py [\d.]+ us: "
                     r"([\d.]+)x", stdout)
    small = re.search(r"1000x1KB sum: flat / one-buffer raw +([\d.]+)", stdout)
    if not (reducer and tiny and small):
        raise SystemExit(f"allreduce in {tree} printed no figures:\n{stdout[-3000:]}")
    return {"48 MB gradients, reducer (ms)": float(reducer[1]),
            "48 MB gradients, reducer / raw mpi4py": float(reducer[2]),
            "48 MB gradients, list (ms)": float(reducer[3]),
            "one tiny checked all_reduce (us)": float(tiny[1]),
            "one tiny checked all_reduce / raw": float(tiny[2]),
            "1000 x 1 KB flat / one raw buffer": float(small[1])}


def cluster_figures(tree: Path, stdout: str) -> dict[str, float]:
    return json_figures(tree, "cluster", {
        "start (s)": ("results", 0, "dpnb"),
        "start / ipyparallel": ("results", 0, "ratio"),
        "apply round trip (ms)": ("results", 1, "dpnb"),
        "apply round trip / ipyparallel": ("results", 1, "ratio"),
        "gather 100 MB of gradients (s)": ("results", 2, "dpnb"),
        "gather / view.pull": ("results", 2, "ratio")})


def train_step_figures(tree: Path, stdout: str) -> dict[str, float]:
    return json_figures(tree, "train_step", {
        "ResNet-23 training step (s)": ("dpnb", "step_s"),
        "its peak memory (MiB)": ("dpnb", "peak_mib")})


# benchmark -> (its arguments, what reads its figures from its output and result file,
# whether they read the result file)
BENCHMARKS = {
    "allreduce": (["--quick"], allreduce_figures, False),
    "cluster": (["--runs", "2", "--round-trips", "200"], cluster_figures, True),
    "train_step": (["--steps", "10", "--runs", "2"], train_step_figures, True),
}


def run_benchmark(tree: Path, name: str, *arguments: str, timeout: float
                  ) -> subprocess.CompletedProcess:
    """Benchmark ``name`` of ``tree``, run with that tree's dpnb."""
    with tempfile.TemporaryDirectory() as ipython_dir:
        env = {**os.environ, "PYTHONPATH": str(tree), "IPYTHONDIR": ipython_dir}
        return subprocess.run([sys.executable, str(tree / "benchmarks" / f"{name}.py"),
                               *arguments], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout)


@functools.cache
def takes_record(tree: Path, name: str) -> bool:
    """Whether benchmark ``name`` of ``tree`` writes its result file only when asked
    (``--record``); those of earlier revisions write it at every run."""
    return "--record" in run_benchmark(tree, name, "--help", timeout=120).stdout


def measure(tree: Path, name: str) -> dict[str, float]:
    """Run benchmark ``name`` of ``tree`` with that tree's dpnb; its figures."""
    arguments, figures, reads_result = BENCHMARKS[name]
    if reads_result and takes_record(tree, name):
        arguments = [*arguments, "--record"]     # into the temporary tree's results
    done = run_benchmark(tree, name, *arguments, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name} in {tree} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return figures(tree, done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=BEFORE_ISSUE_25)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    add_output_options(parser, "against_revision")
    args = parser.parse_args()
    output = output_of(args)
    names = args.benchmarks.split(",")
    runs: dict = {name: {"reference": [], "this": []} for name in names}
    with checked_out(args.reference) as reference, checked_out("HEAD") as this:
        trees = {"reference": reference, "this": this}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for name in names:
                for tree in order:
                    runs[name][tree].append(measure(trees[tree], name))
    head = short()
    print(f"median of {args.rounds} rounds; reference {args.reference}, this {head}")
    print(f"{'figure':42} {'reference':>11} {'this':>11} {'this/ref':>9}")
    table = []
    for name in names:
        for figure in runs[name]["reference"][0]:
            ref = statistics.median(r[figure] for r in runs[name]["reference"])
            this = statistics.median(r[figure] for r in runs[name]["this"])
            table.append({"benchmark": name, "figure": figure, "reference": ref, "this": this,
                          "ratio": this / ref})
            print(f"{figure:42} {ref:11.4g} {this:11.4g} {this / ref:9.2f}")
    output.write({"benchmark": "against_revision", "reference": args.reference, "this": head,
                  "rounds": args.rounds, "figures": table, "runs": runs}, indent=2)


if __name__ == "__main__":
    main()
