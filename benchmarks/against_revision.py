"""This checkout's all_reduce, cluster and training-step figures against those of an
earlier revision, measured in the same run: did a change of code (not of machine) move
them?

Both revisions are checked out into temporary ``git worktree``s (HEAD and
``--reference``, by default cac59f8, the code before issue 25's moves), so no result file
of this checkout is written.  Each round runs every benchmark once in each tree,
alternating which goes first; each benchmark also measures its own reference (raw
mpi4py, plain ipyparallel), whose ratio is shown beside the times because it cancels
the machine's drift.  Prints, per figure, the median over rounds of the reference
revision, of this one, and their ratio.

    python benchmarks/against_revision.py [--reference REV] [--rounds 3]
                                          [--benchmarks allreduce,cluster,train_step]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = "cac59f8"
RESULT = REPO / "benchmarks" / "results" / "against_revision.json"

# benchmark -> (its arguments, the figures read from its result file: name -> path)
BENCHMARKS = {
    "allreduce": (["--quick"], {
        "48 MB gradients, reducer (s)": ("reducer_48MB", "reducer_s"),
        "48 MB gradients, reducer / raw mpi4py": ("reducer_48MB", "reducer_vs_raw"),
        "48 MB gradients, list (s)": ("reducer_48MB", "list_s"),
        "one tiny checked all_reduce (s)": ("tiny_checked", "checked_s"),
        "one tiny checked all_reduce / raw": ("tiny_checked", "ratio"),
    }),
    "cluster": (["--runs", "2", "--round-trips", "200"], {
        "start (s)": ("results", 0, "dpnb"),
        "start / ipyparallel": ("results", 0, "ratio"),
        "apply round trip (s)": ("results", 1, "dpnb"),
        "apply round trip / ipyparallel": ("results", 1, "ratio"),
        "gather 100 MB of gradients (s)": ("results", 2, "dpnb"),
        "gather / view.pull": ("results", 2, "ratio"),
    }),
    "train_step": (["--steps", "10", "--runs", "2"], {
        "ResNet-23 training step (s)": ("dpnb", "step_s"),
        "its peak memory (MiB)": ("dpnb", "peak_mib"),
    }),
}


def worktree(revision: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(where),
                    revision], check=True)
    return where


def measure(tree: Path, name: str) -> dict[str, float]:
    """Run benchmark ``name`` of ``tree`` with that tree's dpnb; its figures."""
    arguments, figures = BENCHMARKS[name]
    with tempfile.TemporaryDirectory() as ipython_dir:
        env = {**os.environ, "PYTHONPATH": str(tree), "IPYTHONDIR": ipython_dir}
        done = subprocess.run([sys.executable, str(tree / "benchmarks" / f"{name}.py"),
                               *arguments], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name} in {tree} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads((tree / "benchmarks" / "results" / f"{name}.json").read_text())
    values = {}
    for figure, path in figures.items():
        value = result
        for key in path:
            value = value[key]
        values[figure] = float(value)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=REFERENCE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    args = parser.parse_args()
    names = args.benchmarks.split(",")
    revisions = {"reference": args.reference, "this": "HEAD"}
    runs: dict = {name: {tree: [] for tree in revisions} for name in names}
    with tempfile.TemporaryDirectory() as scratch:
        trees = {tree: worktree(rev, Path(scratch) / tree) for tree, rev in revisions.items()}
        try:
            for round_ in range(args.rounds):
                order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
                for name in names:
                    for tree in order:
                        runs[name][tree].append(measure(trees[tree], name))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                str(tree)], check=False)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    print(f"median of {args.rounds} rounds; reference {args.reference}, this {head}")
    print(f"{'figure':42} {'reference':>11} {'this':>11} {'this/ref':>9}")
    table = []
    for name in names:
        for figure in BENCHMARKS[name][1]:
            ref = statistics.median(r[figure] for r in runs[name]["reference"])
            this = statistics.median(r[figure] for r in runs[name]["this"])
            table.append({"benchmark": name, "figure": figure, "reference": ref, "this": this,
                          "ratio": this / ref})
            print(f"{figure:42} {ref:11.4g} {this:11.4g} {this / ref:9.2f}")
    RESULT.write_text(json.dumps({"benchmark": "against_revision", "reference": args.reference,
                                  "this": head, "rounds": args.rounds, "figures": table,
                                  "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
