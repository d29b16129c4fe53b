"""Run under mpiexec with 2 ranks: a rank whose communicator broke tells its peers.

Rank 0 is interrupted (SIGINT) in an all_reduce that rank 1 never calls (it
sleeps); rank 1's next all_reduce must then fail at once, naming rank 0, the
interruption and the collective, instead of waiting for the timeout.  Then, on a
second communicator with the agreement check off, rank 1 already waits in an
all_reduce on group 'pair' when rank 0, waiting on 'world', is interrupted: rank 1's
wait must end within a second of it."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.testing import Checks, guarded

SIGNAL_AFTER = 0.5
TIMEOUT = 30.0       # no wait here may come near it
PROMPT = 1.5         # seconds within which the healthy rank must learn of the break


def interrupt_soon() -> None:
    threading.Timer(SIGNAL_AFTER, os.kill, (os.getpid(), signal.SIGINT)).start()


def next_collective(comm, ok: Checks, r: int) -> None:
    """Rank 0 is interrupted in all_reduce #2 while rank 1 sleeps; then both call one."""
    x = [np.ones(10, np.float32)]
    comm.all_reduce(x)                                    # #1, together
    if r == 0:
        interrupt_soon()
        ok.raises(C.CommunicatorInterrupted, "interrupted", lambda: comm.all_reduce(x),
                  "rank 0 interrupted in all_reduce #2")
    else:
        time.sleep(SIGNAL_AFTER + 1.0)                    # rank 0 broke meanwhile
    start = time.monotonic()
    pattern = ("broken" if r == 0 else
               r"rank 0 was interrupted in all_reduce #2: its communicator is broken.*restart")
    ok.raises(C.CommunicatorError, pattern, lambda: comm.all_reduce(x), "the next all_reduce")
    elapsed = time.monotonic() - start
    ok.true(elapsed < PROMPT, f"the next all_reduce took {elapsed:.2f} s to fail")
    ok.raises(C.CommunicatorError, "broken", comm.barrier, "a barrier after that")


def waiting_peer(ok: Checks, r: int) -> None:
    """Rank 1 waits on group 'pair' while rank 0, waiting on 'world', is interrupted."""
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    comm.timeout = TIMEOUT
    comm.new_group(("pair", [0, 1]))
    comm.check_agreement = False  # the waits are in data collectives that never meet
    x = [np.ones(100000, np.float32)]
    comm.barrier()
    start = time.monotonic()
    if r == 0:
        interrupt_soon()
        ok.raises(C.CommunicatorInterrupted, "interrupted", lambda: comm.all_reduce(x),
                  "rank 0 interrupted on 'world'")
    else:
        ok.raises(C.CommunicatorError, r"rank 0 was interrupted in all_reduce #\d+ on 'world'",
                  lambda: comm.all_reduce(x, group="pair"), "rank 1 waiting on 'pair'")
        elapsed = time.monotonic() - start
        ok.true(elapsed < SIGNAL_AFTER + PROMPT,
                f"rank 1's wait ended {elapsed:.2f} s after it began")


def main() -> None:
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    comm.timeout = TIMEOUT
    ok = Checks(comm.rank)
    next_collective(comm, ok, comm.rank)
    waiting_peer(ok, comm.rank)
    ok.finish(hard_exit=True, sync=MPI.COMM_WORLD.Barrier)  # pending requests: no Finalize


if __name__ == "__main__":
    guarded(main)
