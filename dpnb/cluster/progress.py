"""The notebook's side of the engines' progress reports (sent by ``engine_side.report``,
which users call as ``dpnb.notebook.report``): a ``ProgressMonitor``, started by
``dpnb.start``, turns them into one progress bar for the cell and a loss curve
with one line per rank."""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from .engine_side import KEY
from .words import word


@dataclasses.dataclass
class Run:
    """What the notebook saw of one cell's progress: per-rank steps and losses."""

    total: int | None = None
    steps: dict = dataclasses.field(default_factory=dict)
    losses: dict = dataclasses.field(default_factory=dict)

    @property
    def step(self) -> int:
        """The step every rank has reached."""
        return min(self.steps.values()) if self.steps else 0


class ProgressMonitor:
    """Watches the client's running tasks for progress reports and displays them.

    One thread polls ``client.metadata`` of outstanding tasks; output from it
    lands in the cell that is running.  ``runs`` keeps every finished run."""

    def __init__(self, client, interval: float = 0.2, curve_interval: float = 1.0,
                 grace: float = 1.0, display: bool = True):
        self.client = client
        self.interval = interval
        self.grace = grace
        self._finished_at: float | None = None
        self.curve_interval = curve_interval
        self.display = display
        self.runs: list[Run] = []
        self._tasks: set[str] = set()
        self._watched: dict = {}
        self._run: Run | None = None
        self._bar = None
        self._curve = None
        self._curve_time = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="dpnb-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # a display failure must not kill the monitor
                logging.getLogger(__name__).debug("progress update failed", exc_info=True)

    def after_cell(self, result=None) -> None:
        """IPython's post_run_cell hook: take in the reports that came with the cell's
        results (flushing the client's IOPub) and finish the run they belong to, so that
        its bar and curve land in the cell that ran it, not in the next one: the
        monitor's thread may not have looked since they arrived."""
        deadline = time.monotonic() + self.grace
        while True:
            self.client.spin()
            self.poll()
            if (self._run is None or self._tasks & set(self.client.outstanding)
                    or time.monotonic() >= deadline):
                return                     # nothing reported, still running, or given up
            time.sleep(0.02)

    def poll(self) -> None:
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        """Take in new reports; finish the run when its tasks are done.

        The metadata of each running task is held from its start: an AsyncResult
        drops it from ``client.metadata`` when it completes, and a report that
        arrives after the result lands in a fresh entry there, so both are read."""
        outstanding = set(self.client.outstanding)
        for msg_id in outstanding - self._watched.keys():
            metadata = self.client.metadata.get(msg_id)
            if metadata is not None:
                self._watched[msg_id] = metadata
        for msg_id, metadata in list(self._watched.items()):
            reports = [m["data"].get(KEY) for m in (metadata, self.client.metadata.get(msg_id))
                       if m is not None]
            reports = [r for r in reports if r is not None]
            if not reports:
                if msg_id not in outstanding:
                    del self._watched[msg_id]
                continue
            progress = max(reports, key=lambda r: r["step"])
            if self._run is None:
                self._run = Run()
            self._tasks.add(msg_id)
            self._run.total = progress["total"] or self._run.total
            self._run.steps[progress["rank"]] = progress["step"]
            self._run.losses[progress["rank"]] = progress["losses"]
        if self._run is None:
            return
        # Reports travel on IOPub and may arrive just after the task's result: a finished
        # run waits for every rank's last step, or for ``grace`` seconds.
        done = False
        if not self._tasks & outstanding:
            self._finished_at = self._finished_at or time.monotonic()
            complete = self._run.total is not None and self._run.step >= self._run.total
            done = complete or time.monotonic() - self._finished_at >= self.grace
        if self.display:
            self._show(final=done)
        if done:
            self.runs.append(self._run)
            for msg_id in self._tasks:
                self._watched.pop(msg_id, None)
            self._run, self._tasks, self._finished_at = None, set(), None
            self._bar = self._curve = None

    def _show(self, final: bool) -> None:
        run = self._run
        if self._bar is None:
            self._bar = _progress_bar(run.total)
        self._bar.update(run.step - self._bar.n)
        if final:
            self._bar.close()
        now = time.monotonic()
        has_losses = any(run.losses.values())
        if has_losses and _in_kernel() and (final or now - self._curve_time >= self.curve_interval):
            self._curve_time = now
            from IPython.display import Image, display

            from .plot import plot_losses
            image = Image(_png(plot_losses(run.losses)))
            if self._curve is None:
                self._curve = display(image, display_id=True)
            else:
                self._curve.update(image)


def _progress_bar(total: int | None):
    """tqdm's notebook bar where ipywidgets is installed, its text bar elsewhere."""
    import importlib.util

    if _in_kernel() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm import tqdm
    return tqdm(total=total, unit="step", desc=word("engines"))


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _png(fig) -> bytes:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()
