"""The cluster's view as ``%%px`` uses it, guarded: a cell is refused at once where the
controller or the engines are gone, instead of waiting for answers that never come;
an interrupt waits a bounded time for the engines, and the ranks' errors of an
interrupted cell are shown after it.  Tasks that will never be answered because their
controller died (ipyparallel's client hears nothing of its end and would wait for their
results and output forever) are ended with a ``ClusterGone`` error, the way ipyparallel
ends the tasks of an engine that died, so a cell already waiting fails instead of hanging.

ipyparallel has no hook around a view's ``execute`` or a client's ``send_signal`` (what
``%%px`` and its interrupt call), so dpnb subclasses both: a ``GuardedClient`` makes
``GuardedView``s, and both hand those calls to one ``Guard``.  The view's ``activate``
registers ``%px`` magics with dpnb's defaults.  ``dpnb.cluster.internals`` lists what
of ipyparallel this relies on beyond its documented API."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import InvalidStateError

from IPython.core.magic import magics_class
from ipyparallel import Client, DirectView
from ipyparallel.client import magics

from ..errors import ClusterGone, DpnbError

SIGNAL_WAIT = 5.0    # seconds an interrupt waits for the engines to confirm the signal
INTERRUPTED_WAIT = 5.0  # seconds after an interrupted %%px cell to collect the ranks' errors
NO_TASK_BAR = 10**7  # seconds
GONE_ENGINES = ("Engine ids are MPI ranks; under MPI the death of one rank ends them all.  "
                "`cluster.restart(resume=True)` (or `%dpnb restart --resume`) starts fresh "
                "engines, replays the journal of %%px cells and restores the last "
                "TrainingState commit; `cluster.restart()` starts them empty")


class Guard:
    """What stands between ``%%px`` and a cluster that may be gone: ``why_gone()`` says
    why the cluster cannot run a cell (None where it can), ``gone_default`` what to say
    when ipyparallel finds no engines first, and each of ``watchers`` is given every
    result that ``execute`` returns (to watch for progress and for tasks never answered)."""

    def __init__(self, why_gone: Callable[[], str | None], gone_default: str,
                 watchers: Sequence[Callable[[object], None]]):
        self._why_gone = why_gone
        self._gone_default = gone_default
        self._watchers = tuple(watchers)
        self._last_result = None   # what the view's execute (``%%px``) sent last
        self.interrupted = None    # that result, where a signal was sent while it ran

    def require_alive(self) -> None:
        """Raise ClusterGone saying what is gone and what to do, where it is."""
        why = self._why_gone()
        if why is not None:
            raise ClusterGone(why) from None

    def execute(self, execute: Callable, *args, **kwargs):
        """``execute(*args, **kwargs)`` (the view's own), once the cluster is known to be
        able to run it."""
        from ipyparallel.error import NoEnginesRegistered

        self.require_alive()
        try:
            result = execute(*args, **kwargs)
        except NoEnginesRegistered:
            raise ClusterGone(self._why_gone() or self._gone_default) from None
        self._last_result = result
        for watch in self._watchers:
            watch(result)
        return result

    def send_signal(self, send: Callable, sig, targets, block: bool):
        """``send(sig, targets=targets, block=False)`` (the client's own ``send_signal``,
        ``%%px``'s interrupt): refused where the cluster is gone, else, with ``block``,
        waiting at most ``SIGNAL_WAIT`` seconds for the engines' answers."""
        self.require_alive()
        last = self._last_result
        if last is not None and not last.done():
            self.interrupted = last
        sent = send(sig, targets=targets, block=False)
        if not block:
            return sent
        try:
            replies = sent.result(timeout=SIGNAL_WAIT)
        except TimeoutError:
            raise DpnbError(f"the engines did not confirm signal {sig} within "
                            f"{SIGNAL_WAIT:g} s; {self._why_gone() or self._gone_default}"
                            ) from None
        failed = [r["content"] for r in replies if r["content"]["status"] != "ok"]
        if failed:
            raise DpnbError(f"sending signal {sig} to the engines failed: "
                            + "; ".join(f"{c.get('ename')}: {c.get('evalue')}" for c in failed))
        return None

    def show_interrupted(self) -> None:
        """After a ``%%px`` cell interrupted while it ran: every rank's error.  ipyparallel's
        interrupt sends SIGINT to the engines and returns without their answers."""
        from ipyparallel.error import CompositeError

        result, self.interrupted = self.interrupted, None
        if result is None:
            return
        if not result.wait(INTERRUPTED_WAIT):
            print(f"Some ranks still run {INTERRUPTED_WAIT:g} s after the interrupt (a "
                  "blocking call that ignores SIGINT?); interrupt again, or "
                  "`cluster.restart()` ends them.", file=sys.stderr)
            return
        try:
            result.get(0)
        except CompositeError as e:
            lines = [f"[rank {info.get('engine_id', '?')}] {name}: {value}"
                     for name, value, _, info in e.elist]
            print("Interrupted:\n" + "\n".join(lines), file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - one engine's error, shown as it is
            print(f"Interrupted: {type(e).__name__}: {e}", file=sys.stderr)


@magics_class
class ParallelMagics(magics.ParallelMagics):
    """ipyparallel's ``%px`` magics (under their name, which IPython registers them by)
    with dpnb's defaults: no task bar (ipyparallel shows one with timings in cells
    running over 2 s, which makes stored notebook outputs differ from run to run; a delay
    longer than any cell keeps its wait for the result and then for all output), and
    the ranks' output in rank order once the cell is done (``%pxconfig --stream``
    streams it in arrival order)."""

    progress_after_seconds = NO_TASK_BAR
    stream_output = False


class GuardedView(DirectView):
    """ipyparallel's DirectView whose ``execute`` goes through ``guard``."""

    def __init__(self, *, guard: Guard, **kwargs):
        super().__init__(**kwargs)
        self.guard = guard

    def execute(self, *args, **kwargs):
        return self.guard.execute(super().execute, *args, **kwargs)

    def activate(self, suffix: str = "") -> None:
        """``%px``, ``%%px``, ``%pxconfig``, ``%pxresult`` and ``%autopx`` on this view in
        this IPython shell, with dpnb's defaults (``ParallelMagics``)."""
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            raise DpnbError("the %px magics need IPython; this process runs none")
        shell.magics_manager.register(ParallelMagics(shell, self, suffix))


class GuardedClient(Client):
    """ipyparallel's Client that makes GuardedViews (``guarded_view``) and sends signals
    through their guard."""

    guard: Guard | None = None

    def guarded_view(self, targets: list[int], guard: Guard) -> GuardedView:
        """A blocking DirectView on ``targets`` whose calls, and this client's signals,
        go through ``guard``."""
        self.guard = guard
        # the socket ipyparallel's own direct_view gives its DirectViews
        view = GuardedView(guard=guard, client=self, socket=self._mux_stream, targets=targets)
        view.block = True
        return view

    def send_signal(self, sig, targets=None, block=None):
        block = self.block if block is None else block
        if self.guard is None:
            return super().send_signal(sig, targets=targets, block=block)
        return self.guard.send_signal(super().send_signal, sig, targets, block)


class UnansweredTasks:
    """A thread that runs while watched tasks are unfinished and ends them once ``why()``
    says why they cannot finish (it returns None while they can): each rank's task gets
    a ``ClusterGone`` error saying so and no output to wait for, and the cell fails
    within ``interval`` seconds."""

    def __init__(self, why: Callable[[], str | None], interval: float = 0.3):
        self.why, self.interval = why, interval
        self._results: list = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, result) -> None:
        """Watch ``result``, an ipyparallel AsyncResult just sent."""
        with self._lock:
            self._results.append(result)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dpnb-unanswered",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._results = [r for r in self._results if not r.done()]
                if not self._results:
                    self._thread = None
                    return
                pending = list(self._results)
            why = self.why()
            if why is not None:
                for result in pending:
                    end(result, why)
            time.sleep(self.interval)


def end(result, why: str) -> None:
    """End each rank's unfinished task of ``result`` with a ClusterGone error saying ``why``: its
    result an error (as ipyparallel's for an engine that died), no output to wait for.

    ipyparallel has no call for this; its per-task futures (``_children``) are what its
    client itself resolves when replies come."""
    from ipyparallel.error import RemoteError

    metadata = result.metadata
    for md, task in zip([metadata] if isinstance(metadata, dict) else metadata, result._children):
        error = RemoteError("ClusterGone", why, f"ClusterGone: {why}",
                            {"engine_id": md.get("engine_id"), "method": "execute"})
        for future, value in ((task, error), (task.output, None)):
            try:
                future.set_result(value)
            except InvalidStateError:   # its reply came after all
                pass
