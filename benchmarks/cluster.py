"""dpnb's cluster layer against plain ipyparallel, measured in the same run.

Three figures, each a median over several runs:
- start: from the call until all engines answer, ``dpnb.Cluster(n).start()``
  against ``ipyparallel.Cluster(engines="mpi", n=n).start_and_connect_sync()``
  (target: at most 1.2x);
- apply round trip: ``view.apply_sync`` of a no-op on the 2 engines of each
  cluster (target: at most 1.1x);
- gathering 100 MB of gradients (50 MB from each of 2 engines):
  ``dpnb.gather_grads()`` against a plain ``view.pull`` of the same arrays on the
  same engines (target: at most 1.2x).
Prints a table; ``--record`` writes it to benchmarks/results/cluster.json,
``--json PATH`` to PATH.

Run as ``python benchmarks/cluster.py [--runs 3] [--json PATH] [--record]``; set
IPYTHONDIR to keep profile files out of ~/.ipython."""
import argparse
import os
import platform
import statistics
import sys
import time

import ipyparallel as ipp
from timing import add_output_options, output_of

import dpnb
from dpnb.cluster import Cluster
from dpnb.communicators.mpiexec import find_mpiexec
from dpnb.testing import median_seconds

N = 2
GRADIENT_BYTES = 100 * 2**20


def noop():
    return None


def plain_cluster():
    """ipyparallel's own MPI cluster, with mpiexec named (it is not on PATH in a venv)."""
    cluster = ipp.Cluster(engines="mpi", n=N)
    cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    return cluster


def time_start_plain() -> float:
    cluster = plain_cluster()
    start = time.perf_counter()
    client = cluster.start_and_connect_sync()
    client[:].apply_sync(noop)
    elapsed = time.perf_counter() - start
    client.close()
    cluster.stop_cluster_sync()
    return elapsed


def time_start_dpnb() -> float:
    cluster = Cluster(N, progress=False)
    start = time.perf_counter()
    cluster.start()
    cluster.view.apply_sync(noop)
    elapsed = time.perf_counter() - start
    cluster.stop()
    return elapsed


def median_round_trip(view, repeats: int) -> float:
    return median_seconds(lambda: view.apply_sync(noop), repeats, warmup=20)


SETUP_GRADIENTS = """
import numpy as np
import dpnb as nn
nn.clear_parameters()
rng = np.random.RandomState(rank)
per_parameter = {count} // 8
for i in range(8):
    p = nn.get_parameter_or_create(f"layer{{i}}/W", (per_parameter,), np.zeros(per_parameter))
    p.g = rng.standard_normal(per_parameter)
grads = [p.g for p in nn.get_parameters().values()]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="cluster starts of each kind")
    parser.add_argument("--round-trips", type=int, default=300)
    add_output_options(parser, "cluster")
    args = parser.parse_args()
    output = output_of(args)

    starts = {"dpnb": [], "ipyparallel": []}
    for _ in range(args.runs):
        starts["ipyparallel"].append(time_start_plain())
        starts["dpnb"].append(time_start_dpnb())

    plain = plain_cluster()
    client = plain.start_and_connect_sync()
    round_trip_plain = median_round_trip(client[:], args.round_trips)
    client.close()
    plain.stop_cluster_sync()

    with Cluster(N, progress=False) as cluster:
        round_trip_dpnb = median_round_trip(cluster.view, args.round_trips)
        per_engine = GRADIENT_BYTES // N // 4                      # float32 values per engine
        cluster.view.execute(SETUP_GRADIENTS.format(count=per_engine), block=False).get(300)
        gather = median_seconds(lambda: dpnb.gather_grads(cluster.view), max(args.runs, 5))
        pull = median_seconds(lambda: cluster.view.pull("grads"), max(args.runs, 5))

    rows = [
        ("start to all engines ready (s)", statistics.median(starts["dpnb"]),
         statistics.median(starts["ipyparallel"]), 1.2, "ipyparallel.Cluster(engines='mpi')"),
        ("apply round trip, 2 engines (ms)", 1e3 * round_trip_dpnb, 1e3 * round_trip_plain, 1.1,
         "plain ipyparallel view"),
        ("gather 100 MB of gradients (s)", gather, pull, 1.2, "view.pull of the same arrays"),
    ]
    print(f"{'measure':<34} {'dpnb':>9} {'reference':>10} {'ratio':>7} {'target':>7}  reference")
    results = []
    for name, ours, ref, target, what in rows:
        ratio = ours / ref
        print(f"{name:<34} {ours:9.4g} {ref:10.4g} {ratio:7.3f} {target:7.2f}  {what}")
        results.append({"measure": name, "dpnb": ours, "reference": ref, "ratio": ratio,
                        "target_ratio": target, "reference_is": what, "met": ratio <= target})
    output.write({
        "benchmark": "cluster",
        "engines": N,
        "runs": args.runs,
        "round_trips": args.round_trips,
        "gradient_bytes": GRADIENT_BYTES,
        "start_seconds": starts,
        "results": results,
        "environment": {"python": platform.python_version(), "ipyparallel": ipp.__version__,
                        "machine": platform.machine(), "cpus": os.cpu_count(),
                        "executable": sys.executable},
    }, indent=2)


if __name__ == "__main__":
    main()
