"""Run under mpiexec with arguments MODE CHECK: collectives that cannot finish.

``timeout``: the last rank never joins; the others' all_reduce must fail after
``comm.timeout`` with an error naming the operation and rank.  ``interrupt``:
the same, but SIGINT arrives while they wait, and must raise at once.  In both
cases the next use must say the communicator is broken.  CHECK is ``check``
(the wait is in the agreement check) or ``nocheck`` (in the data collective)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.testing import Checks, guarded

TIMEOUT = 1.0
SIGNAL_AFTER = 0.3


def main(mode: str, check: str) -> None:
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    comm.check_agreement = check == "check"  # off: the wait is in the data collective itself
    n, r = comm.size, comm.rank
    ok = Checks(r)
    # the waiting ranks finish together: mpiexec ends the job as soon as one of them exits
    waiting = MPI.COMM_WORLD.Split(int(r == n - 1))
    comm.barrier()
    if r == n - 1:  # never joins; mpiexec ends it when the others are done
        time.sleep(TIMEOUT + 10)
        ok.finish(hard_exit=True)
    comm.timeout = TIMEOUT if mode == "timeout" else 30.0
    grads = [np.ones(100000, np.float32), np.ones(10, np.float32)]
    if mode == "interrupt":
        threading.Timer(SIGNAL_AFTER, os.kill, (os.getpid(), signal.SIGINT)).start()
        expected, pattern, limit = C.CommunicatorInterrupted, "interrupted", SIGNAL_AFTER + 0.9
    else:
        expected, pattern, limit = C.CommunicatorTimeout, "within the timeout of 1 s", TIMEOUT + 0.9
    start = time.monotonic()
    error = ok.raises(expected, rf"all_reduce.*rank {r} of {n}.*{pattern}",
                      lambda: comm.all_reduce(grads), f"{mode} while waiting")
    elapsed = time.monotonic() - start
    ok.true(elapsed < limit, f"{mode} took {elapsed:.2f} s to raise, expected under {limit:.1f} s")
    if mode == "interrupt":
        ok.true(isinstance(error, KeyboardInterrupt), "an interrupt is also a KeyboardInterrupt")
    ok.raises(C.CommunicatorError, "broken.*restart the engines", lambda: comm.all_reduce(grads),
              "next use of a broken communicator")
    ok.raises(C.CommunicatorError, "broken", comm.barrier, "barrier on a broken communicator")
    ok.finish(hard_exit=True, sync=waiting.Barrier)


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1], sys.argv[2]))
