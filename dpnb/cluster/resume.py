"""What ``cluster.restart(resume=True)`` does once the fresh engines run: replay the
journal's cells (``dpnb.cluster.journal``) and restore the last complete
``TrainingState`` commit on every rank, then say what ran and what was restored."""
from __future__ import annotations

from ..errors import DpnbError
from .engine import training_state


def resume_session(view, journal, dropped: list, magics, monitor, shell) -> None:
    """Replay ``journal`` on the fresh engines of ``view`` in ``shell`` (None outside
    IPython: nothing to replay) and restore the last commit; ``dropped`` are the entries
    that had not finished, ``magics`` the old view's ParallelMagics and ``monitor`` the
    cluster's progress display (or None)."""
    for entry in dropped:
        print(f"Dropped from the journal (it had not finished): {entry.first_line}")
    view.apply_sync(training_state.prepare_resume)
    if shell is not None:
        replay(shell, journal, magics, monitor)
    try:
        reports = view.apply_sync(training_state.finish_resume)
    except Exception as e:  # noqa: BLE001 - a CompositeError naming each rank's failure
        raise DpnbError(f"restoring the last TrainingState commit failed: {e}") from None
    print(report(reports))


def replay(shell, journal, magics, monitor) -> None:
    """The journal's cells, with the %pxconfig of ``magics`` (the old view's) and no
    progress display (a replayed cell's would land in whichever cell runs later)."""
    new = shell.magics_manager.registry.get("ParallelMagics")
    if magics is not None and new is not None:
        new.stream_output, new.verbose = magics.stream_output, magics.verbose
    shown = monitor is not None and monitor.display
    if monitor is not None:
        monitor.display = False
    try:
        journal.replay(shell)
    finally:
        if monitor is not None:
            monitor.after_cell()
            monitor.display = shown


def report(reports: list[dict]) -> str:
    """What ``finish_resume`` did on each rank (its reports, rank order), in one line."""
    def counters(report):
        return ", ".join(f"{k}={v!r}" for k, v in (report["counters"] or {}).items())

    first = reports[0]
    if any(r["restored"] != first["restored"] for r in reports):
        return "Restored different commits on the ranks: " + "; ".join(
            f"rank {i}: {r['restored']}" for i, r in enumerate(reports))
    if first["restored"] is not None:
        return (f"Restored TrainingState commit {first['restored']} on all {len(reports)} "
                f"ranks: {counters(first)}")
    if first.get("pending") is not None:
        return (f"TrainingState commit {first['pending']} ({counters(first)}) will be restored "
                "when a TrainingState is constructed (in the training cell)")
    return "No TrainingState commit to restore; the engines hold what the journal's cells made"
