"""``dpnb.where()``: the Python stack of every rank, now, even while a cell runs there.

The notebook asks each engine through ``Client.send_signal`` (ipyparallel's control
channel and the engine's nanny, which answer while the engine is busy); the dump
comes back over ipyparallel's data channel (see ``dpnb.cluster.stack_dumps``).  Idle
engines are first told, with an ordinary apply, which parent header to publish
under, so that their dumps land in one ``client.metadata`` entry of this notebook's
own; a busy engine publishes under the request it runs as well, so its dump reaches
the notebook whose cell it is running even before that notebook ever registered."""
from __future__ import annotations

import dataclasses
import re
import threading
import time

from ..cluster import stack_dumps
from ..cluster.stack_dumps import COLLECTIVE, KEY, PLUMBING, SIGNAL, USER
from ..cluster.table import ShownAsTable, Table
from ..errors import DpnbError

SHOWN_FRAMES = 3                 # innermost frames of the main thread in the table
_POLL = 0.01                     # seconds between looks at the client's metadata
_REGISTRATION_SHARE = 0.25       # of the time, at most, spent registering idle engines
_CELL_FILE = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame: where it is, the function, and its kind (user, collective, dpnb, plumbing)."""

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
    (innermost first) and whether faulthandler cut them short."""

    ident: int
    name: str
    main: bool
    frames: list[Frame]
    cut: bool = False


@dataclasses.dataclass
class RankStack:
    """What one rank answered (or why it did not): identity, state and every thread."""

    rank: int
    state: str
    answered: bool
    host: str | None = None
    pid: int | None = None
    threads: list[ThreadStack] = dataclasses.field(default_factory=list)

    @property
    def main(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), None)

    @property
    def innermost(self) -> list[Frame]:
        """The main thread's innermost frames worth showing: the user's where there are
        any, else dpnb's; never the kernel's and messaging plumbing."""
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
        """Every thread's stack, innermost call first, as faulthandler took it."""
        who = f"rank {self.rank}" + (f" (host {self.host}, pid {self.pid})" if self.pid else "")
        if not self.answered:
            return f"{who}: {self.state}"
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

    def __init__(self, ranks: dict[int, RankStack], elapsed: float, timeout: float):
        self.ranks = ranks
        self.elapsed = elapsed
        self.timeout = timeout

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
        return Table(["rank", "host", "pid", "state", "innermost frames (main thread)",
                      "waits in"], rows,
                     title=f"{answered} of {len(self.ranks)} ranks answered in "
                           f"{self.elapsed:.2f} s; .stacks[rank] has every thread")


def where(view=None, timeout: float = 2.0) -> Stacks:
    """Every engine's current Python stack, within ``timeout`` seconds, busy or not.

    ``view`` defaults to the current cluster's.  Engines that send nothing in time
    (stopped, dead, or a C call holding the GIL the whole time) are listed as not
    answering."""
    if not timeout > 0:
        raise DpnbError(f"where() needs a timeout above 0 seconds, got {timeout!r}")
    start = time.monotonic()
    deadline = start + timeout
    if view is None:
        from ..cluster.launcher import current

        view = current().view
    client = view.client
    targets = _targets(view.targets, client.ids)
    registered = set(client.ids)
    alive = [t for t in targets if t in registered]
    queues = _queue_lengths(client, alive, start + timeout * _REGISTRATION_SHARE)
    header = _header(client)
    idle = [t for t in alive if queues.get(t) == 0]
    replies = _register(client, idle, header, start + timeout * _REGISTRATION_SHARE)
    asked = [t for t in alive if replies.get(t, {}).get("installed", True)]
    signals = _signal(client, asked)
    dumps = _collect(client, header, signals, deadline)
    registered &= set(client.ids)
    ranks = {t: _rank(t, queues, dumps, registered, signals, replies, timeout) for t in targets}
    return Stacks(ranks, time.monotonic() - start, timeout)


def _signal(client, engines: list[int]) -> dict:
    """Send the dump signal to each engine: engine id -> the control reply's future, or
    the error where the engine could not be addressed (unregistered meanwhile)."""
    from ipyparallel import error as ipp_error

    signals = {}
    for t in engines:
        try:
            signals[t] = client.send_signal(SIGNAL, targets=t, block=False)
        except (IndexError, ipp_error.NoEnginesRegistered) as e:  # the reason it did not answer
            signals[t] = e
    return signals


def _collect(client, header: dict, signals: dict, deadline: float) -> dict[int, dict]:
    """Engine id -> the dump each signalled engine sent after the signal, waiting until
    all have answered or left, or until ``deadline``.

    A busy engine that has no listener publishes under the request it runs; that
    request may end meanwhile, and ipyparallel then drops its entry from
    ``client.metadata``, so the requests running at the start are watched to the end."""
    watched = {header["msg_id"], *client.outstanding}
    before = {key: d["sequence"] for key, d in _dumps(client, watched).items()}
    dumps: dict[int, dict] = {}
    while True:
        watched |= client.outstanding
        for (engine, pid), dump in _dumps(client, watched).items():
            if engine in signals and dump["sequence"] > before.get((engine, pid), 0):
                dumps[engine] = dump
        registered = set(client.ids)
        if all(t in dumps or t not in registered for t in signals):
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL)
    _forget_ended(client, watched - {header["msg_id"]})
    return dumps


