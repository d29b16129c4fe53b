"""Run under mpiexec across test hosts (argument: the expected host of each rank, comma
separated): each rank's host name and local rank, MPICH's notion of a host (its
shared-memory groups), and an Allreduce of 16 MB against the NumPy sum of every
rank's data, which the parent checks crossed the hosts' links; then dpnb's
communicator, which takes a long stretch in segments of 64 MB across hosts (one
collective for these 16 MB) unless DPNB_COMM_SEGMENT_BYTES says otherwise, summing the
same data."""
from __future__ import annotations

import os
import socket
import sys

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.communicators.settings import HOSTS_SEGMENT_BYTES
from dpnb.testing import Checks, guarded, rank_data

ELEMENTS = 4 << 20  # float32: 16 MB


def main() -> None:
    world = MPI.COMM_WORLD
    check = Checks(world.rank)
    expected_hosts = sys.argv[1].split(",")
    check.true(world.size == len(expected_hosts), "ranks",
               f"{world.size} ranks, expected {len(expected_hosts)}")
    hosts = world.allgather(socket.gethostname())
    check.true(hosts == expected_hosts, "host of each rank", f"{hosts} != {expected_hosts}")
    local = world.allgather(int(os.environ.get("MPI_LOCALRANKID", "-1")))
    expected_local = [expected_hosts[:r].count(h) for r, h in enumerate(expected_hosts)]
    check.true(local == expected_local, "MPI_LOCALRANKID", f"{local} != {expected_local}")
    shared = world.Split_type(MPI.COMM_TYPE_SHARED)
    members = shared.allgather(world.rank)
    shared.Free()
    same_host = [r for r, h in enumerate(expected_hosts) if h == expected_hosts[world.rank]]
    check.true(members == same_host, "shared-memory group is the host's ranks",
               f"{members} != {same_host}")
    mine = rank_data(world.rank, 0, (ELEMENTS,))
    total = np.empty_like(mine)
    world.Allreduce(mine, total, op=MPI.SUM)
    expected = sum(rank_data(r, 0, (ELEMENTS,)).astype(np.float64) for r in range(world.size))
    check.close(total, expected.astype(np.float32), "Allreduce sum", tol=1e-5, relative=True)
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    segment = int(os.environ.get("DPNB_COMM_SEGMENT_BYTES", HOSTS_SEGMENT_BYTES))
    check.true(comm.segment_bytes == segment, "segments across hosts",
               f"{comm.segment_bytes} bytes, expected {segment}")
    before = comm.collectives_issued
    comm.all_reduce(mine)
    segments = -(-mine.nbytes // segment)
    check.true(comm.collectives_issued - before == segments, f"16 MB in {segments} collectives",
               f"{comm.collectives_issued - before} collectives")
    check.close(mine, expected.astype(np.float32), "dpnb all_reduce sum", tol=1e-5,
                relative=True)
    check.finish()


if __name__ == "__main__":
    guarded(main)
