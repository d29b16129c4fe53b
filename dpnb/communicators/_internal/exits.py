"""An exiting rank tells its peers, so that they do not wait for it until the timeout.

A rank whose program raises an uncaught exception, calls ``sys.exit`` or simply
ends never arrives at the collectives its peers go on to call: they would wait
out the timeout (600 s by default) and learn only that it last entered some
collective.  Once a communicator is set up (``watch``), this process records its
exit on the status board of every live communicator (``StatusBoard.mark_exited``):
from ``sys.excepthook``, the uncaught exception's type and first line, before
Python prints the traceback; else from an ``atexit`` handler, which Python runs
before mpi4py's MPI_Finalize, that the program ended.  The peers' waits read the boards
(wait.py) and raise ``PeerBroken`` naming the rank and its reason, unless it had
entered the collective they wait in (a rank that ends right after the last
collective is not missing from it).

Peers on this host read the record from shared memory, which outlives the
process.  Peers on other hosts read it by RMA, which with MPICH needs this rank
inside MPI: where one of them waits for this rank, the exit stays in MPI up to
``LINGER`` seconds so that it can be read.  Not covered: a process killed by a
signal or ended by ``os._exit`` runs no hook (under mpiexec the death of a rank
ends the job), and in an IPython engine an exception in a cell is no exit (the
kernel catches it and the engine goes on)."""
from __future__ import annotations

import atexit
import sys
import time
import weakref

LINGER = 1.0  # seconds an exit stays in MPI for peers on other hosts that wait for it
ENDED = "its program ended (the end of the script, or sys.exit) with no uncaught exception"

_boards: weakref.WeakSet = weakref.WeakSet()
_previous_hook = None  # the sys.excepthook ours calls after recording


def watch(board) -> None:
    """Record this process's exit on ``board`` (a ``StatusBoard``) when it comes; installs
    the hooks the first time."""
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
        atexit.register(_at_exit)
    _boards.add(board)


def forget(board) -> None:
    """Stop recording exits on ``board`` (its memory is being freed)."""
    _boards.discard(board)


def describe(error: BaseException) -> str:
    """An exception as ``Type: first line of its message`` (the type alone without one)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _excepthook(kind, error, traceback) -> None:
    _record(describe(error) if error is not None else kind.__name__)
    _previous_hook(kind, error, traceback)


def _at_exit() -> None:
    _record(ENDED)
    deadline = time.monotonic() + LINGER
    while any(board.waited_for_remotely() for board in list(_boards)):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)


def _record(reason: str) -> None:
    """Mark every live board exited (where MPI still runs: after MPI_Finalize the boards'
    memory is gone)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or mpi.Is_finalized():
        return
    for board in list(_boards):
        board.mark_exited(reason)
