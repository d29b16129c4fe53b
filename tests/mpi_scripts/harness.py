"""Run under mpiexec (or alone) with a MODE, to test dpnb.testing itself:

``fail``: rank 1 fails the check "the answer", the others pass;  ``raise``: rank
1 raises ValueError outside any check;  ``hang``: every rank prints its process
id, then sleeps far past any test's timeout (arguments after MODE are left alone,
for a test to find its processes by);  ``time``: ``time_in_turns`` of two
functions, one of which sleeps longer on rank 1, checked on every rank."""
from __future__ import annotations

import os
import sys
import time

from dpnb.testing import Checks, guarded, say, this_rank, time_in_turns

# the sleeps of the timed functions: rank 1's "uneven" sleeps longest
EVEN_S, UNEVEN_S, UNEVEN_RANK1_S = 0.01, 0.01, 0.08


def main(mode: str) -> None:
    if mode == "hang":
        say(f"RANK {this_rank()} PID {os.getpid()}")
        time.sleep(3600)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    r = world.Get_rank()
    ok = Checks(r)
    if mode == "fail":
        ok.true(r != 1, "the answer", "got 41, expected 42")
        ok.true(True, "something else")
    elif mode == "raise":
        ok.true(True, "before the error")
        if r == 1:
            raise ValueError("no such thing")
    elif mode == "time":
        uneven = UNEVEN_RANK1_S if r == 1 else UNEVEN_S
        t = time_in_turns({"even": lambda: time.sleep(EVEN_S),
                           "uneven": lambda: time.sleep(uneven)}, reps=5, warmup=1,
                          world=world, shuffle=True)
        say(f"RANK {r} TIMES even={t['even']:.4f} uneven={t['uneven']:.4f}")
        ok.true(UNEVEN_RANK1_S <= t["uneven"] < UNEVEN_RANK1_S + 0.25, "the slowest rank's time",
                f"uneven {t['uneven']:.4f} s, rank 1 sleeps {UNEVEN_RANK1_S} s")
        ok.true(EVEN_S <= t["even"] < t["uneven"], "the even function's time",
                f"even {t['even']:.4f} s, uneven {t['uneven']:.4f} s")
        world.Barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1]))
