"""The notebook's side of the engines' progress reports (sent by
``dpnb.cluster.engine.calls.report``, which users call as ``dpnb.notebook.report``): a
``ProgressMonitor``, started by ``dpnb.start``, turns the reports of each ``%%px`` cell
into one progress bar and a loss curve with one line per rank, in that cell."""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from ..cluster.engine.calls import KEY
from .labels import label


@dataclasses.dataclass
class Run:
    """What the notebook saw of one cell's progress: per-rank steps and losses, the step
    of the cell's first report, and the seconds the slowest rank has spent since."""

    total: int | None = None
    steps: dict = dataclasses.field(default_factory=dict)
    losses: dict = dataclasses.field(default_factory=dict)
    first: int | None = None
    elapsed: float = 0.0

    @property
    def step(self) -> int:
        """The step every rank has reached."""
        return min(self.steps.values()) if self.steps else 0

    def take(self, report: dict) -> None:
        """Take in one rank's latest report."""
        self.total = report["total"] or self.total
        self.steps[report["rank"]] = report["step"]
        self.losses[report["rank"]] = report["losses"]
        self.first = report["first"] if self.first is None else min(self.first, report["first"])
        self.elapsed = max(self.elapsed, report["elapsed"])


@dataclasses.dataclass
class _Watch:
    """One watched task (an ipyparallel AsyncResult), its run and its display."""

    result: object
    run: Run = dataclasses.field(default_factory=Run)
    bar: object = None
    curve: object = None
    curve_time: float = 0.0
    done_at: float | None = None


class ProgressMonitor:
    """Shows the progress reports of the tasks it watches (``watch``, which the cluster
    calls for each ``%%px`` cell) while they run, and finishes each run once its task is
    done and every engine's output has arrived, so that no rank's last report is missed.

    One thread polls every ``interval`` seconds, so a long cell's bar moves while it
    runs; output from that thread lands in the cell that is running.  ``after_cell``
    finishes the runs of the cell that just ended in that cell.  ``runs`` keeps every
    finished run that had reports."""

    def __init__(self, interval: float = 0.2, curve_interval: float = 1.0,
                 output_wait: float = 5.0, display: bool = True):
        self.interval = interval
        self.curve_interval = curve_interval
        self.output_wait = output_wait
        self.display = display
        self.runs: list[Run] = []
        self._watches: list[_Watch] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="dpnb-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def watch(self, result) -> None:
        """Follow the reports of ``result``, an ipyparallel AsyncResult still running."""
        with self._lock:
            self._watches.append(_Watch(result))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # a display failure must not kill the monitor
                logging.getLogger(__name__).debug("progress update failed", exc_info=True)

    def after_cell(self) -> None:
        """IPython's post_run_cell hook: wait (up to ``output_wait`` seconds) until every
        finished task's output has arrived (reports travel on IOPub, after the results),
        then finish their runs, so that bar and curve land in this cell, with every rank."""
        deadline = time.monotonic() + self.output_wait
        for watch in list(self._watches):
            if watch.result.done():
                watch.result.wait_for_output(max(0.0, deadline - time.monotonic()))
        self.poll()

    def poll(self) -> None:
        """Take in new reports, show them, and finish the runs whose output is complete."""
        with self._lock:
            for watch in list(self._watches):
                self._poll(watch)

    def _poll(self, watch: _Watch) -> None:
        data = watch.result["data"]   # one dict per engine, filled as IOPub delivers
        for engine_data in [data] if isinstance(data, dict) else data:
            if KEY in engine_data:
                watch.run.take(engine_data[KEY])
        done = self._finished(watch)
        if watch.run.steps:
            if self.display:
                self._show(watch, final=done)
            if done:
                self.runs.append(watch.run)
        if done:
            self._watches.remove(watch)

    def _finished(self, watch: _Watch) -> bool:
        """Whether ``watch``'s task is done and its output complete, or done for
        ``output_wait`` seconds (an engine that died sends no more output)."""
        if not watch.result.done():
            return False
        now = time.monotonic()
        watch.done_at = watch.done_at or now
        return watch.result.wait_for_output(0) or now - watch.done_at >= self.output_wait

    def _show(self, watch: _Watch, final: bool) -> None:
        run = watch.run
        if watch.bar is None:
            watch.bar = _progress_bar(run.total, run.first, run.elapsed)
        watch.bar.update(run.step - watch.bar.n)
        if final:
            watch.bar.close()
        now = time.monotonic()
        has_losses = any(run.losses.values())
        if has_losses and _in_kernel() and (final or now - watch.curve_time >= self.curve_interval):
            watch.curve_time = now
            from IPython.display import Image, display

            from .plot import plot_losses
            image = Image(_png(plot_losses(run.losses)))
            if watch.curve is None:
                watch.curve = display(image, display_id=True)
            else:
                watch.curve.update(image)


def _progress_bar(total: int | None, first: int, elapsed: float):
    """tqdm's notebook bar where ipywidgets is installed, its text bar elsewhere, begun at
    step ``first`` ``elapsed`` seconds ago (the engines' first report in the cell), with
    the average rate since: the bar may be made only after the loop ended."""
    import importlib.util

    if _in_kernel() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm import tqdm
    bar = tqdm(total=total, initial=first, unit="step", desc=label("engines"), smoothing=0)
    bar.start_t -= elapsed
    return bar


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
