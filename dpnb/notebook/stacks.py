"""``dpnb.where()``: the Python stack of every rank, now, even while a cell runs there.

The notebook asks each engine through ``Client.send_signal`` (ipyparallel's control
channel and the engine's nanny, which answer while the engine is busy); the engine
publishes the dump on IOPub, the controller's hub stores it in its task database,
and the notebook reads it from there with ``Client.db_query`` (see
``dpnb.cluster.engine.stack_dumps``).  Nothing has to be set up beforehand, so any
client, in any process, can ask, also while another notebook's cell runs."""
from __future__ import annotations

import dataclasses
import math
import re
import threading
import time

from ..cluster.engine import stack_dumps
from ..cluster.engine.stack_dumps import COLLECTIVE, PLUMBING, SIGNAL, USER
from ..errors import ClusterGone, DpnbError
from .table import ShownAsTable, Table

SHOWN_FRAMES = 3                 # innermost frames of the main thread in the table
_POLL = 0.02                     # seconds between looks at the hub's stored dumps
_HUB_GRACE = 0.2                 # beyond the timeout, for a hub call under way to return
_CELL_FILE = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")
_SILENT = ("An engine that received the signal but sent nothing is stopped, in one long C "
           "call that holds the GIL (its answer comes when the call returns), or was not "
           "started by dpnb.cluster.engine (which installs the handler).")


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame: where it is, the function, and its kind (user, collective, dpnb, library,
    plumbing)."""

    file: str
    line: int | None
    function: str
    kind: str

    @property
    def place(self) -> str:
        """``file:line`` with a notebook cell's file shown as ``cell``, others by base name."""
        name = "cell" if _CELL_FILE.search(self.file) else self.file.replace("\\", "/")
        return f"{name.rsplit('/', 1)[-1]}:{'?' if self.line is None else self.line}"

    def __str__(self) -> str:
        return f"{self.place} {self.function}"


@dataclasses.dataclass
class ThreadStack:
    """One thread of an engine: its name, whether it is the main thread, its frames
    (innermost first) and whether they were cut short (past ``MAX_FRAMES``)."""

    ident: int
    name: str
    main: bool
    frames: list[Frame]
    cut: bool = False


@dataclasses.dataclass
class RankStack:
    """What one rank answered (or why it did not): identity, state, every thread, and a
    note on what a silence may mean."""

    rank: int
    state: str
    answered: bool
    host: str | None = None
    pid: int | None = None
    threads: list[ThreadStack] = dataclasses.field(default_factory=list)
    note: str = ""

    @property
    def main(self) -> ThreadStack | None:
        """The main thread, where the rank's cells run."""
        return next((t for t in self.threads if t.main), None)

    @property
    def innermost(self) -> list[Frame]:
        """The main thread's innermost frames worth showing: the user's where there are
        any, else dpnb's and the libraries'; never the kernel's and messaging plumbing."""
        frames = self.main.frames if self.main else []
        shown = [f for f in frames if f.kind == USER] or [f for f in frames if f.kind != PLUMBING]
        return shown[:SHOWN_FRAMES]

    @property
    def collective(self) -> Frame | None:
        """The dpnb collective the main thread waits in (its outermost frame in the
        communicators, i.e. the call the user made), else None."""
        frames = [f for f in (self.main.frames if self.main else []) if f.kind == COLLECTIVE]
        return frames[-1] if frames else None

    @property
    def text(self) -> str:
        """Every thread's stack, innermost call first, as the engine took it."""
        who = f"rank {self.rank}" + (f" (host {self.host}, pid {self.pid})" if self.pid else "")
        if not self.answered:
            return f"{who}: {self.state}" + (f"\n{self.note}" if self.note else "")
        lines = [f"{who}, {self.state}; innermost call first"]
        for thread in sorted(self.threads, key=lambda t: not t.main):
            lines.append(f"\nThread {thread.name}{' (main)' if thread.main else ''} "
                         f"0x{thread.ident:x}:")
            lines += [f'  File "{f.file}", line {"?" if f.line is None else f.line} in '
                      f"{f.function}" for f in thread.frames] or ["  (no Python frame)"]
            if thread.cut:
                lines.append("  ... (more frames)")
        return "\n".join(lines)


