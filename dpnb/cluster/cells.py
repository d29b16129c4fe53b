"""A cell's life in this process's IPython shell, owned in one place.

IPython calls ``CellLife.before`` ahead of every cell and ``CellLife.after`` once it
has run.  ``after`` does, in this order: (1) finish the cell's progress display,
(2) show every rank's error of a ``%%px`` cell that was interrupted, (3) name the
engines that died in it, (4) record it in the cluster's journal, (5) where no cluster is
followed (the cell stopped it), put back the ``%%px`` placeholder.  Steps 1 to 4
belong to the cluster whose view ``%%px`` runs on: it hands over its journal,
progress display and guarded view with ``follow`` and takes them back with
``unfollow``."""
from __future__ import annotations

import sys
import weakref

from ..errors import DpnbError
from . import registry
from .view import GONE_ENGINES

_lives: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # shell -> its CellLife


def no_cluster_px(line: str = "", cell: str | None = None):
    """``%px``/``%%px`` while no cluster runs: ipyparallel's magics come with a cluster's view."""
    raise DpnbError(f"%px: {registry.NO_CLUSTER}")


class CellLife:
    """The ``pre_run_cell`` / ``post_run_cell`` hooks of one IPython shell."""

    def __init__(self, shell):
        self.shell = shell
        self.journal = self.monitor = self.guard = None   # the followed cluster's pieces
        self._px_before = None   # ParallelMagics' last result when the cell began
        shell.events.register("pre_run_cell", self.before)
        shell.events.register("post_run_cell", self.after)

    def follow(self, journal, monitor, guard) -> None:
        """Run the after-cell steps of a cluster's ``journal``, progress ``monitor`` (or
        None) and ``guard`` (the Guard of its view) from now on."""
        self.journal, self.monitor, self.guard = journal, monitor, guard

    def unfollow(self, journal) -> None:
        """Stop running the after-cell steps of the cluster whose journal is ``journal``."""
        if self.journal is journal:
            self.journal = self.monitor = self.guard = None

    def before(self, info=None) -> None:
        self._px_before = self._last_px_result()

    def after(self, result) -> None:
        if self.monitor is not None:
            self.monitor.after_cell()
        if self.guard is not None:
            if self.guard.interrupted is not None:
                self.guard.show_interrupted()
            _report_deaths(result)
        if self.journal is not None:
            px = self._last_px_result()
            self.journal.record(result, px if px is not self._px_before else None)
        else:
            self._restore_placeholder()

    def _parallel_magics(self):
        return self.shell.magics_manager.registry.get("ParallelMagics")

    def _last_px_result(self):
        return getattr(self._parallel_magics(), "last_result", None)

    def _restore_placeholder(self) -> None:
        """After a cell that stopped this process's cluster, ``%%px`` says how to get one
        again (instead of ipyparallel's magics on the stopped view)."""
        magics = self._parallel_magics()
        if (magics is not None and not is_placeholder(self.shell)
                and registry.active() is None and registry.stopped_view(magics.view)):
            install_placeholder(self.shell)


def _report_deaths(result) -> None:
    """Name the engines that died in the cell: a ``%%px`` cell that streams output reports
    them only as "N errors" (dead engines send no error message to stream)."""
    error = getattr(result, "error_in_exec", None)
    original = getattr(error, "original_error", error)  # a streamed cell's is wrapped
    deaths = [str(e[1]) for e in getattr(original, "elist", []) if e[0] == "EngineError"]
    if deaths:
        print("\n".join(deaths) + "\n" + GONE_ENGINES + ".", file=sys.stderr)


def life(shell) -> CellLife:
    """The CellLife of ``shell``, made (and its hooks registered) on first use."""
    if shell not in _lives:
        _lives[shell] = CellLife(shell)
    return _lives[shell]


def is_placeholder(shell) -> bool:
    return getattr(shell.find_cell_magic("px"), "__name__", "") == no_cluster_px.__name__


def install_placeholder(shell) -> None:
    """``%px``/``%%px`` that say how to start or attach a cluster (a cluster's
    ``view.activate()`` replaces them)."""
    shell.register_magic_function(no_cluster_px, magic_kind="line_cell", magic_name="px")
