"""Waiting for non-blocking collectives (MPI requests, CUDA events of NCCL
calls) without giving up control.

A blocking MPI call cannot be interrupted: Ctrl-C (or ipyparallel's
interrupt, which sends SIGINT) would wait for the other ranks forever.  Here
requests are polled with ``Testall``, which also drives MPI's progress: a rank
that sleeps stalls the collective for everyone, so the poll spins, yielding
the core now and then (as MPICH's own waits do) so that a rank sharing it can
progress, and only once the other ranks are clearly absent does it sleep, a
few milliseconds at most.  Python handles signals between polls, so SIGINT
raises at once, and a deadline is checked.

``Guard`` is the one place that waits for a communicator: a failure there (or
anything raised while data collectives are under way) leaves the ranks out of
step, so it marks the communicator broken and keeps the abandoned requests.
It also records the break on the board, where the other ranks look for it
(every collective's entry reads the slots of its group's ranks on this host,
and a wait reads every member's slot every ``LOOK_EVERY`` seconds): a rank
interrupted in a collective its peers never called would otherwise leave them
waiting for it in their next one until the timeout.

It also reports stalls: each collective is published on the board (board.py)
as the rank enters it, and a wait that has lasted ``stall_seconds`` since then
prints, once, which ranks of the group have not arrived and what each of them
last entered, how long ago.  The check is one comparison in the polling loop,
which a collective that finishes in microseconds never reaches.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import time

from ..errors import CommunicatorError, CommunicatorInterrupted, CommunicatorTimeout, DpnbError

logger = logging.getLogger("dpnb.communicators")

DEFAULT_TIMEOUT = 600.0
DEFAULT_STALL = 30.0
# While polling, give the core away this often, as MPICH's own waits do: a rank
# sharing the core (more ranks than cores) needs it to progress.  Not more often:
# where another process is runnable, each yield may cost it a time slice.
_YIELD_EVERY = 200e-6
_POLL_SECONDS = 0.5     # poll this long, then sleep between polls
_FIRST_SLEEP = 50e-6
_MAX_SLEEP = 5e-3       # the longest sleep between polls
_STALL_CHECK = 1e-3     # a wait this long asks whether a stall report is due
# Polls back to back before a wait reads the clock: across hosts a collective's
# protocol needs a poll at each of its steps, and any Python between the polls delays
# every step.  About 4 us on shared memory, 200 us across hosts (the ``_YIELD_EVERY``
# that ranks sharing a core need).
QUICK_POLLS = 16
LOOK_EVERY = 0.1        # seconds between a wait's readings of its peers' breaks
# A wait raises for a peer's break seen this long: a timeout or interrupt of its own
# that comes at nearly the same moment (a signal sent to every rank) is told instead.
PEER_GRACE = 0.3


def timeout_from_env() -> float:
    """The timeout in seconds from ``DPNB_COMM_TIMEOUT``, else 600."""
    return _seconds_from_env("DPNB_COMM_TIMEOUT", DEFAULT_TIMEOUT)


def stall_from_env() -> float:
    """Seconds a collective waits before its stall report, from ``DPNB_COMM_STALL``, else 30."""
    return _seconds_from_env("DPNB_COMM_STALL", DEFAULT_STALL)


def _seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return default if raw is None else _positive_seconds(name, raw)


def _positive_seconds(name: str, raw) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not value > 0:
        raise DpnbError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def quickly(done) -> bool:
    """Whether ``done()`` turns true within ``QUICK_POLLS`` polls back to back, the
    first stage of a wait: most collectives end within it."""
    for _ in range(QUICK_POLLS):
        if done():
            return True
    return False


def wait_until(done, timeout: float, what, stall=None) -> None:
    """Poll ``done()`` until it is true.

    ``what()`` names the operation for the error; it is only called on failure.
    Raises ``CommunicatorTimeout`` after ``timeout`` seconds and
    ``CommunicatorInterrupted`` on SIGINT; the operation is then still pending.
    A wait that lasts a millisecond calls ``stall(now)``, which returns the
    monotonic time at which to call it again (``math.inf``: never)."""
    try:
        if quickly(done):
            return
        start = last_yield = time.monotonic()
        deadline = start + timeout
        stall_at = start + _STALL_CHECK if stall is not None else math.inf
        delay = _FIRST_SLEEP
        while not done():
            now = time.monotonic()
            if now > stall_at:
                stall_at = stall(now)
            if now > deadline:
                raise CommunicatorTimeout(
                    f"{what()}: the other ranks did not take part within the timeout of "
                    f"{timeout:g} s (a rank may have stopped, raised an error, or called a "
                    "different collective or group); raise `comm.timeout` or "
                    "DPNB_COMM_TIMEOUT if the ranks are only slow")
            if now - start > _POLL_SECONDS:
                time.sleep(delay)
                delay = min(2 * delay, _MAX_SLEEP)
            elif now - last_yield > _YIELD_EVERY:
                os.sched_yield()
                last_yield = now
    except KeyboardInterrupt as e:
        if isinstance(e, CommunicatorInterrupted):
            raise
        raise CommunicatorInterrupted(
            f"{what()}: interrupted while waiting for the other ranks") from e


class Guard:
    """Waits for one communicator's collectives, with its timeout, and remembers
    that it is broken once a wait (or a step of a pipeline) has failed; reports a
    wait that lasts ``stall_seconds`` (from the board, once one is attached)."""

    def __init__(self, timeout: float, stall_seconds: float = DEFAULT_STALL):
        self.timeout = timeout
        self.stall_seconds = stall_seconds
        self.broken: str | None = None
        self.board = None  # the Board collectives are published on (``attach``)
        self._reported = 0.0  # when the collective last reported was entered (board.entered_at())
        self._group = None  # the group of the collective entered last (``enter``)
        self._peer_seen: float | None = None  # when this wait first saw a peer's break
        self._abandoned: list = []  # requests a failure left pending (MPI may still use them)

    @property
    def timeout(self) -> float:
        """Seconds a collective may wait for the other ranks before failing."""
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._timeout = _positive_seconds("comm.timeout", seconds)

    @property
    def stall_seconds(self) -> float:
        """Seconds a collective waits for the other ranks before it reports who is late
        (once per collective; never where it is not below the timeout)."""
        return self._stall_seconds

    @stall_seconds.setter
    def stall_seconds(self, seconds: float) -> None:
        self._stall_seconds = _positive_seconds("comm.stall_seconds", seconds)

    def attach(self, board) -> None:
        """Publish the collectives entered and this communicator's break on ``board`` (a
        ``Board``); report stalls and the breaks of peers from it."""
        self.board = board
        self.enter = self._enter_on_board

    def _enter_on_board(self, operation: str, group) -> None:
        """Publish the entry; raise (breaking this communicator too) where a rank of
        ``group`` on this host has broken its communicator, as it will never take part."""
        board = self.board
        board.publish(operation, group)
        self._group = group
        self._peer_seen = None
        if board.local_peer_broken(group):
            self._raise_if_peer_broke(grace=0.0)

    def enter(self, operation: str, group) -> None:
        """Publish that this rank enters collective ``operation`` on ``group`` (a
        ``Group``): call once per collective the ranks of the group number alike.
        Nothing to do before a board is attached."""

    def check_usable(self) -> None:
        """Raise if an earlier collective failed."""
        if self.broken is not None:
            raise CommunicatorError(
                f"this communicator is broken: an earlier collective failed ({self.broken}). "
                "Its ranks are out of step and cannot be matched up again: restart the engines "
                "(e.g. `%dpnb restart` or cluster.restart()) and create a new communicator")

    def wait(self, requests: list, what) -> None:
        """Wait for MPI ``requests``; ``what()`` names the operation for errors."""
        if len(requests) == 1:
            self.wait_until(requests[0].Test, what, requests)
            return
        from mpi4py import MPI

        self.wait_until(functools.partial(MPI.Request.Testall, requests), what, requests)

    def wait_until(self, done, what, requests: list = ()) -> None:
        """Wait until ``done()``; a failure marks the communicator broken."""
        try:
            wait_until(done, self._timeout, what, self._stall)
        except CommunicatorError as e:
            self.mark_broken(e, list(requests))
            raise

    def run(self, step, pending) -> None:
        """Run ``step()`` (a pipeline's pump or drain).  Once data collectives are
        under way any failure, an interrupt while packing too, breaks the
        communicator; ``pending()`` lists the MPI requests then left in flight."""
        try:
            step()
        except BaseException as e:
            self.mark_broken(e, pending())
            raise

    def mark_broken(self, error: BaseException, requests: list) -> None:
        """Remember the failure ``error`` (the first one), keep ``requests`` that it left
        pending, and publish the break on the board for the other ranks."""
        self._abandoned.extend(requests)
        if self.broken is None:
            self.broken = str(error) or type(error).__name__
            if self.board is not None:
                self.board.mark_broken(_why_broken(error))

    def _raise_if_peer_broke(self, grace: float, now: float = 0.0) -> None:
        """Raise ``PeerBroken`` (and break this communicator) where a rank of the
        group of the collective under way has broken its communicator, ``grace``
        seconds after this wait first saw it."""
        board, group = self.board, self._group
        if board is None or group is None:
            return
        peers = board.broken_peers(r for r in group.ranks if r != board.rank)
        if any(e.broken == "exited" for e in peers):
            entered = board.mine().entered_in(group.name)
            peers = [e for e in peers if not _took_part(e, group.name, entered)]
        if peers and grace > 0:
            if self._peer_seen is None:
                self._peer_seen = now
            if now < self._peer_seen + grace:
                return
        if peers:
            error = PeerBroken(peer_broken_message(peers, group.name))
            self.mark_broken(error, [])
            raise error

    def _stall(self, now: float) -> float:
        """Raise if a peer broke its communicator (looking every ``LOOK_EVERY`` s), and
        report the collective under way if it has waited ``stall_seconds`` (once, and
        only below the timeout); when to be called again."""
        board = self.board
        if board is None:
            return math.inf
        self._raise_if_peer_broke(PEER_GRACE, now)
        look = now + LOOK_EVERY
        if self._stall_seconds >= self._timeout:
            return look
        entered = board.entered_at()
        if entered == self._reported:
            return look
        if now < entered + self._stall_seconds:
            return min(look, entered + self._stall_seconds)
        self._reported = entered
        self._report_stall()
        return look

    def _report_stall(self) -> None:
        """Print which ranks of the collective's group have not arrived, and log it where
        logging is configured (Python's last-resort handler would print it again)."""
        board = self.board
        mine = board.mine()
        message = stall_report(mine, mine.group, board.entries(
            r for r in board.groups[mine.group].ranks if r != board.rank))
        print(message, flush=True)
        if logger.hasHandlers():
            logger.warning(message)


class PeerBroken(CommunicatorError):
    """Another rank of the group broke its communicator, so it will not take part."""


def _took_part(peer, group: str, sequence: int | None) -> bool:
    """Whether ``peer`` (a board ``Entry``) exited after entering collective number
    ``sequence`` of ``group`` (this rank's): its part is done, its exit no reason to fail."""
    entered = peer.entered_in(group)
    return (peer.broken == "exited" and sequence is not None and entered is not None
            and entered >= sequence)


def _why_broken(error: BaseException) -> str:
    """The board's word (``board.BREAKS``) for how ``error`` broke a communicator."""
    if isinstance(error, PeerBroken):
        return "stopped because another rank broke"
    if isinstance(error, KeyboardInterrupt):
        return "was interrupted"
    if isinstance(error, CommunicatorTimeout):
        return "timed out"
    return "failed"


def peer_broken_message(peers: list, group: str) -> str:
    """The error of a rank whose peers (board ``Entry`` each) broke their communicator
    or exited."""
    named = "; ".join(_peer_broke(e, group) for e in peers)
    whose, it = (("their communicators are", "they") if len(peers) > 1 else
                 ("its communicator is", "it"))
    why = (f", so {it}" if all(e.broken == "exited" for e in peers) else
           f": {whose} broken, so {it}")
    return (f"{named}{why} will not take part in collectives on {group!r} again.  The ranks "
            "are out of step: restart the engines (e.g. `%dpnb restart` or cluster.restart()) "
            "and create a new communicator")


def _peer_broke(peer, group: str) -> str:
    """What a peer (a board ``Entry``) did: broke its communicator where, or exited why."""
    where = (f"{peer.operation} #{peer.sequence}"
             + (f" on {peer.group!r}" if peer.group not in (None, group) else ""))
    if peer.broken != "exited":
        return f"rank {peer.rank} {peer.broken} in {where}"
    after = f"after {where}" if peer.operation is not None else "before any collective"
    return f"rank {peer.rank} exited {after} ({peer.reason})"


def stall_report(mine, group: str, others: dict) -> str:
    """The report of a collective this rank entered (``mine``, a board ``Entry``) on
    ``group``, from the other members' entries (world rank -> ``Entry``)."""
    head = f"{mine.operation} #{mine.sequence} on {group!r}: waiting {_seconds(mine.ago)}"
    late = []
    for rank in sorted(others):
        entry = others[rank]
        entered = entry.entered_in(group)
        if entered is not None and entered >= mine.sequence:
            continue
        if not entry.reachable:
            late.append(f"rank {rank}, on another host, whose entry cannot be read while it "
                        "is outside MPI")
        elif entry.operation is None:
            late.append(f"rank {rank}, which has entered no collective yet")
        else:
            where = ("" if entry.group == group else
                     f" on {entry.group!r}" if entry.group is not None else
                     " on a group this rank does not know")
            late.append(f"rank {rank}, which last entered {entry.operation} "
                        f"#{entry.sequence}{where} {_seconds(entry.ago)} ago")
    if not late:
        return f"{head}; every rank of the group has entered it (the data are still moving)"
    return f"{head} for " + "; for ".join(late)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"
