"""Stall reports: a collective kept waiting says which ranks are late and where
they are.  Real MPI runs of tests/mpi_scripts/stall.py, and the report's
wording from made-up status board entries."""
from __future__ import annotations

import dataclasses
import re
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.communicators as C
from dpnb.cluster import Cluster
from dpnb.communicators._internal.plan import stable_hash
from dpnb.communicators._internal.status_board import Entry
from dpnb.communicators._internal.wait import Guard, stall_report
from dpnb.communicators.settings import Settings
from dpnb.errors import DpnbError
from dpnb.testing import check_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "stall.py"


@pytest.mark.parametrize("n", [2, 3])
def test_late_ranks_are_reported_once(n):
    """Ranks busy in NumPy (a loop, one long call) are named by the waiting rank, once."""
    check_ranks(n, SCRIPT, "late", timeout=180)


def test_entries_of_other_hosts_are_read_by_rma():
    check_ranks(2, SCRIPT, "remote", timeout=60)


def _entry(rank, operation, group, sequence, ago, counts=None, reachable=True):
    key = stable_hash(group) if group else 0
    return Entry(rank, reachable, operation, group, key, sequence, ago,
                 {key: sequence, **(counts or {})} if group else {})


def test_report_wording():
    mine = _entry(0, "all_reduce", "world", 57, 30.2)
    others = {
        1: _entry(1, "bcast", "world", 56, 31.4),
        2: _entry(2, "all_reduce", "world", 57, 0.1),        # arrived: not listed
        3: _entry(3, "all_reduce", "pair", 4, 2.25, {stable_hash("world"): 56}),
        4: _entry(4, None, None, 0, 0.0),
        5: Entry(5, reachable=False),
        6: _entry(6, "reduce", None, 9, 12.0),               # a group unknown here
        7: _entry(7, "all_reduce", "pair", 2, 1.0, {stable_hash("world"): 58}),  # ahead
    }
    assert stall_report(mine, "world", dict(list(others.items())[:2])) == (
        "all_reduce #57 on 'world': waiting 30 s for rank 1, which last entered bcast #56 "
        "31 s ago")
    assert stall_report(mine, "world", others) == (
        "all_reduce #57 on 'world': waiting 30 s for rank 1, which last entered bcast #56 "
        "31 s ago; for rank 3, which last entered all_reduce #4 on 'pair' 2.2 s ago; "
        "for rank 4, which has entered no collective yet; "
        "for rank 5, on another host, whose entry cannot be read while it is outside MPI; "
        "for rank 6, which last entered reduce #9 on a group this rank does not know 12 s ago")
    assert stall_report(mine, "world", {2: others[2], 7: others[7]}) == (
        "all_reduce #57 on 'world': waiting 30 s; every rank of the group has entered it "
        "(the data are still moving)")


def test_entry_counts_of_a_group():
    entry = _entry(1, "bcast", "world", 56, 1.0, {stable_hash("pair"): 3})
    assert (entry.entered_in("world"), entry.entered_in("pair"), entry.entered_in("x")) == (
        56, 3, 0)
    overflowing = Entry(1, True, "bcast", "world", stable_hash("world"), 56, 1.0, {}, False)
    assert overflowing.entered_in("world") == 56 and overflowing.entered_in("pair") is None
    assert Entry(1, reachable=False).entered_in("world") is None


def test_stall_seconds_setting(monkeypatch):
    comm = C.MultiProcessCommunicator(nn.Context())
    assert comm.stall_seconds == 30
    comm.stall_seconds = 0.25
    assert comm.stall_seconds == 0.25
    for bad in (0, -1, "soon"):
        with pytest.raises(DpnbError, match="comm.stall_seconds must be a positive number"):
            comm.stall_seconds = bad
    monkeypatch.setenv("DPNB_COMM_STALL", "2.5")
    assert C.MultiProcessCommunicator(nn.Context()).stall_seconds == 2.5
    for bad in ("0", "later"):
        monkeypatch.setenv("DPNB_COMM_STALL", bad)
        with pytest.raises(DpnbError, match="DPNB_COMM_STALL must be a positive number"):
            C.MultiProcessCommunicator(nn.Context())


class _Group:
    name = "world"
    ranks = [0, 1]


class _Board:
    """A stand-in status board of one rank, whose peer never entered a collective."""

    rank = 0
    groups = {"world": _Group()}

    def __init__(self):
        self.published = 0
        self.reports = 0

    def publish(self, operation, group):
        self.published += 1
        self.at = time.monotonic()

    def entered_at(self):
        return self.at

    def mine(self):
        self.reports += 1
        return _entry(0, "barrier", "world", self.published, 0.5)

    def entries(self, ranks):
        return {r: _entry(r, None, None, 0, 0.0) for r in ranks}

    def local_peer_broken(self, group):
        return False

    def broken_peers(self, ranks):
        return []


def _wait(guard, seconds):
    start = time.monotonic()
    guard.wait_until(lambda: time.monotonic() - start > seconds, lambda: "barrier")


def test_a_wait_reports_once_and_only_below_the_timeout(capsys, caplog):
    board = _Board()
    guard = Guard(Settings(timeout=5.0, stall_seconds=0.05), board)
    guard.enter("barrier", _Group())
    _wait(guard, 0.15)
    _wait(guard, 0.15)  # a second wait in the same collective: no second report
    assert board.reports == 1
    report = "barrier #1 on 'world': waiting 0.5 s for rank 1, which has entered no collective yet"
    assert capsys.readouterr().out == report + "\n"
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("dpnb.communicators", "WARNING", report)]
    guard.enter("barrier", _Group())
    _wait(guard, 0.01)  # shorter than stall_seconds: nothing
    assert board.reports == 1
    guard.use(dataclasses.replace(guard.settings, stall_seconds=5.0))  # not below the timeout
    guard.enter("barrier", _Group())
    _wait(guard, 0.1)
    assert board.reports == 1


def test_a_report_streams_into_a_px_cell_while_it_runs(tmp_path, monkeypatch):
    """On real ipyparallel engines: rank 0's report reaches the notebook while the
    all_reduce still waits for rank 1 (busy in NumPy), and the cell then completes."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    cluster = Cluster(2, timeout=60, progress=False)
    cluster.start()
    try:
        cell = cluster.view.execute(textwrap.dedent("""
            import time
            import numpy as np
            import dpnb as nn
            import dpnb.communicators as C
            comm = C.MultiProcessCommunicator(nn.Context())
            comm.init()
            comm.stall_seconds = 0.5
            x = np.full(3, comm.rank + 1.0, np.float32)
            comm.barrier()
            if comm.rank == 1:
                a, end = np.ones((500, 500)), time.monotonic() + 6
                while time.monotonic() < end:
                    a = np.tanh(a @ a / 500)
            comm.all_reduce(x)
            """), block=False)
        deadline = time.monotonic() + 60
        while not cell.ready() and "waiting" not in cell.stdout[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        streamed, running = cell.stdout[0], not cell.ready()
        cell.get(timeout=60)
        assert running and re.fullmatch(
            r"all_reduce #2 on 'world': waiting \d\.\d s for rank 1, which last entered "
            r"barrier #1 \d\.\d s ago\n", streamed), (running, streamed)
        assert cell.stdout[1] == ""
        np.testing.assert_array_equal(np.array(cluster.view.pull("x", block=True)),
                                      np.full((2, 3), 3.0, np.float32))
    finally:
        cluster.stop()
