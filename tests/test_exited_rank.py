"""A rank that exits (an uncaught exception, sys.exit, the end of its script) tells its
peers through the status board: real MPI runs of tests/mpi_scripts/exited.py, where rank 0
waits in an all_reduce that rank 1 never reaches, and the wording from made-up entries."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpnb.communicators._internal.exits import describe
from dpnb.communicators._internal.plan import stable_hash
from dpnb.communicators._internal.status_board import Entry
from dpnb.communicators._internal.wait import peer_broken_message
from dpnb.errors import AgreementError
from dpnb.testing import assert_ranks_ok, run_script

SCRIPT = Path(__file__).parent / "mpi_scripts" / "exited.py"
TIMEOUT = 60.0
LEARNED_WITHIN = 2.0  # seconds from rank 1's exit to rank 0's error (0.3 to 0.4 s measured)


@pytest.mark.parametrize("mode", ["raise", "exit", "first", "ended", "remote"])
def test_peers_learn_of_an_exited_rank(mode):
    """Rank 0 raises naming rank 1 and why, long before its 60 s timeout, and the whole
    run ends (rank 1's exit status, if any, is mpiexec's)."""
    run = run_script(2, SCRIPT, mode, timeout=TIMEOUT)
    assert not run.timed_out, run.explain() + "\n" + run.output
    assert_ranks_ok(run, [0], exit_status=False)
    exited = float(re.search(r"^RANK 1 EXITS AT (\S+)$", run.output, re.M).group(1))
    learned = float(re.search(r"^RANK 0 LEARNED AT (\S+)$", run.output, re.M).group(1))
    assert 0 < learned - exited < LEARNED_WITHIN, run.output
    if mode in ("raise", "first", "remote"):
        assert "ValueError: no such thing" in run.output          # rank 1's own traceback too


def _exited(rank, reason, operation="all_reduce", sequence=3, group="world"):
    key = stable_hash(group)
    return Entry(rank, True, operation, group if operation else None, key if operation else 0,
                 sequence if operation else 0, 1.0, {key: sequence} if operation else {},
                 broken="exited", reason=reason)


def test_wording():
    assert peer_broken_message([_exited(1, "ValueError: bad")], "world") == (
        "rank 1 exited after all_reduce #3 (ValueError: bad), so it will not take part in "
        "collectives on 'world' again.  The ranks are out of step: restart the engines (e.g. "
        "`%dpnb restart` or cluster.restart()) and create a new communicator")
    both = peer_broken_message([_exited(1, "SystemExit", operation=None),
                                _exited(2, "KeyError: 'x'", "bcast", 2, "pair")], "world")
    assert both.startswith("rank 1 exited before any collective (SystemExit); rank 2 exited "
                           "after bcast #2 on 'pair' (KeyError: 'x'), so they will not take")
    broken = Entry(3, True, "bcast", "world", stable_hash("world"), 4, 1.0, broken="timed out")
    assert peer_broken_message([_exited(1, "ValueError: bad"), broken], "world").startswith(
        "rank 1 exited after all_reduce #3 (ValueError: bad); rank 3 timed out in bcast #4: "
        "their communicators are broken, so they will not take part")


def test_exceptions_are_described_by_their_first_line():
    assert describe(ValueError("no such thing")) == "ValueError: no such thing"
    assert describe(AgreementError("ranks differ:\n  rank 0: ...")) == (
        "AgreementError: ranks differ:")
    assert describe(KeyboardInterrupt()) == "KeyboardInterrupt"