def _rank(t: int, queues: dict, dumps: dict, registered: set, signals: dict, replies: dict,
          timeout: float) -> RankStack:
    """Engine ``t``'s answer, or why there is none."""
    state = "busy" if queues.get(t) else "idle" if t in queues else "?"
    if t in dumps:
        return _answer(t, state, dumps[t])
    if t not in registered:
        return RankStack(t, "gone: not registered with the controller", False)
    known = replies.get(t, {})
    if t not in signals:
        return RankStack(t, "no stack handler (not started by dpnb.cluster.engine)", False,
                         known.get("host"), known.get("pid"))
    return RankStack(t, f"{state}, {_silence(signals[t], timeout)}", False, known.get("host"),
                     known.get("pid"))


def _targets(targets, ids: list[int]) -> list[int]:
    """A view's targets as a list of engine ids."""
    if targets is None or targets == "all":
        return sorted(ids)
    if isinstance(targets, int):
        return [targets]
    return list(targets)


def _queue_lengths(client, targets: list[int], deadline: float) -> dict[int, int]:
    """Engine id -> requests queued or running there, from the controller; {} where it
    does not answer by ``deadline`` (its answer cannot be waited for with a timeout)."""
    if not targets:
        return {}
    answer: dict = {}

    def ask() -> None:
        status = client.queue_status(targets=targets)
        answer.update({t: status[t]["queue"] + status[t]["tasks"] for t in targets})

    asking = threading.Thread(target=ask, name="dpnb-where-queues", daemon=True)
    asking.start()
    asking.join(max(0.0, deadline - time.monotonic()))
    return dict(answer)


def _header(client) -> dict:
    """The parent header this notebook's dumps travel under: one ``client.metadata``
    entry that ipyparallel never clears, since no request of its own has that id."""
    session = client.session
    return {"msg_id": f"{KEY}-{session.session}", "session": session.session,
            "username": session.username, "msg_type": "dpnb_stacks", "version": "5.3"}


def _register(client, engines: list[int], header: dict, deadline: float) -> dict[int, dict]:
    """Tell idle engines where to send dumps; engine id -> their ``listen`` answer, for
    those that answered by ``deadline``."""
    from ipyparallel import error as ipp_error

    pending = {}
    for t in engines:
        try:
            pending[t] = client[t].apply_async(stack_dumps.listen, header)
        except (IndexError, ipp_error.NoEnginesRegistered):  # unregistered meanwhile
            continue
    replies = {}
    for t, result in pending.items():
        result.wait(max(0.0, deadline - time.monotonic()))
        if result.ready() and result.successful():
            replies[t] = result.get()
    return replies


def _dumps(client, msg_ids: set[str]) -> dict[tuple[int, int], dict]:
    """(engine id, pid) -> the newest dump in the ``client.metadata`` entries of
    ``msg_ids``: this notebook's own and those of requests engines were running."""
    found: dict = {}
    for msg_id in list(msg_ids):
        metadata = client.metadata.get(msg_id)
        if metadata is None:
            continue
        for key, dump in list(metadata["data"].items()):
            if not (key.startswith(KEY + ":") and isinstance(dump, dict)):
                continue
            which = (dump["engine"], dump["pid"])
            if which not in found or dump["sequence"] > found[which]["sequence"]:
                found[which] = dump
    return found


def _forget_ended(client, msg_ids: set[str]) -> None:
    """Drop the entries that dumps alone made again for requests that had ended (no
    submission time), so that asking does not grow ``client.metadata``."""
    for msg_id in msg_ids - client.outstanding:
        metadata = client.metadata.get(msg_id)
        if metadata is not None and metadata["submitted"] is None:
            client.metadata.pop(msg_id, None)


def _answer(rank: int, state: str, dump: dict) -> RankStack:
    threads = [ThreadStack(t["ident"], t["name"], t["main"],
                           [Frame(*frame) for frame in t["frames"]], t["cut"])
               for t in dump["threads"]]
    return RankStack(rank, state, True, dump["host"], dump["pid"], threads)


def _silence(signal_future, timeout: float) -> str:
    """Why an engine sent nothing: the signal failed, or it was sent and nothing came."""
    if isinstance(signal_future, Exception):
        return f"not signalled ({type(signal_future).__name__}: {signal_future})"
    if signal_future.done():
        error = signal_future.exception()
        if error is not None:
            return f"not signalled ({type(error).__name__}: {error})"
        replies = signal_future.result()
        failed = [r["content"] for r in replies if r["content"].get("status") != "ok"]
        if failed:
            return (f"not signalled ({failed[0].get('ename', 'error')}: "
                    f"{failed[0].get('evalue', '')})")
        return (f"signalled, no answer in {timeout:g} s (stopped, or in a long C call that "
                "holds the GIL?)")
    return f"no answer in {timeout:g} s"
