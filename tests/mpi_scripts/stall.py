"""Run under mpiexec with a MODE: stall reports of collectives kept waiting.

``late`` (2 or 3 ranks): the ranks above 0 compute in NumPy (a loop of large
operations, then one long call, then a loop again with the agreement check
off) while rank 0 waits in all_reduce: rank 0
prints exactly one report (and logs it) naming each late rank, the operation and
number of the collective it last entered and how long ago; the results are
right once they arrive; fast collectives print nothing.  With 3 ranks, rank 2
is later than rank 1, which then reports rank 2 alone; and rank 1 waits on
group 'pair' (ranks 1 and 2) while rank 0 waits on 'world'.

``remote`` (2 ranks): a board on which every rank is its own host, so that
entries are read by passive-target RMA: a read of a rank busy in NumPy ends
within its patience (its entry, or unreachable), a read of a rank inside MPI
gives its entry."""
from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import time

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.communicators._internal.exchange import Group
from dpnb.communicators._internal.status_board import REMOTE_FRESH, StatusBoard
from dpnb.communicators._internal.wait import stall_report
from dpnb.testing import Checks, LoggedWarnings, guarded

STALL = 0.5
BUSY = 2.0        # seconds a late rank computes
LATER = 1.5       # how much longer rank 2 computes than rank 1, with 3 ranks
NUMBER = r"\d+(?:\.\d+)?"


def busy_loop(seconds: float) -> None:
    """Large NumPy operations, one after the other, for ``seconds``."""
    a = np.random.RandomState(0).standard_normal((600, 600))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = np.tanh(a @ a / 600.0)


def long_call_size(seconds: float) -> int:
    """The size of a square matrix product that takes about ``seconds``, from products
    grown until one takes a tenth of that (large enough to run as fast as the big one)."""
    n = 256
    while True:
        a = np.ones((n, n))
        start = time.monotonic()
        a @ a
        took = time.monotonic() - start
        if took > seconds / 10:
            return int(n * (seconds / took) ** (1 / 3))
        n = int(n * 1.5)


def one_long_call(n: int) -> float:
    """One matrix product of size ``n``; returns how long it took."""
    a = np.ones((n, n))
    start = time.monotonic()
    a @ a
    return time.monotonic() - start


def waiting(comm, call, records: LoggedWarnings) -> tuple[list[str], list[str], float]:
    """Run ``call()``; the report lines it printed, the messages it logged, its seconds."""
    out = io.StringIO()
    logged = len(records.messages)
    start = time.monotonic()
    with contextlib.redirect_stdout(out):
        call()
    seconds = time.monotonic() - start
    return out.getvalue().splitlines(), records.messages[logged:], seconds


def check_report(ok: Checks, what: str, lines: list[str], logged: list[str], head: str,
                 late: list[tuple[int, str]]) -> list[int]:
    """Exactly one report line, also logged: ``head`` (operation, number and group), the
    wait, then each of ``late`` (rank, what it last entered) with a plausible age.  In
    ``head`` and ``late``, ``#?`` stands for any number; returns those numbers."""
    ok.true(len(lines) == 1, f"{what}: one report printed", f"printed {lines!r}")
    ok.true(logged == lines[:1], f"{what}: the report logged", f"logged {logged!r}")
    if not lines:
        return []
    pattern = (numbered(head) + f": waiting (?P<waited>{NUMBER}) s for " + "; for ".join(
        f"rank {rank}, which last entered {numbered(entered)} (?P<age{k}>{NUMBER}) s ago"
        for k, (rank, entered) in enumerate(late)) + "$")
    match = re.match(pattern, lines[0])
    ok.true(match, f"{what}: the report names the late ranks", f"{lines[0]!r} !~ {pattern!r}")
    if not match:
        return []
    waited = float(match["waited"])
    ages = [float(match[f"age{k}"]) for k in range(len(late))]
    ok.true(STALL <= waited < STALL + 1.5, f"{what}: waited about comm.stall_seconds",
            f"{waited} s")
    ok.true(all(0 <= age < 60 for age in ages), f"{what}: ages plausible", f"{ages}")
    named = set(match.re.groupindex.values())
    return [int(match[i]) for i in range(1, match.re.groups + 1) if i not in named]