class Stacks(ShownAsTable):
    """Rank -> ``RankStack``; a table of where each rank is, with the full stacks in
    ``stacks[rank]`` and the ranks that did not answer in ``missing``."""

    def __init__(self, ranks: dict[int, RankStack], elapsed: float):
        self.ranks = ranks
        self.elapsed = elapsed

    def __getitem__(self, rank: int) -> RankStack:
        return self.ranks[rank]

    @property
    def stacks(self) -> dict[int, str]:
        """Rank -> the text of every thread's stack."""
        return {rank: r.text for rank, r in self.ranks.items()}

    @property
    def missing(self) -> list[int]:
        """The ranks that sent no stack."""
        return [rank for rank, r in self.ranks.items() if not r.answered]

    def table(self) -> Table:
        rows = []
        for rank, r in self.ranks.items():
            collective = r.collective
            frames = " < ".join(str(f) for f in r.innermost) or (
                "(waiting for a request)" if r.state == "idle" else "(only the kernel's frames)")
            rows.append([rank, r.host or "?", r.pid or "?", r.state, frames if r.answered else "",
                         f"{collective.function} ({collective.place})" if collective else ""])
        answered = len(self.ranks) - len(self.missing)
        return Table(["rank", "host", "pid", "state", "main thread, innermost first",
                      "waits in"], rows,
                     title=f"{answered} of {len(self.ranks)} ranks answered in "
                           f"{self.elapsed:.2f} s; .stacks[rank] has every thread")


def where(view=None, timeout: float = 2.0) -> Stacks:
    """Every engine's current Python stack, within ``timeout`` seconds, busy or not.

    Engines that send nothing in time (stopped, dead, or a C call holding the GIL
    the whole time) are listed as not answering.

    Parameters
    ----------
    view : ipyparallel.DirectView, optional
        The engines to ask; default: the current cluster's view.
    timeout : float
        Seconds to wait for the answers (default 2).

    Returns
    -------
    Stacks
        A table of each rank's host, pid, state and innermost frames; ``.stacks[rank]``
        holds every thread's stack as text.
    """
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not 0 < timeout < math.inf):
        raise DpnbError(f"where() needs a finite timeout above 0 seconds, got {timeout!r}")
    start = time.monotonic()
    if view is None:
        from ..cluster.registry import current

        view = current().view
    client = view.client
    targets = _targets(view.targets, client.ids)
    asking = _Asking(client, [t for t in targets if t in set(client.ids)], start + timeout)
    # Every call to the hub blocks without a timeout, so a thread makes them and this
    # one waits for it no longer than the deadline (a dead controller never answers).
    worker = threading.Thread(target=asking.run, name="dpnb-where", daemon=True)
    worker.start()
    worker.join(max(0.0, start + timeout - time.monotonic()) + _HUB_GRACE)
    if asking.error is not None:
        raise DpnbError(f"where(): the controller's task database, which holds the engines' "
                        f"stacks, answered with an error (was it started with --nodb?): "
                        f"{asking.error}")
    registered = set(client.ids)
    ranks = {t: asking.rank(t, t in registered, timeout) for t in targets}
    return Stacks(ranks, time.monotonic() - start)


