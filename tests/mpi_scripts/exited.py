"""Run under mpiexec with 2 ranks and a MODE: a rank that exits tells its peers.

Rank 1 exits while rank 0 goes on to all_reduce #2 (timeout 60 s): ``raise``:
rank 1 raises ValueError after all_reduce #1, uncaught; ``exit``: it calls
``sys.exit(3)`` there; ``first``: it raises before any collective, while rank 0
waits in all_reduce #1; ``ended``: its script ends after all_reduce #1;
``remote``: as ``raise``, on a board where each rank is its own host (read by
RMA, which needs the exiting rank to stay in MPI until rank 0 has read it), with
a guard waiting for a receive that never comes in place of the all_reduce.  Rank 0
must raise PeerBroken naming rank 1, where it was and why, within ``PROMPT``
seconds, then end as a script does (MPI_Finalize included), so that mpiexec ends.
Each rank prints the wall time of its event (``RANK 1 EXITS AT t``, ``RANK 0
LEARNED AT t``) for the test to measure how long the news took."""
from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.communicators._internal.exchange import Group
from dpnb.communicators._internal.status_board import StatusBoard
from dpnb.communicators._internal.wait import Guard
from dpnb.communicators.settings import Settings
from dpnb.testing import Checks, say

DELAY = 0.5       # seconds rank 1 waits before it exits, rank 0 already in the all_reduce
PROMPT = 3.0      # seconds within which rank 0 must raise (the timeout is 60 s)
REASONS = {"raise": r"after all_reduce #1 \(ValueError: no such thing\)",
           "exit": r"after all_reduce #1 \(its program ended \(the end of the script, or "
                   r"sys.exit\) with no uncaught exception\)",
           "first": r"before any collective \(ValueError: no such thing\)",
           "ended": r"after all_reduce #1 \(its program ended",
           "remote": r"after all_reduce #1 \(ValueError: no such thing\)"}


class RemoteBoard:
    """A guard on a board where each rank is its own host; ``all_reduce`` enters the
    next all_reduce and waits, polling MPI as a collective does, for a receive that
    never comes."""

    def __init__(self):
        world = MPI.COMM_WORLD.Dup()
        self.rank = world.Get_rank()
        self.world = Group("world", list(range(world.Get_size())), world)
        self.guard = Guard(Settings(timeout=60.0),
                           StatusBoard(world, {"world": self.world}, local=MPI.COMM_SELF))

    def all_reduce(self, x) -> None:
        self.guard.enter("all_reduce", self.world)
        never = self.world.comm.Irecv(np.empty(1), source=1 - self.rank, tag=99)
        self.guard.wait_until(never.Test, lambda: "all_reduce")

    def barrier(self) -> None:
        self.guard.check_usable()


def main(mode: str) -> None:
    x = [np.ones(10, np.float32)]
    if mode == "remote":
        comm = RemoteBoard()
        comm.guard.enter("all_reduce", comm.world)  # all_reduce #1, as if done together
        comm.world.comm.Barrier()
    else:
        comm = C.MultiProcessCommunicator(nn.Context())
        comm.init()
        comm.timeout = 60.0
        if mode != "first":
            comm.all_reduce(x)
    if comm.rank == 1:
        time.sleep(DELAY)
        say(f"RANK 1 EXITS AT {time.time():.6f}")
        if mode == "exit":
            sys.exit(3)
        if mode != "ended":
            raise ValueError("no such thing")
        return
    ok = Checks(0)
    start = time.monotonic()
    ok.raises(C.CommunicatorError, rf"rank 1 exited {REASONS[mode]}.*will not take part in "
              "collectives on 'world' again", lambda: comm.all_reduce(x), "rank 0's all_reduce")
    say(f"RANK 0 LEARNED AT {time.time():.6f}")
    elapsed = time.monotonic() - start
    ok.true(elapsed < DELAY + PROMPT, f"rank 0 raised {elapsed:.2f} s after it began waiting")
    ok.raises(C.CommunicatorError, "broken", comm.barrier, "a barrier after that")
    ok.finish()


if __name__ == "__main__":
    main(sys.argv[1])
