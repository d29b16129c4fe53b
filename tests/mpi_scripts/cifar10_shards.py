"""Run under mpiexec: the CIFAR-10 example (its options after this script's name), with
each rank writing its host name and the sample indices of every training batch it
read to ``<monitor path>/shards-rank<r>.json``, so that the parent can check that the
ranks' shards are disjoint."""
from __future__ import annotations

import importlib.util
import json
import socket
import sys
from pathlib import Path

from mpi4py import MPI

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "cifar10"
           / "multi_device_multi_process_classification.py")


def load_example():
    spec = importlib.util.spec_from_file_location("cifar10_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    example = load_example()
    read: dict[int, list[int]] = {}

    class RecordedBatches(example.ShardedBatches):
        """The example's batches, each one noted as it is read."""

        def indices(self, iteration: int):
            batch = super().indices(iteration)
            read[iteration] = batch.tolist()
            return batch

    example.ShardedBatches = RecordedBatches
    argv = sys.argv[1:]
    example.main(argv)
    monitor = Path(example.parse_args(argv).monitor_path)
    rank = MPI.COMM_WORLD.rank
    (monitor / f"shards-rank{rank}.json").write_text(
        json.dumps({"host": socket.gethostname(), "batches": read}))


if __name__ == "__main__":
    main()
