"""Run under mpiexec: the CIFAR-10 example (its options after this script's name), with
each rank writing its host name and the sample indices of every training batch it
read to ``<monitor path>/shards-rank<r>.json``, so that the parent can check that the
ranks' shards are disjoint."""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from mpi4py import MPI



def main() -> None:
    from dpnb.examples.cifar10 import multi_device_multi_process_classification as example
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
