"""Data-parallel scaling of the CIFAR-10 example: ResNet-23 on synthetic 32x32
data, training images per second with 1 rank x 1 thread against N ranks x 1
thread each (weak scaling: the batch per rank stays the same), with the
gradients all-reduced after backward and during it (--with-all-reduce-callback),
and with synchronized batch normalization (--sync-bn).

The references, measured in the same run: one rank alone, and N independent
1-rank runs at once (no communication at all), which shows what the machine's
cores give together (shared caches, memory bandwidth, vCPUs that are not whole
cores).  The targets: N ranks >= 0.97 x the N independent runs, with and without
the callback, and a sync batch normalization step <= 1.1 x the plain step.

Every configuration runs the example script itself under mpiexec, several times,
taking turns so that a passing load weighs on all alike.  A run's figure is the
median of its training rows' images/s (the first row, with the warm-up, left
out; all ranks together); the table shows the median over runs.

    python benchmarks/scaling.py [--ranks 2] [--iters 24] [--runs 3] [--json PATH] [--record]

``--record`` writes the results to benchmarks/results/scaling.json, ``--json PATH`` to
PATH."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from timing import add_output_options, output_of

from dpnb.testing import ONE_THREAD, Ranks

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "dpnb" / "examples" / "cifar10" / "multi_device_multi_process_classification.py"
RUN_TIMEOUT = 1800  # seconds for one run of the example

CONFIGS = {"one_rank": "1 rank", "independent": "{n} x 1 rank, independent",
           "n_ranks": "{n} ranks, all_reduce after backward",
           "n_ranks_callback": "{n} ranks, all_reduce during backward",
           "n_ranks_sync_bn": "{n} ranks, sync batch normalization"}
# (ranks, options of the example) of the runs each configuration starts at once
RUNS = {"one_rank": lambda n: [(1, [])], "independent": lambda n: [(1, [])] * n,
        "n_ranks": lambda n: [(n, [])],
        "n_ranks_callback": lambda n: [(n, ["--with-all-reduce-callback"])],
        "n_ranks_sync_bn": lambda n: [(n, ["--sync-bn"])]}


def start(ranks: int, monitor: str, options: list[str], args) -> Ranks:
    """Start one run of the example on ``ranks`` ranks, writing under ``monitor``."""
    command = [sys.executable, str(SCRIPT),
               "--dataset", "synthetic", "-b", str(args.batch_size), "--nmaps", str(args.nmaps),
               "-i", str(args.iters), "-m", str(args.row), "-v", str(10 * args.iters),
               "-s", str(10 * args.iters), "-e", "0", "-o", monitor, "--no-progress"]
    return Ranks(ranks, command + options, timeout=RUN_TIMEOUT, env=ONE_THREAD)


def measure(config: str, args) -> float:
    """Median training images/s of one run of ``config`` (summed over independent runs)."""
    runs = RUNS[config](args.ranks)
    with tempfile.TemporaryDirectory() as tmp:
        monitors = [os.path.join(tmp, str(i)) for i in range(len(runs))]
        with contextlib.ExitStack() as running:  # all stopped if one fails
            started = [running.enter_context(start(ranks, monitor, options, args))
                       for (ranks, options), monitor in zip(runs, monitors)]
            for ranks in started:
                run = ranks.wait()
                if run.returncode != 0:
                    sys.exit(f"{' '.join(run.command)} {run.ending}:\n{run.output}")
        total = 0.0
        for monitor in monitors:
            with open(os.path.join(monitor, "train.jsonl")) as f:
                rows = [json.loads(line) for line in f]
            total += statistics.median(r["images_per_s"] for r in rows[1:])
    return total


def summarise(results: dict) -> dict:
    """The ratios the issue's targets name, from the configurations' median rates.

    Per image, a rank's time without communication is that of the independent runs;
    what all_reduce after backward adds beyond it is its cost, and the part of that
    cost the callback no longer adds is what it hides behind backward."""
    rate = {config: r["images_per_s"] for config, r in results.items()}
    exposed_after = 1 / rate["n_ranks"] - 1 / rate["independent"]
    exposed_callback = 1 / rate["n_ranks_callback"] - 1 / rate["independent"]
    return {"after_vs_independent": rate["n_ranks"] / rate["independent"],
            "callback_vs_independent": rate["n_ranks_callback"] / rate["independent"],
            "sync_bn_step_ratio": rate["n_ranks"] / rate["n_ranks_sync_bn"],
            "hidden_by_callback": (1 - max(exposed_callback, 0.0) / exposed_after
                                   if exposed_after > 0 else None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--iters", type=int, default=24, help="training iterations per run")
    p.add_argument("--row", type=int, default=4, help="iterations per measured row")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--nmaps", type=int, default=64)
    add_output_options(p, "scaling")
    args = p.parse_args()
    output = output_of(args)

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
    results["summary"] = summary = summarise(results)
    print(f"\n{args.ranks} ranks against {args.ranks} independent runs (the machine's ceiling): "
          f"{summary['after_vs_independent']:.2f}x after backward, "
          f"{summary['callback_vs_independent']:.2f}x during it (target >= 0.97)")
    print(f"sync batch normalization step / plain step: {summary['sync_bn_step_ratio']:.2f}x "
          "(target <= 1.1)")
    hidden = summary["hidden_by_callback"]
    print("all_reduce time hidden behind backward by the callback: " + (
        "not measurable (all_reduce after backward costs no more than no communication)"
        if hidden is None else f"{hidden:.0%}" if hidden >= 0 else
        f"none (the callback's run exposed {-hidden:.0%} more than all_reduce after backward)"))
    output.write({"settings": vars(args), "cpus": os.cpu_count(), "results": results},
                 indent=2)


if __name__ == "__main__":
    main()
