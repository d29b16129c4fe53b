"""Data-parallel scaling of the CIFAR-10 example: ResNet-23 on synthetic 32x32
data, training images per second with 1 rank x 1 thread against N ranks x 1
thread each (weak scaling: the batch per rank stays the same), with the
gradients all-reduced after backward and during it (--with-all-reduce-callback).

The references, measured in the same run: one rank alone, and N independent
1-rank runs at once (no communication at all), which shows what the machine's
cores give together (shared caches, memory bandwidth, vCPUs that are not whole
cores).  The target is N ranks >= 0.9 x N x one rank.

Every configuration runs the example script itself under mpiexec, several times,
taking turns so that a passing load weighs on all alike.  A run's figure is the
median of its training rows' images/s (the first row, with the warm-up, left
out; all ranks together); the table shows the median over runs.

    python benchmarks/scaling.py [--ranks 2] [--iters 24] [--runs 3]

Results go to benchmarks/results/scaling.json."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import ONE_THREAD

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "cifar10" / "multi_device_multi_process_classification.py"
RESULTS = ROOT / "benchmarks" / "results" / "scaling.json"

CONFIGS = {"one_rank": "1 rank", "independent": "{n} x 1 rank, independent",
           "n_ranks": "{n} ranks, all_reduce after backward",
           "n_ranks_callback": "{n} ranks, all_reduce during backward"}


def start(ranks: int, monitor: str, callback: bool, args) -> tuple[subprocess.Popen, list]:
    """Start one run of the example on ``ranks`` ranks, writing under ``monitor``."""
    from dpnb.communicators import find_mpiexec

    command = [find_mpiexec(), "-n", str(ranks), sys.executable, str(SCRIPT),
               "--dataset", "synthetic", "-b", str(args.batch_size), "--nmaps", str(args.nmaps),
               "-i", str(args.iters), "-m", str(args.row), "-v", str(10 * args.iters),
               "-s", str(10 * args.iters), "-e", "0", "-o", monitor, "--no-progress"]
    if callback:
        command.append("--with-all-reduce-callback")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=dict(os.environ, **ONE_THREAD))
    return process, command


def measure(config: str, args) -> float:
    """Median training images/s of one run of ``config`` (summed over independent runs)."""
    runs = {"one_rank": [(1, False)], "independent": [(1, False)] * args.ranks,
            "n_ranks": [(args.ranks, False)], "n_ranks_callback": [(args.ranks, True)]}[config]
    with tempfile.TemporaryDirectory() as tmp:
        monitors = [os.path.join(tmp, str(i)) for i in range(len(runs))]
        started = [start(ranks, monitor, callback, args)
                   for (ranks, callback), monitor in zip(runs, monitors)]
        for process, command in started:
            output, _ = process.communicate(timeout=1800)
            if process.returncode != 0:
                sys.exit(f"{' '.join(command)} failed:\n{output}")
        total = 0.0
        for monitor in monitors:
            with open(os.path.join(monitor, "train.jsonl")) as f:
                rows = [json.loads(line) for line in f]
            total += statistics.median(r["images_per_s"] for r in rows[1:])
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--iters", type=int, default=24, help="training iterations per run")
    p.add_argument("--row", type=int, default=4, help="iterations per measured row")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--nmaps", type=int, default=64)
    args = p.parse_args()

    rates: dict = {config: [] for config in CONFIGS}
    for run in range(args.runs):
        for config in CONFIGS:
            rates[config].append(measure(config, args))
            print(f"run {run + 1}/{args.runs}: {CONFIGS[config].format(n=args.ranks)}: "
                  f"{rates[config][-1]:.1f} images/s", file=sys.stderr, flush=True)

    one = statistics.median(rates["one_rank"])
    results = {}
    print(f"\nResNet-23 (nmaps={args.nmaps}), synthetic 32x32, batch {args.batch_size} per "
          f"rank, 1 thread per rank, median of {args.runs} runs ({os.cpu_count()} CPUs)")
    print(f"{'configuration':<40} {'images/s':>9} {'vs 1 rank':>10} {'efficiency':>11}")
    for config, label in CONFIGS.items():
        rate = statistics.median(rates[config])
        ranks = 1 if config == "one_rank" else args.ranks
        results[config] = {"images_per_s": rate, "speedup": rate / one,
                           "efficiency": rate / one / ranks, "runs": rates[config]}
        print(f"{label.format(n=args.ranks):<40} {rate:>9.1f} {rate / one:>9.2f}x "
              f"{rate / one / ranks:>10.0%}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"settings": vars(args), "cpus": os.cpu_count(),
                                   "results": results}, indent=2) + "\n")
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
