"""Standoffs: ranks that wait for each other in collectives that can never
complete, such as rank 0 in an all_reduce on group 'world' while rank 1 is in
one on group 'g' (ranks 0 and 1): each agreement check runs on its own group's
MPI communicator, so the two never meet.

The board (board.py) says which collective each rank entered last and how many
it has entered in each group.  With the agreement check on, every collective
starts with the check, which needs every rank of its group to enter it before
it completes, so a rank whose last collective a member has not entered is
still inside it (or gave up); when such waits form a cycle, no
rank of the cycle can ever leave (the first to leave would need the next to
have left before it), and a rank waiting for one of them cannot either.
Entries read at different moments keep this true, so one reading suffices.  A
wait that lasts ``FIRST_LOOK`` seconds reads the board every ``LOOK_EVERY``
seconds and raises ``AgreementError`` once this rank is caught in a standoff."""
from __future__ import annotations

import time
from collections.abc import Mapping

from ..errors import AgreementError

FIRST_LOOK = 0.05   # seconds an agreement check waits before it reads the board
LOOK_EVERY = 0.1    # seconds between readings after that


def standoff(entries: Mapping[int, object], groups: Mapping[str, object]) -> dict[int, list[int]]:
    """The ranks that can never leave the collective they entered last, each with
    the ranks of the standoff it waits for, from board ``entries`` (world rank ->
    ``board.Entry``) and the known ``groups`` (name -> ``Group``)."""
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


class Watch:
    """The ``done()`` of an agreement check's wait: whether ``request`` finished;
    meanwhile it looks for a standoff on ``board`` (None: none yet) now and then."""

    def __init__(self, request, board, groups: Mapping[str, object], what):
        self.request = request
        self.board = board
        self.groups = groups
        self.what = what
        self.next_look = time.monotonic() + FIRST_LOOK

    def __call__(self) -> bool:
        if self.request.Test():
            return True
        now = time.monotonic()
        if self.board is not None and now > self.next_look:
            self.next_look = now + LOOK_EVERY
            self.look()
        return False

    def look(self) -> None:
        """Read the board; raise ``AgreementError`` if this rank is in a standoff."""
        board = self.board
        entries = board.entries((r for r in self.groups["world"].ranks if r != board.rank),
                                patience=0.0)
        entries[board.rank] = board.mine()
        stuck = standoff(entries, self.groups)
        if board.rank in stuck:
            raise AgreementError(standoff_message(self.what(), stuck, entries))


def standoff_message(what: str, stuck: Mapping[int, list[int]], entries: Mapping) -> str:
    """The error of a rank caught in a standoff: every stuck rank, where it waits, for whom."""
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
