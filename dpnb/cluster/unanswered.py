"""Tasks that will never be answered because their controller died: ipyparallel's
client hears nothing of its end and waits for their results and output forever, so a
``%%px`` cell already waiting would hang until interrupted (and then fail on the output
that never came).

``UnansweredTasks`` watches the tasks sent while they run; once ``why`` gives a reason
they cannot finish, it ends each rank's task with a ``ClusterGone`` error saying so, the way
ipyparallel ends the tasks of an engine that died (an error result per engine and no
output to wait for), and the cell fails within ``interval`` seconds."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import InvalidStateError


class UnansweredTasks:
    """A thread that runs while watched tasks are unfinished and ends them once ``why()``
    says why they cannot finish (it returns None while they can)."""

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
