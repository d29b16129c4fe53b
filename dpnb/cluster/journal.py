"""The journal of a cluster's session: the ``%%px`` cells that ran successfully, in
order, which ``cluster.restart(resume=True)`` runs again on fresh engines.

A cell is recorded after it ran without error (a ``--noblock`` cell once its result
has come back; one still running when the engines restart did not finish and is
dropped).  A cell whose run committed a ``TrainingState`` is a training cell: a
resume skips it, and running it again continues from the restored commit.
``%%px --targets`` cells are replayed on the same targets, which after a restart
are the same ranks.  Cells of other kinds (``%px`` lines, plain Python calling
the view) are not recorded.  A replay holds each cell's output back (it shows that
of a cell that fails) and repeats whatever the cells do besides defining names, such
as writing files.  ``cluster.journal`` is a list of ``Entry``: remove an entry
(``del cluster.journal[3]``), change its ``source``, or mark it a training cell
(``training = True``) to change what a resume runs."""
from __future__ import annotations

import dataclasses
from collections.abc import MutableSequence

from ..errors import DpnbError
from ..notebook.table import Table
from .engine.training_state import COMMIT_KEY

OUTPUT_WAIT = 5.0  # seconds to wait for a finished cell's last messages (its commit reports)


@dataclasses.dataclass
class Entry:
    """One recorded ``%%px`` cell: its source, the prompt number it ran as, whether its
    run committed training state (then a resume does not run it), and the AsyncResult
    of a ``--noblock`` cell still running."""

    source: str
    execution_count: int | None = None
    training: bool = False
    result: object = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def first_line(self) -> str:
        """The first line of code after the ``%%px`` line (comments skipped), for tables
        and messages."""
        lines = [line.strip() for line in self.source.splitlines()[1:]
                 if line.strip() and not line.strip().startswith("#")]
        return lines[0] if lines else ""


def _committed(result) -> bool:
    """Whether a finished %%px result reported a TrainingState commit from any engine."""
    result.wait_for_output(OUTPUT_WAIT)
    return any(COMMIT_KEY in data for data in result.data)


class Journal(MutableSequence):
    """The recorded ``%%px`` cells (``Entry``), a list the user may edit, shown as a table."""

    def __init__(self):
        self._entries: list[Entry] = []
        self.replaying = False

    # -- the list ----------------------------------------------------------------------

    def _settled(self) -> list[Entry]:
        """The entries, after taking in the outcome of ``--noblock`` cells that finished."""
        for entry in list(self._entries):
            if entry.result is not None and entry.result.done():
                result, entry.result = entry.result, None
                if not result.successful():
                    self._entries.remove(entry)
                else:
                    entry.training = entry.training or _committed(result)
        return self._entries

    def __getitem__(self, index):
        return self._settled()[index]

    def __setitem__(self, index, entry) -> None:
        self._settled()[index] = _entry(entry)

    def __delitem__(self, index) -> None:
        del self._settled()[index]

    def __len__(self) -> int:
        return len(self._settled())

    def insert(self, index: int, entry) -> None:
        """Insert an Entry, or a cell's source (``"%%px\\n..."``) as one."""
        self._settled().insert(index, _entry(entry))

    def drop_unfinished(self) -> list[Entry]:
        """Remove the entries whose cell has not finished (its engines are going); them."""
        unfinished = [e for e in self._settled() if e.result is not None]
        for entry in unfinished:
            self._entries.remove(entry)
        return unfinished

    @property
    def replayed(self) -> list[Entry]:
        """The entries a resume runs again: all but the training cells."""
        return [e for e in self._settled() if not e.training]

    def table(self) -> Table:
        rows = [[i, "training (not replayed)" if e.training else
                 "running" if e.result is not None else "replayed", e.first_line]
                for i, e in enumerate(self._settled())]
        return Table(["#", "on resume", "cell"], rows,
                     title=f"journal: {len(rows)} %%px cells")

    def __repr__(self) -> str:
        return repr(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    # -- recording ---------------------------------------------------------------------

    def record(self, result, px) -> None:
        """Record the cell IPython ran (its ExecutionResult ``result``) if it was a ``%%px``
        cell that succeeded; ``px`` is the AsyncResult it sent (None if it sent none)."""
        source = result.info.raw_cell if result.info is not None else ""
        if self.replaying or not source.lstrip().startswith("%%px") or not result.success:
            return
        entry = Entry(source.lstrip(), result.execution_count)
        if px is not None and px.done():
            entry.training = px.successful() and _committed(px)
        else:
            entry.result = px
        self._entries.append(entry)

    # -- replaying ---------------------------------------------------------------------

    def replay(self, shell, out=print) -> list[Entry]:
        """Run the entries that are not training cells in ``shell``, in order, each cell's
        output held back; at the first that fails show its output and raise."""
        from IPython.utils.capture import capture_output

        entries = self.replayed
        wrong = [i for i, e in enumerate(self._entries) if not e.source.lstrip().startswith("%%px")]
        if wrong:
            raise DpnbError(f"journal entries {wrong} are not %%px cells (their source must start "
                            "with %%px); correct or remove them, then resume again")
        out(f"Replaying {len(entries)} of {len(self)} journal cells on the fresh engines:")
        self.replaying = True
        try:
            for entry in entries:
                index = self._entries.index(entry)
                out(f"  [{index}] {entry.first_line}")
                with capture_output() as captured:
                    result = shell.run_cell(entry.source, store_history=False)
                if not result.success:
                    captured.show()
                    error = result.error_in_exec or result.error_before_exec
                    text = str(error).strip().splitlines()
                    raise DpnbError(
                        f"resume stopped at journal entry [{index}] ({entry.first_line!r}): "
                        f"{type(error).__name__}: {text[0] if text else ''}; the engines ran "
                        f"the entries before it; correct it (cluster.journal[{index}].source = "
                        f"...) or remove it (del cluster.journal[{index}]), then call "
                        "cluster.restart(resume=True) again")
        finally:
            self.replaying = False
        skipped = [e for e in self._entries if e.training]
        for entry in skipped:
            out(f"  not replayed (training cell, run it again): [{self._entries.index(entry)}] "
                f"{entry.first_line}")
        return entries


def _entry(value) -> Entry:
    if isinstance(value, Entry):
        return value
    if isinstance(value, str) and value.lstrip().startswith("%%px"):
        return Entry(value.lstrip())
    raise DpnbError(f"a journal entry is an Entry or the source of a %%px cell "
                    f"(\"%%px\\n...\"), got {value!r}")
