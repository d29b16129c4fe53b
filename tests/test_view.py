"""The guard's error paths, on stand-ins for ipyparallel's view, client and results (a
GuardedView and GuardedClient hand it their own ``execute`` and ``send_signal``): a cell
refused where the cluster is gone, an interrupt the engines do not confirm or refuse,
and the report of a cell that was interrupted."""
from __future__ import annotations

import pytest
from ipyparallel.error import CompositeError, NoEnginesRegistered

from dpnb.cluster import view as guarded
from dpnb.cluster.view import Guard
from dpnb.errors import ClusterGone, DpnbError

DEFAULT = "the engines are gone (default)"


class Result:
    """An AsyncResult stand-in: ``done`` or not; ``get`` raises ``error`` where given."""

    def __init__(self, done=True, finishes=True, error=None):
        self._done, self._finishes, self._error = done, finishes, error

    def done(self):
        return self._done

    def wait(self, timeout):
        return self._finishes

    def get(self, timeout):
        if self._error is not None:
            raise self._error


class Sent:
    """What ``send_signal(block=False)`` returns: replies, or a timeout."""

    def __init__(self, replies=None):
        self._replies = replies

    def result(self, timeout):
        if self._replies is None:
            raise TimeoutError
        return self._replies


class View:
    def __init__(self, outcome):
        self.outcome, self.calls = outcome, 0

    def execute(self, code, block=None):
        self.calls += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class Client:
    block = True

    def __init__(self, sent):
        self.sent, self.signals = sent, []

    def send_signal(self, sig, targets=None, block=None):
        self.signals.append((sig, targets, block))
        return self.sent


def guard(outcome=None, sent=None, gone=None):
    seen = []
    v, c = View(outcome if outcome is not None else Result()), Client(sent or Sent([]))
    g = Guard(lambda: gone, DEFAULT, [seen.append])
    return g, v, c, seen


def execute(g, v, code):
    """What GuardedView.execute does: the view's own execute, through the guard."""
    return g.execute(v.execute, code)


def send_signal(g, c, sig, block=True):
    """What GuardedClient.send_signal does: the client's own, through the guard."""
    return g.send_signal(c.send_signal, sig, None, block)


def test_a_cell_is_refused_at_once_where_the_cluster_is_gone():
    g, v, c, seen = guard(gone="the controller is gone")
    with pytest.raises(ClusterGone, match="the controller is gone"):
        execute(g, v, "print(rank)")
    assert v.calls == 0 and seen == []
    with pytest.raises(ClusterGone, match="the controller is gone"):
        send_signal(g, c, 2)
    assert c.signals == []


def test_a_cell_runs_and_its_result_is_watched():
    result = Result()
    g, v, c, seen = guard(outcome=result)
    assert execute(g, v, "x = 1") is result and seen == [result]


def test_no_engines_registered_becomes_cluster_gone_with_the_default_reason():
    g, v, c, seen = guard(outcome=NoEnginesRegistered("none"))
    with pytest.raises(ClusterGone, match=r"the engines are gone \(default\)"):
        execute(g, v, "x = 1")


def test_an_interrupt_the_engines_do_not_confirm_is_an_error():
    g, v, c, seen = guard(sent=Sent(None))
    with pytest.raises(DpnbError, match=r"did not confirm signal 2 within 5 s; "
                                        r"the engines are gone \(default\)"):
        send_signal(g, c, 2)
    assert c.signals == [(2, None, False)]
    assert send_signal(g, c, 2, block=False).__class__ is Sent   # not blocking: no wait


def test_an_interrupt_an_engine_refuses_names_its_error():
    refused = [{"content": {"status": "ok"}},
               {"content": {"status": "error", "ename": "OSError", "evalue": "no such process"}}]
    g, v, c, seen = guard(sent=Sent(refused))
    with pytest.raises(DpnbError, match="sending signal 2 to the engines failed: "
                                        "OSError: no such process"):
        send_signal(g, c, 2)


def test_an_interrupted_cell_shows_every_ranks_error(capsys):
    error = CompositeError("interrupted", [
        ("CommunicatorInterrupted", "all_reduce #3", "tb", {"engine_id": 0}),
        ("KeyboardInterrupt", "", "tb", {"engine_id": 1})])
    running = Result(done=False, error=error)
    g, v, c, seen = guard(outcome=running)
    execute(g, v, "train()")
    send_signal(g, c, 2)
    g.show_interrupted()
    assert capsys.readouterr().err == ("Interrupted:\n[rank 0] CommunicatorInterrupted: "
                                       "all_reduce #3\n[rank 1] KeyboardInterrupt: \n")
    g.show_interrupted()                                   # shown once
    assert capsys.readouterr().err == ""


def test_ranks_still_running_after_an_interrupt_are_reported(capsys):
    g, v, c, seen = guard(outcome=Result(done=False, finishes=False))
    execute(g, v, "train()")
    send_signal(g, c, 2)
    g.show_interrupted()
    err = capsys.readouterr().err
    assert err.startswith(f"Some ranks still run {guarded.INTERRUPTED_WAIT:g} s after the "
                          "interrupt") and "`cluster.restart()` ends them" in err


def test_a_signal_after_the_cell_finished_reports_nothing(capsys):
    g, v, c, seen = guard(outcome=Result(done=True, error=ValueError("x")))
    execute(g, v, "x = 1")
    send_signal(g, c, 2)
    g.show_interrupted()
    assert capsys.readouterr().err == ""