def numbered(text: str) -> str:
    """``text`` as a pattern, each ``#?`` in it matching ``#`` and a number (a group)."""
    return r"#(\d+)".join(map(re.escape, text.split("#?")))


def late(comm, ok: Checks) -> None:
    n, r = comm.size, comm.rank
    size = long_call_size(BUSY + 0.5)
    records = LoggedWarnings("dpnb.communicators")
    logging.getLogger("dpnb.communicators").propagate = False
    comm.stall_seconds = STALL
    x = np.full(5, r + 1.0, np.float32)
    total = n * (n + 1) / 2
    comm.all_reduce(x)                                     # world #1
    comm.bcast(x, 0)                                       # world #2
    expected = np.full(5, total, np.float32)

    # a loop of large NumPy operations on the late ranks
    x = np.full(5, r + 1.0, np.float32)
    if r > 0:
        busy_loop(BUSY + (LATER if r == 2 else 0.0))
    lines, logged, seconds = waiting(comm, lambda: comm.all_reduce(x), records)  # world #3
    ok.close(x, expected, "loop: the all_reduce after the stall")
    if r == 0:
        check_report(ok, "loop", lines, logged, "all_reduce #3 on 'world'",
                     [(k, "bcast #2") for k in range(1, n)])
        ok.true(seconds > BUSY - 0.2, "loop: rank 0 waited for the late ranks", f"{seconds} s")
    elif r == 1 and n == 3:
        check_report(ok, "loop, rank 1", lines, logged, "all_reduce #3 on 'world'",
                     [(2, "bcast #2")])
    else:
        ok.true(not lines and not logged, "loop: no report on the last rank", f"{lines!r}")

    # one long NumPy call
    x = np.full(5, r + 1.0, np.float32)
    took = one_long_call(size) if r > 0 else 0.0
    lines, logged, _ = waiting(comm, lambda: comm.all_reduce(x), records)  # world #4
    ok.close(x, expected, "one call: the all_reduce after the stall")
    took = comm_max(took)
    if r == 0 and took > STALL + 0.5:
        check_report(ok, "one call", lines, logged, "all_reduce #4 on 'world'",
                     [(k, "all_reduce #3") for k in range(1, n)])
    ok.true(took > STALL + 0.5 or r != 0, "one call: the long call outlasted the stall time",
            f"it took {took:.2f} s")

    # without the agreement check: the wait is in the data collective itself
    comm.check_agreement = False
    x = np.full(5, r + 1.0, np.float32)
    if r > 0:
        busy_loop(BUSY)
    lines, logged, _ = waiting(comm, lambda: comm.all_reduce(x), records)  # world #5
    ok.close(x, expected, "no check: the all_reduce after the stall")
    if r == 0:
        check_report(ok, "no check", lines, logged, "all_reduce #5 on 'world'",
                     [(k, "all_reduce #4") for k in range(1, n)])
    comm.check_agreement = True

    # fast collectives: no report
    big = np.ones(1 << 18, np.float32)
    comm.stall_seconds = 2.0
    printed: list[str] = []
    for k in range(100):
        lines, logged, _ = waiting(comm, lambda: comm.all_reduce(x if k % 10 else big), records)
        printed += lines + logged
    ok.true(not printed, "fast collectives print nothing", f"{printed[:3]!r}")
    comm.stall_seconds = STALL

    if n == 3:
        groups(comm, ok, records)


