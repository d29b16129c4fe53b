"""Run under mpiexec (2 or 3 ranks) with a MODE: calls the ranks disagree on, which
must raise on every rank at once (well within DPNB_COMM_TIMEOUT) instead of hanging.

``arguments``: one rank (or two) fails its own argument check while the others
call correctly: every rank raises RankArgumentError naming the failing ranks and
their errors, and the next correct collective works.  ``new_group``: different
names or ranks, bad arguments, a rank in another collective: every rank raises,
and the communicator stays usable.  ``groups``: rank 0 all_reduces on 'world'
while rank 1 all_reduces on group 'low' (ranks 0 and 1), and rank 2 on 'world':
every rank raises AgreementError naming the deadlock.  ``unknown``: rank 1 names an unknown
group (a local error), then goes on to a barrier while the others wait on group
'low': every rank raises.  ``interrupt``: SIGINT while rank 0 waits in new_group
for the last rank, which comes late: rank 0 raises CommunicatorInterrupted, the
late rank (whose check then meets rank 0's abandoned one) at once an error naming
rank 0's interruption (the board says rank 0's communicator broke), not a hang.
``absent``: the last rank never calls new_group: the others time out, with the
timeout (1 s) the bound.  ``funneled``: MPI started for the main thread only:
new_group makes the group's communicator in the calling thread."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import mpi4py
import numpy as np

if sys.argv[1:] == ["funneled"]:
    mpi4py.rc.thread_level = "funneled"
from mpi4py import MPI  # after the thread level is chosen

import dpnb as nn
import dpnb.communicators as C
from dpnb.errors import DpnbError
from dpnb.testing import Checks, guarded

PROMPT = 2.0  # seconds within which every rank must raise (the timeout is far longer)


def timed(ok: Checks, exception, pattern: str, fn, what: str, limit: float = PROMPT):
    """``ok.raises`` that also requires the error within ``limit`` seconds."""
    start = time.monotonic()
    error = ok.raises(exception, pattern, fn, what)
    elapsed = time.monotonic() - start
    ok.true(elapsed < limit, f"{what}: raised after {elapsed:.2f} s, expected under {limit} s")
    return error


def still_usable(comm, ok: Checks, what: str) -> None:
    """A correct collective after the error gives the right sums on every rank."""
    n, r = comm.size, comm.rank
    small, large = np.full(3, r + 1.0), np.full(50_000, r + 1.0, np.float32)
    comm.all_reduce(small)
    comm.all_reduce([large])
    total = n * (n + 1) / 2
    ok.close(small, np.full(3, total), f"{what}: the next (inline) all_reduce")
    ok.close(large, np.full(50_000, total, np.float32), f"{what}: the next all_reduce")


def argument_cases(comm, n: int) -> dict:
    """name -> (the bad call, the good call of the other ranks, the bad rank's message)."""
    good = np.ones((4, 4), np.float32)
    read_only = np.ones(3)
    read_only.flags.writeable = False
    big = np.ones(100_000, np.float32)  # too large to travel with the check
    return {
        "non-contiguous": (lambda: comm.all_reduce(good.copy().T), lambda: comm.all_reduce(good),
                           "not C-contiguous"),
        "non-contiguous, large": (lambda: comm.all_reduce(np.ones((2, 100_000), np.float32)[:, ::2]),
                                  lambda: comm.all_reduce(big), "not C-contiguous"),
        "read-only": (lambda: comm.all_reduce(read_only), lambda: comm.all_reduce(np.ones(3)),
                      "read-only"),
        "dtype": (lambda: comm.all_reduce(np.zeros(2, bool)), lambda: comm.all_reduce(np.ones(2)),
                  "dtype bool; supported are"),
        "Variable": (lambda: comm.all_reduce([nn.Variable((2,))]),
                     lambda: comm.all_reduce([nn.Variable((2,)).grad]), "is a Variable"),
        "empty list": (lambda: comm.all_reduce([]), lambda: comm.all_reduce(np.ones(2)),
                       "empty list"),
        "dst": (lambda: comm.reduce(np.ones(2), dst=n), lambda: comm.reduce(np.ones(2), dst=0),
                rf"dst={n} is out of range"),
        "src": (lambda: comm.bcast(big.copy(), src=-1), lambda: comm.bcast(big.copy(), src=0),
                r"src=-1 is out of range"),
        "division on ints": (lambda: comm.all_reduce(np.ones(3, np.int64), division=True),
                             lambda: comm.all_reduce(np.ones(3), division=True),
                             "division=True needs floating-point"),
        "all_gather list": (lambda: comm.all_gather(good, [good.copy()] * (n + 1)),
                            lambda: comm.all_gather(good, [good.copy() for _ in range(n)]),
                            "one array per rank"),
        "reduce_scatter list": (
            lambda: comm.reduce_scatter([good.copy()] * (n - 1), good.copy()),
            lambda: comm.reduce_scatter([good.copy() for _ in range(n)], good.copy()),
            "one array per rank"),
        "reduce_scatter division": (
            lambda: comm.reduce_scatter([np.ones(2, np.int32)] * n, np.ones(2, np.int32),
                                        division=True),
            lambda: comm.reduce_scatter([np.ones(2, np.int32)] * n, np.ones(2, np.int32)),
            "division=True needs floating-point"),
    }


def check_arguments(comm, ok: Checks) -> None:
    n, r = comm.size, comm.rank
    bad = n - 1
    for name, (wrong, right, own) in argument_cases(comm, n).items():
        mine = r == bad
        pattern = (rf"{own}.*\(this rank, rank {bad} of group 'world', told the other ranks"
                   if mine else rf"rank {bad} refused its own arguments.*rank {bad}: .*{own}")
        timed(ok, C.RankArgumentError, pattern, wrong if mine else right, f"{name}: bad rank")
        still_usable(comm, ok, name)
    # two ranks refuse at once (the last ranks), each its own way
    if n == 3:
        calls = {1: lambda: comm.all_reduce([]), 2: lambda: comm.all_reduce(np.ones((2, 2)).T),
                 0: lambda: comm.all_reduce(np.ones(4))}
        patterns = {0: r"ranks 1, 2 refused their own arguments.*empty list.*C-contiguous",
                    1: r"empty list.*told the other ranks.*rank 2 refused its arguments too",
                    2: r"C-contiguous.*told the other ranks.*rank 1 refused its arguments too"}
        timed(ok, C.RankArgumentError, patterns[r], calls[r], "two ranks refuse")
        still_usable(comm, ok, "two ranks refuse")
    # every rank refuses alike: the others named together
    others = [k for k in range(n) if k != r]
    who = f"rank {others[0]} refused its" if n == 2 else (
        f"ranks {', '.join(map(str, others))} refused their")
    error = timed(ok, C.RankArgumentError, rf"empty list.*told the other ranks.*\n  {who} "
                  r"arguments too: all_reduce: data is an empty list", lambda: comm.all_reduce([]),
                  "every rank refuses")
    ok.true(error is not None and str(error).count("empty list") == 2,
            "every rank refuses: one line for the others", repr(str(error)))
    # on a group: the ranks named with their world ranks
    comm.new_group(("top", list(range(1, n))))
    if r >= 1:  # world rank 1, group rank 0, passes a src outside the group
        src = n - 1 if r == 1 else 0
        pattern = (r"src=.*out of range.*rank 0 \(world rank 1\) of group 'top', told" if r == 1
                   else r"rank 0 \(world rank 1\) refused its own arguments")
        timed(ok, C.RankArgumentError, pattern,
              lambda: comm.bcast(np.ones(2), src=src, group="top"), "group refusal")
    comm.barrier()
    still_usable(comm, ok, "group refusal")


def check_new_group(comm, ok: Checks) -> None:
    n, r = comm.size, comm.rank
    cases = {
        "names": (lambda: comm.new_group(("a" if r == 0 else "b", [0, 1])),
                  (r"differ in: name and ranks.*rank 0: new_group\(\('a', \[0, 1\]\)\).*"
                   r"rank 1: new_group\(\('b', \[0, 1\]\)\)")),
        "ranks": (lambda: comm.new_group(("c", [0, 1] if r == 0 else [1, 0])),
                  r"rank 0: new_group\(\('c', \[0, 1\]\)\).*rank 1: new_group\(\('c', \[1, 0\]\)\)"),
        "another collective": (lambda: comm.new_group(("d", [0, 1])) if r != 1 else comm.barrier(),
                               r"operation.*rank 0: new_group.*rank 1: barrier"),
    }
    for name, (call, pattern) in cases.items():
        error = timed(ok, C.AgreementError, pattern, call, f"new_group: {name}")
        messages = MPI.COMM_WORLD.allgather(str(error))
        ok.true(len(set(messages)) == 1, f"new_group: {name}: ranks raised different messages")
        ok.true(comm.list_groups() == {"world": list(range(n))},
                f"new_group: {name}: no group made", f"{comm.list_groups()}")
    bad = (lambda: comm.new_group(("e", [0, n]))) if r == 1 else (
        lambda: comm.new_group(("e", [0, 1])))
    pattern = (rf"distinct ranks in 0..{n - 1}, got \[0, {n}\].*told the other" if r == 1
               else r"rank 1 refused its own arguments.*rank 1: new_group 'e' needs")
    timed(ok, C.RankArgumentError, pattern, bad, "new_group: bad ranks on one rank")
    ok.true(comm.new_group(("e", [1, 0])) == "e", "new_group after the errors")
    data = np.full(2, r + 1.0)
    if r < 2:
        comm.all_reduce(data, group="e")
        ok.close(data, np.full(2, 3.0), "all_reduce on the group made after the errors")
    comm.barrier()
    still_usable(comm, ok, "new_group")


def check_standoff(comm, ok: Checks, calls: dict, what: str) -> None:
    """``calls[rank]`` leave the ranks waiting for each other: every rank raises."""
    r = comm.rank
    standoff = r"can never complete.*rank 0: all_reduce #\d+ on 'low', waiting for rank"
    if what == "groups":
        standoff = (r"can never complete.*rank 0: all_reduce #\d+ on 'world', waiting for rank "
                    r"1.*rank 1: all_reduce #\d+ on 'low', waiting for rank 0")
    timed(ok, C.AgreementError, standoff + r".*communicator is broken now", calls[r], what)
    ok.raises(C.CommunicatorError, "broken", comm.barrier, f"{what}: next use")


def main(mode: str) -> None:
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    n, r = comm.size, comm.rank
    ok = Checks(r)
    if mode == "arguments":
        check_arguments(comm, ok)
    elif mode == "new_group":
        check_new_group(comm, ok)
    elif mode in ("groups", "unknown"):
        comm.new_group(("low", [0, 1]))
        x = np.ones(4)

        def on_low():
            comm.all_reduce(x, group="low")

        def astray():
            ok.raises(DpnbError, "no group named 'lwo'", lambda: comm.all_reduce(x, group="lwo"),
                      "unknown group")
            comm.barrier()

        if mode == "groups":  # rank 0 on 'world', rank 1 on 'low', rank 2 on 'world'
            calls = {0: lambda: comm.all_reduce(x), 1: on_low, 2: lambda: comm.all_reduce(x)}
        else:  # rank 0 on 'low', rank 1 astray, then in a barrier (on 'world'), as rank 2
            calls = {0: on_low, 1: astray, 2: comm.barrier}
        check_standoff(comm, ok, calls, mode)
        ok.finish(hard_exit=True, sync=MPI.COMM_WORLD.Barrier)  # the checks stay posted
    elif mode == "interrupt":
        late = n - 1
        comm.barrier()
        if r == late:
            time.sleep(1.5)  # rank 0 is interrupted meanwhile
            comm.timeout = 1.0
            timed(ok, C.CommunicatorError, r"rank 0 was interrupted in new_group #\d+[:;] .*broken.*"
                  "restart", lambda: comm.new_group(("pair", [0, late])),
                  "late rank: new_group meets the abandoned check", limit=0.5)
        else:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            error = timed(ok, C.CommunicatorInterrupted, r"new_group on group 'world'.*interrupted",
                          lambda: comm.new_group(("pair", [0, late])), "interrupted new_group",
                          limit=1.5)
            ok.true(isinstance(error, KeyboardInterrupt), "an interrupt is a KeyboardInterrupt")
            ok.raises(C.CommunicatorError, "broken", comm.barrier, "after the interrupt")
        ok.finish(hard_exit=True, sync=MPI.COMM_WORLD.Barrier)
    elif mode == "funneled":
        ok.true(MPI.Query_thread() == MPI.THREAD_FUNNELED, "MPI runs funneled")
        comm.new_group(("pair", [1, 0]))
        data = np.full(2, r + 1.0)
        if r < 2:
            comm.all_reduce(data, group="pair")
            ok.close(data, np.full(2, 3.0), "all_reduce on a group made funneled")
    elif mode == "absent":
        comm.barrier()
        if r < n - 1:
            comm.timeout = 1.0
            timed(ok, C.CommunicatorTimeout, r"new_group on group 'world'.*agreement check.*"
                  "did not take part within the timeout of 1 s",
                  lambda: comm.new_group(("pair", [0, 1])), "a rank never calls new_group",
                  limit=2.5)
        ok.finish(hard_exit=True, sync=MPI.COMM_WORLD.Barrier)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1]))
