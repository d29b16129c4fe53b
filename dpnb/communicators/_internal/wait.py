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
It also records the break on the status board, where the other ranks look for it
(every collective's entry reads the slots of its group's ranks on this host,
and a wait reads every member's slot every ``LOOK_EVERY`` seconds): a rank
interrupted in a collective its peers never called would otherwise leave them
waiting for it in their next one until the timeout.

It also reports stalls: each collective is published on the status board
(status_board.py) as the rank enters it, and a wait that has lasted
``stall_seconds`` since then prints, once, which ranks of the group have not
arrived and what each of them last entered, how long ago.  The check is one
comparison in the polling loop, which a collective that finishes in
microseconds never reaches.

And it finds deadlocks between groups: ranks that wait for each other in
collectives that can never complete, such as rank 0 in an all_reduce on group
'world' while rank 1 is in one on group 'g' (ranks 0 and 1): each agreement
check runs on its own group's MPI communicator, so the two never meet.  The
status board says which collective each rank entered last and how many it has
entered in each group.  With the agreement check on, every collective starts
with the check, which needs every rank of its group to enter it before it
completes, so a rank whose last collective a member has not entered is still
inside it (or gave up); when such waits form a cycle, no rank of the cycle can
ever leave (the first to leave would need the next to have left before it),
and a rank waiting for one of them cannot either.  Entries read at different
moments keep this true, so one reading suffices.  An agreement check that
waits ``DEADLOCK_FIRST_LOOK`` seconds reads the board every ``LOOK_EVERY``
seconds and raises ``AgreementError`` once this rank is caught in a deadlock.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Mapping

from ...errors import (AgreementError, CommunicatorError, CommunicatorInterrupted,
                       CommunicatorTimeout)

logger = logging.getLogger("dpnb.communicators")

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
LOOK_EVERY = 0.1        # seconds between a wait's readings of the board (peers' breaks, deadlocks)
DEADLOCK_FIRST_LOOK = 0.05  # seconds an agreement check waits before it looks for a deadlock
# A wait raises for a peer's break seen this long: a timeout or interrupt of its own
# that comes at nearly the same moment (a signal sent to every rank) is told instead.
PEER_GRACE = 0.3


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
    """Waits for one communicator's collectives, with the timeout of its ``settings``
    (a ``Settings``), and remembers that it is broken once a wait (or a step of a
    pipeline) has failed; with a ``board`` (a ``StatusBoard``) it publishes the
    collectives entered and its break there, and from it reports a wait that lasts
    ``stall_seconds``, the breaks of peers and deadlocks."""

    def __init__(self, settings, board=None):
        self.settings = settings
        self.broken: str | None = None
        self.board = board
        self._reported = 0.0  # when the collective last reported was entered (board.entered_at())
        self._group = None  # the group of the collective entered last (``enter``)
        self._peer_seen: float | None = None  # when this wait first saw a peer's break
        self._abandoned: list = []  # requests a failure left pending (MPI may still use them)

    def use(self, settings) -> None:
        """Wait with the timeout, stall seconds and agreement check of ``settings`` from now on."""
        self.settings = settings

    def enter(self, operation: str, group) -> None:
        """Publish that this rank enters collective ``operation`` on ``group`` (a
        ``Group``): call once per collective the ranks of the group number alike.
        Raises (breaking this communicator too) where a rank of ``group`` on this
        host has broken its communicator, as it will never take part."""
        board = self.board
        if board is None:
            return
        board.publish(operation, group)
        self._group = group
        self._peer_seen = None
        if board.local_peer_broken(group):
            self._raise_if_peer_broke(grace=0.0)

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
            wait_until(done, self.settings.timeout, what, self._stall)
        except CommunicatorError as e:
            self.mark_broken(e, list(requests))
            raise

    def wait_agreement(self, request, what, meanwhile=None) -> None:
        """Wait for a request of an agreement check, after ``meanwhile()`` (if given,
        local work done while the check travels): tests in a tight loop first (a
        check takes microseconds where every rank is there), then polls, within the
        timeout and interruptibly, reading the board now and then for ranks caught
        waiting for each other in different groups (only where every collective
        starts with the check, so that none completes before every rank of its group
        has entered it).  Any failure marks the communicator broken: the request
        stays posted."""
        try:
            if meanwhile is not None:
                meanwhile()
            if quickly(request.Test):
                return
            board = self.board if self.settings.check_agreement else None
            self.wait_until(DeadlockWatch(request, board, what), what, [request])
        except BaseException as e:  # noqa: BLE001 - any failure leaves the request posted
            raise self.broken_by(e, [request], what)

    def broken_by(self, error: BaseException, requests: list, what) -> BaseException:
        """What a wait that failed with ``error`` raises (an interrupt as
        ``CommunicatorInterrupted``), once the communicator is marked broken by it."""
        if isinstance(error, CommunicatorError):
            return error  # marked already
        if isinstance(error, KeyboardInterrupt):
            error = CommunicatorInterrupted(f"{what()}: interrupted while waiting for the "
                                            "other ranks")
        self.mark_broken(error, requests)
        return error

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
        stall_seconds = self.settings.stall_seconds
        if stall_seconds >= self.settings.timeout:
            return look
        entered = board.entered_at()
        if entered == self._reported:
            return look
        if now < entered + stall_seconds:
            return min(look, entered + stall_seconds)
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
    """The status board's word (``status_board.BREAKS``) for how ``error`` broke a
    communicator."""
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


def deadlocked(entries: Mapping[int, object], groups: Mapping[str, object]) -> dict[int, list[int]]:
    """The ranks that can never leave the collective they entered last, each with
    the ranks of the deadlock it waits for, from status board ``entries`` (world
    rank -> ``Entry``) and the known ``groups`` (name -> ``Group``)."""
    waits: dict[int, list[int]] = {}
    for rank, entry in entries.items():
        group = groups.get(entry.group) if entry.operation is not None else None
        if group is None:
            continue
        absent = []
        for member in group.ranks:
            other = entries.get(member)
            entered = other.entered_in(entry.group) if other is not None else None
            if member != rank and entered is not None and entered < entry.sequence:
                absent.append(member)
        if absent:
            waits[rank] = absent
    stuck = set(waits)
    changed = True
    while changed:  # keep the ranks that wait for a rank that is itself stuck
        changed = False
        for rank in list(stuck):
            if not any(member in stuck for member in waits[rank]):
                stuck.discard(rank)
                changed = True
    return {rank: [m for m in waits[rank] if m in stuck] for rank in sorted(stuck)}


class DeadlockWatch:
    """The ``done()`` of an agreement check's wait: whether ``request`` finished;
    meanwhile it looks for a deadlock on ``board`` (None: it does not look) now
    and then."""

    def __init__(self, request, board, what):
        self.request = request
        self.board = board
        self.what = what
        self.next_look = time.monotonic() + DEADLOCK_FIRST_LOOK

    def __call__(self) -> bool:
        if self.request.Test():
            return True
        now = time.monotonic()
        if self.board is not None and now > self.next_look:
            self.next_look = now + LOOK_EVERY
            self.look()
        return False

    def look(self) -> None:
        """Read the board; raise ``AgreementError`` if this rank is in a deadlock."""
        board = self.board
        groups = board.groups
        entries = board.entries((r for r in groups["world"].ranks if r != board.rank),
                                patience=0.0)
        entries[board.rank] = board.mine()
        stuck = deadlocked(entries, groups)
        if board.rank in stuck:
            raise AgreementError(deadlock_message(self.what(), stuck, entries))


def deadlock_message(what: str, stuck: Mapping[int, list[int]], entries: Mapping) -> str:
    """The error of a rank caught in a deadlock: every stuck rank, where it waits, for whom."""
    lines = [(f"{what}: can never complete: ranks wait for each other in collectives the "
              "others have not entered (collectives of different groups, or in another order):")]
    for rank, waiting_for in stuck.items():
        entry = entries[rank]
        whom = ", ".join(str(r) for r in waiting_for)
        lines.append(f"  rank {rank}: {entry.operation} #{entry.sequence} on {entry.group!r}, "
                     f"waiting for rank{'s' if len(waiting_for) > 1 else ''} {whom}")
    lines.append("every rank of a group must call the same collectives on it, in the same "
                 "order.  The communicator is broken now (the agreement checks stay posted): "
                 "restart the engines (e.g. `%dpnb restart` or cluster.restart()) and create "
                 "a new communicator")
    return "\n".join(lines)