def groups(comm, ok: Checks, records: LoggedWarnings) -> None:
    """Rank 1 waits on group 'pair' for rank 2, rank 0 on 'world' for both."""
    r = comm.rank
    comm.new_group(("pair", [1, 2]))
    comm.barrier()
    x = np.full(5, r + 1.0, np.float32)
    y = np.full(3, r + 1.0, np.float32)
    if r == 2:
        busy_loop(BUSY)
    if r == 0:
        lines, logged, _ = waiting(comm, lambda: comm.all_reduce(x), records)
        numbers = check_report(ok, "groups", lines, logged, "all_reduce #? on 'world'",
                               [(1, "all_reduce #1 on 'pair'"), (2, "barrier #?")])
    else:
        lines, logged, _ = waiting(comm, lambda: comm.all_reduce(y, group="pair"), records)
        numbers = []
        if r == 1:
            numbers = check_report(ok, "groups, rank 1", lines, logged,
                                   "all_reduce #1 on 'pair'", [(2, "barrier #? on 'world'")])
            numbers = [numbers[0] + 1, numbers[0]] if numbers else []
        ok.close(y, np.full(3, 5.0, np.float32), "groups: the all_reduce on 'pair'")
        comm.all_reduce(x)
    ok.close(x, np.full(5, 6.0, np.float32), "groups: the all_reduce on 'world'")
    # the barrier was world's collective after the 105 above (and new_group, if it is one)
    ok.true(r == 2 or (len(numbers) == 2 and numbers[0] == numbers[1] + 1
                       and numbers[1] in (106, 107)), "groups: the numbers on 'world'",
            f"{numbers}")
    numbers = MPI.COMM_WORLD.allgather(numbers)
    ok.true(numbers[0] == numbers[1], "groups: ranks 0 and 1 number the barrier alike",
            f"{numbers}")


def comm_max(value: float) -> float:
    return MPI.COMM_WORLD.allreduce(value, op=MPI.MAX)


def remote(ok: Checks) -> None:
    world = MPI.COMM_WORLD.Dup()
    r = world.Get_rank()
    world_group = Group("world", [0, 1], world, r)
    board = StatusBoard(world, {"world": world_group}, local=world.Split(r))
    for _ in range(3 + r):
        board.publish("all_reduce", world_group)
    world.Barrier()
    other = board.entry(1 - r)
    ok.true((other.operation, other.group, other.sequence) == ("all_reduce", "world", 4 - r),
            "remote: the other rank's entry, read while it is in MPI", f"{other}")
    world.Barrier()
    if r == 1:
        busy_loop(BUSY)
    else:
        start = time.monotonic()
        other = board.entry(1, patience=0.2)
        seconds = time.monotonic() - start
        ok.true(seconds < 1.0, "remote: a read of a busy rank ends within its patience",
                f"{seconds:.2f} s")
        ok.true(not other.reachable or other.sequence == 4,
                "remote: a busy rank's entry, or unreachable", f"{other}")
        mine = board.mine()
        report = stall_report(mine, "world", {1: other})
        ok.true(other.reachable or report.endswith(
            "for rank 1, on another host, whose entry cannot be read while it is outside MPI"),
            "remote: an unreachable rank in the report", report)
    world.Barrier()
    if r == 0:
        other = board.entry(1, patience=5.0)
        ok.true(other.reachable and other.sequence == 4 and other.ago > BUSY - 0.5,
                "remote: read again once the rank is in MPI", f"{other}")
        board.entry(1, patience=0.0)  # a read left posted, served while rank 1 waits below
        time.sleep(REMOTE_FRESH + 0.2)
    world.Barrier()
    if r == 1:
        board.publish("all_reduce", world_group)
    world.Barrier()
    if r == 0:
        other = board.entry(1, patience=5.0)
        ok.true(other.reachable and other.sequence == 5,
                "remote: a read left from long ago is made again", f"{other}")
    world.Barrier()
    board.free()


def main(mode: str) -> None:
    ok = Checks(MPI.COMM_WORLD.Get_rank())
    if mode == "remote":
        remote(ok)
    else:
        comm = C.MultiProcessCommunicator(nn.Context())
        comm.init()
        late(comm, ok)
    ok.finish()


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1]))
