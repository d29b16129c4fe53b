"""The one owner of a cell's life (dpnb.cluster.cells), on stand-ins for IPython's shell
and the cluster's pieces: one pair of hooks per shell, the after-cell steps in their
stated order, each only where it applies, and the %%px placeholder after a stop."""
from __future__ import annotations

import pytest
from IPython.core.events import EventManager, available_events

from dpnb.cluster import cells, registry
from dpnb.errors import DpnbError


class Magics:
    """ParallelMagics as the cell owner reads it: its last result and its view."""

    def __init__(self):
        self.last_result = None
        self.view = object()


class Shell:
    """The parts of an IPython shell the cell owner uses: its events, its magics' registry
    and the %px magic."""

    def __init__(self):
        self.events = EventManager(self, available_events)
        self.magics_manager = type("Manager", (), {})()
        self.magics_manager.registry = {"ParallelMagics": Magics()}
        self.px = None

    def find_cell_magic(self, name):
        return self.px

    def register_magic_function(self, function, magic_kind, magic_name):
        assert (magic_kind, magic_name) == ("line_cell", "px")
        self.px = function


class Recorder:
    """The journal, progress monitor and guard of a cluster, writing what is called into
    one shared list."""

    def __init__(self, calls, interrupted=None):
        self.calls, self.interrupted = calls, interrupted

    def after_cell(self):
        self.calls.append("progress")

    def show_interrupted(self):
        self.calls.append("interrupted")

    def record(self, result, px):
        self.calls.append(("journal", px))


class Result:
    """IPython's ExecutionResult as far as the steps read it."""

    error_in_exec = None


def test_a_shell_gets_one_pair_of_hooks_however_often_it_is_asked():
    shell = Shell()
    life = cells.life(shell)
    assert cells.life(shell) is life
    assert shell.events.callbacks["pre_run_cell"] == [life.before]
    assert shell.events.callbacks["post_run_cell"] == [life.after]


def test_after_a_cell_the_steps_run_in_their_stated_order():
    shell, calls = Shell(), []
    life = cells.life(shell)
    life.follow(Recorder(calls), Recorder(calls), Recorder(calls, interrupted="running"))
    magics = shell.magics_manager.registry["ParallelMagics"]
    shell.events.trigger("pre_run_cell", None)
    magics.last_result = sent = object()               # the %%px cell sent this
    shell.events.trigger("post_run_cell", Result())
    assert calls == ["progress", "interrupted", ("journal", sent)]


def test_a_cell_that_sent_nothing_and_was_not_interrupted_skips_those_steps():
    shell, calls = Shell(), []
    life = cells.life(shell)
    life.follow(Recorder(calls), None, Recorder(calls))
    shell.magics_manager.registry["ParallelMagics"].last_result = object()   # an earlier cell's
    shell.events.trigger("pre_run_cell", None)
    shell.events.trigger("post_run_cell", Result())
    assert calls == [("journal", None)]


def test_engines_that_died_in_a_cell_are_named(capsys):
    shell, calls = Shell(), []
    cells.life(shell).follow(Recorder(calls), None, Recorder(calls))
    error = type("Composite", (Exception,), {})()
    error.elist = [("EngineError", "engine 1 died", "", {}), ("ValueError", "x", "", {})]
    result = Result()
    result.error_in_exec = error
    shell.events.trigger("post_run_cell", result)
    err = capsys.readouterr().err
    assert err.startswith("engine 1 died\nEngine ids are MPI ranks") and "ValueError" not in err


def test_after_a_cell_that_stopped_the_cluster_px_says_how_to_get_one(monkeypatch):
    shell, calls = Shell(), []
    life = cells.life(shell)
    journal = Recorder(calls)
    life.follow(journal, None, Recorder(calls))
    shell.px = "ipyparallel's %%px"
    monkeypatch.setattr(registry, "active", lambda: None)
    monkeypatch.setattr(registry, "stopped_view", lambda view: True)
    shell.events.trigger("post_run_cell", Result())
    assert shell.px == "ipyparallel's %%px"            # the cluster is still followed
    life.unfollow(Recorder(calls))                     # another cluster's journal: no effect
    assert life.journal is journal
    life.unfollow(journal)                             # as stop() does
    shell.events.trigger("post_run_cell", Result())
    assert cells.is_placeholder(shell)
    with pytest.raises(DpnbError, match="no cluster is running in this process"):
        shell.px("", "x = 1")