class _Asking:
    """One ask: the engines' queue lengths, the signals sent, the dumps that came."""

    def __init__(self, client, engines: list[int], deadline: float):
        self.client = client
        self.engines = engines
        self.deadline = deadline
        self.queues: dict[int, int] = {}
        self.signals: dict = {}
        self.dumps: dict[int, dict] = {}
        self.error: Exception | None = None

    def run(self) -> None:
        """Note who is busy, remember the stored dumps, signal, and read the new dumps
        until every engine has answered or left, or until the deadline."""
        from ipyparallel import error as ipp_error

        if not self.engines:
            return
        try:
            self._run()
        except ipp_error.RemoteError as e:  # the hub's database refused the query
            self.error = e

    def _run(self) -> None:
        from ipyparallel import error as ipp_error

        status = self.client.queue_status()         # all: an engine may have left since
        self.queues = {t: status[t]["queue"] + status[t]["tasks"] for t in self.engines
                       if t in status}
        before = {t: _version(d) for t, d in self._stored().items()}
        for t in self.engines:
            try:
                self.signals[t] = self.client.send_signal(SIGNAL, targets=t, block=False)
            except (IndexError, ipp_error.NoEnginesRegistered, ClusterGone) as e:  # left meanwhile
                self.signals[t] = e
        while True:
            for t, dump in self._stored().items():
                if _version(dump) != before.get(t):
                    self.dumps[t] = dump
            registered = set(self.client.ids)
            if all(t in self.dumps or t not in registered for t in self.engines):
                return
            if time.monotonic() >= self.deadline:
                return
            time.sleep(_POLL)

    def _stored(self) -> dict[int, dict]:
        """Engine id -> the latest dump the hub holds for it."""
        records = self.client.db_query(
            {"msg_id": {"$in": [stack_dumps.record_id(t) for t in self.engines]}},
            keys=["msg_id", "display_data"])
        dumps = {}
        for record in records:
            dump = (record.get("display_data") or {}).get("data", {}).get(stack_dumps.MIME)
            if dump is not None:
                dumps[dump["engine"]] = dump
        return dumps

    def rank(self, t: int, registered: bool, timeout: float) -> RankStack:
        """Engine ``t``'s answer, or why there is none."""
        dumps, queues = dict(self.dumps), dict(self.queues)
        state = "busy" if queues.get(t) else "idle" if t in queues else "?"
        if t in dumps:
            return _answer(t, state, dumps[t])
        if not registered:
            return RankStack(t, "gone: not registered with the controller", False)
        if t not in self.signals:
            return RankStack(t, f"{state}, not signalled: the controller did not answer in "
                                f"{timeout:g} s", False)
        why, delivered = _silence(self.signals[t], timeout)
        return RankStack(t, f"{state}, {why}", False, note=_SILENT if delivered else "")


def _version(dump: dict) -> tuple[int, int]:
    """What tells one dump of an engine from the next: its process and sequence number."""
    return dump["pid"], dump["sequence"]


def _targets(targets, ids: list[int]) -> list[int]:
    """A view's targets as a list of engine ids."""
    if targets is None or targets == "all":
        return sorted(ids)
    if isinstance(targets, int):
        return [targets]
    return list(targets)


def _answer(rank: int, state: str, dump: dict) -> RankStack:
    threads = [ThreadStack(t["ident"], t["name"], t["main"],
                           [Frame(*frame) for frame in t["frames"]], t["cut"])
               for t in dump["threads"]]
    return RankStack(rank, state, True, dump["host"], dump["pid"], threads)


def _silence(signal_future, timeout: float) -> tuple[str, bool]:
    """Why an engine sent nothing, and whether its nanny said the signal was delivered."""
    if isinstance(signal_future, Exception):
        return f"not signalled ({type(signal_future).__name__}: {signal_future})", False
    if not signal_future.done():
        return f"no answer in {timeout:g} s, nor from its nanny", False
    error = signal_future.exception()
    if error is not None:
        return f"not signalled ({type(error).__name__}: {error})", False
    failed = [r["content"] for r in signal_future.result() if r["content"].get("status") != "ok"]
    if failed:
        reason = f"{failed[0].get('ename', 'error')}: {failed[0].get('evalue', '')}"
        return f"not signalled ({reason})", False
    return f"signalled, no answer in {timeout:g} s", True
