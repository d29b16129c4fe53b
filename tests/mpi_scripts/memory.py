"""Run under mpiexec with 2 ranks: all_reduce of several small arrays that are
new on every call (the packed path, one plan and one MPI layout datatype per
call) frees what each dropped plan made.  Deterministic checks: the layout
datatypes alive stay within the plan cache, with the agreement check on and
off and when the arrays behind the same handles move; a datatype made after
thousands of calls gets a handle MPI already had (freed handles are reused, so
leaked ones would push it on).  Then the resident memory grows by less than
``RSS_BOUND`` over ``RSS_CALLS`` calls (a leak of 450 bytes a call is 9 MB)."""
from __future__ import annotations

import gc
import os

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.communicators._internal.exchange import PLAN_CACHE_SIZE
from dpnb.communicators._internal.mpi import live_layout_types
from dpnb.testing import Checks, guarded

SHAPES = [(40,), (8, 5), (3, 7), (33,)]  # 4 float32 arrays, 516 bytes: not carried, packed
CALLS = 3000
PROBES = 10
RSS_WARMUP = 3000
RSS_CALLS = 20000
RSS_BOUND = 2 << 20


def fresh_arrays(r: int, i: int) -> list[np.ndarray]:
    return [np.full(shape, r + 1 + (i % 7), np.float32) for shape in SHAPES]


def expected_sum(n: int, i: int) -> np.ndarray:
    return np.float32(sum(r + 1 + (i % 7) for r in range(n)))


def probe_handle() -> int:
    """The handle MPI gives a new datatype now (freed at once)."""
    datatype = MPI.INT.Dup()
    handle = datatype.py2f()
    datatype.Free()
    return handle


def check_fresh_arrays(comm, ok: Checks, n: int, r: int, agreement: bool) -> None:
    """New plain arrays on every call: a plan each, layouts freed as plans leave the cache."""
    comm.check_agreement = agreement
    what = f"check_agreement={agreement}"
    handles, most, wrong = set(), 0, []
    for i in range(CALLS):
        arrays = fresh_arrays(r, i)
        comm.all_reduce(arrays, division=False)
        most = max(most, live_layout_types())
        if i % 97 == 0 and not all(np.all(a == expected_sum(n, i)) for a in arrays):
            wrong.append(i)
        if i % (CALLS // PROBES) == CALLS // PROBES - 1:
            handles.add(probe_handle())
    ok.true(not wrong, f"{what}: wrong sums at calls {wrong[:5]}")
    ok.true(0 < most <= PLAN_CACHE_SIZE,
            f"{what}: {most} layout datatypes alive at most, expected 1 to {PLAN_CACHE_SIZE} "
            "(one per cached plan)")
    ok.true(len(handles) <= 2, f"{what}: a new datatype got {len(handles)} different handles "
            f"at {PROBES} points: datatypes are leaking")


def check_moved_arrays(comm, ok: Checks, n: int, r: int) -> None:
    """The same handles bound to new arrays on every call: the one cached plan is
    made again each time, and the layout of the plan it replaces is freed."""
    comm.check_agreement = True
    handles = [nn.NdArray.from_numpy_array(a) for a in fresh_arrays(r, 0)]
    before, most = live_layout_types(), 0
    for i in range(CALLS):
        for h, a in zip(handles, fresh_arrays(r, i)):
            h.bind(a)
        comm.all_reduce(handles, division=False)
        most = max(most, live_layout_types())
    ok.true(most <= before + 1, f"moved arrays: {most} layout datatypes alive, expected at most "
            f"{before + 1} (the cache's, and the plan of these handles)")
    ok.true(all(np.all(h.data == expected_sum(n, CALLS - 1)) for h in handles),
            "moved arrays: wrong sums")


def rss_bytes() -> int:
    """This process's resident memory (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def check_rss(comm, ok: Checks, r: int) -> None:
    """Resident memory after the cache is full grows by less than RSS_BOUND."""
    comm.check_agreement = True
    for i in range(RSS_WARMUP):
        comm.all_reduce(fresh_arrays(r, i), division=False)
    start = rss_bytes()
    for i in range(RSS_CALLS):
        comm.all_reduce(fresh_arrays(r, i), division=False)
    growth = rss_bytes() - start
    ok.true(growth < RSS_BOUND, f"resident memory grew by {growth} bytes over {RSS_CALLS} "
            f"calls ({growth / RSS_CALLS:.0f} bytes a call), expected under {RSS_BOUND}")


def main() -> None:
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    n, r = comm.size, comm.rank
    ok = Checks(r)
    gc.disable()  # plans must be freed as they are dropped, not by a later collection
    check_fresh_arrays(comm, ok, n, r, agreement=True)
    check_fresh_arrays(comm, ok, n, r, agreement=False)
    check_moved_arrays(comm, ok, n, r)
    gc.enable()
    check_rss(comm, ok, r)
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(main)
