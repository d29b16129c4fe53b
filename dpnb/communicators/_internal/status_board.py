"""The status board: each rank publishes which collective it last entered, so
that a rank kept waiting can tell which ranks have not arrived and where they
are (and the peers of a rank whose communicator broke, or that exited, learn it).

Every rank owns one slot of ``SLOT_WORDS`` int64 words: a table of the groups
it has used (``stable_hash`` of the name, collectives entered in it), the
monotonic time of its last entry, a header word naming that entry's
operation and table row, and a word saying whether (and why) the rank's
communicator broke in that entry, so that its peers stop waiting for it, and
(where the rank exited, exits.py) the reason as text.  Publishing is a few
stores into memory the rank holds anyway, no MPI call (about 0.2 us): the
count, the time, then the header, so that a reader that sees a new header sees
the count and time that go with it (x86 makes stores visible in order;
elsewhere a read racing a write may, for that moment, pair an entry with the
previous time).

Ranks on one host share one MPI-3 shared-memory window: a peer reads a slot
with plain loads, whatever its owner is doing (computing in NumPy included),
without the owner entering MPI.  Ranks on other hosts are read by
passive-target RMA (``Rget`` in a ``Lock_all`` epoch opened at set-up), which
MPICH completes without the target only where the network does RMA itself;
otherwise the target must enter MPI (so it is with MPICH 5 from PyPI, ch4:ucx,
between processes of one host made to read each other this way).  A read
therefore waits at most ``patience`` seconds, then gives an entry marked
unreachable; the read stays posted and the next one picks it up."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping

import numpy as np

from . import exits
from .agreement import OPERATIONS
from .plan import stable_hash

HEADER, TIME, CLOCK_OFFSET, FULL, BROKEN = range(5)  # FULL: more groups used than rows
TABLE = 5                 # then rows of (group hash, collectives entered in it)
ROWS = 29                 # the last row is shared by the groups beyond the others
REASON = TABLE + 2 * ROWS  # then the reason of an exit, UTF-8, padded with zeros
REASON_BYTES = 256
SLOT_WORDS = REASON + REASON_BYTES // 8  # 95 words, 760 bytes per rank
# Why a rank's communicator broke (its BROKEN word is the index + 1; 0: not broken).
BREAKS = ("failed", "was interrupted", "timed out", "stopped because another rank broke",
          "exited")
REMOTE_PATIENCE = 0.1     # seconds a read waits for the slots of ranks on other hosts
REMOTE_FRESH = 1.0        # seconds after its start a remote read's result is still used
_CODES = {name: code << 8 for code, name in enumerate(OPERATIONS, 1)}  # 0: nothing entered yet
_monotonic = time.monotonic


@dataclasses.dataclass(frozen=True)
class Entry:
    """What one rank had entered when it was read.

    ``operation`` is None where it has entered no collective yet, or where it
    could not be read (``reachable`` False: on another host, outside MPI)."""

    rank: int                  # world rank
    reachable: bool
    operation: str | None = None
    group: str | None = None   # the group's name, where this rank knows the group
    group_hash: int = 0
    sequence: int = 0          # its number among the collectives of that group, from 1
    ago: float = 0.0           # seconds since it entered, at the read
    counts: Mapping[int, int] = dataclasses.field(default_factory=dict)  # group hash -> entered
    complete: bool = True      # ``counts`` holds every group it used
    broken: str | None = None  # how its communicator broke in that entry (``BREAKS``), if it did
    reason: str = ""           # why it exited, where ``broken`` is "exited"

    def entered_in(self, group: str) -> int | None:
        """How many collectives of ``group`` it has entered (its last one's number),
        or None where that is unknown (unreachable, or more groups than a slot holds)."""
        if not self.reachable:
            return None
        key = stable_hash(group)
        if key == self.group_hash:
            return self.sequence
        count = self.counts.get(key)
        return count if count is not None or not self.complete else 0


class StatusBoard:
    """The slots of every rank of ``world`` (an mpi4py communicator).  Made by every
    rank together; ``groups`` (name -> ``Group``, live: the communicator's) names the
    groups whose hashes it reads.

    ``local`` is the communicator of the ranks that share memory with this one
    (default: ``world.Split_type(COMM_TYPE_SHARED)``, the ranks of this host)."""

    def __init__(self, world, groups: Mapping[str, object], local=None):
        from mpi4py import MPI

        self.rank = world.Get_rank()
        self.groups = groups
        own_local = local is None
        if own_local:
            local = world.Split_type(MPI.COMM_TYPE_SHARED)
        nbytes = 8 * SLOT_WORDS
        self._shared = MPI.Win.Allocate_shared(nbytes * local.Get_size() if local.Get_rank() == 0
                                               else 0, 8, comm=local)
        memory, _ = self._shared.Shared_query(0)
        self._slots = np.frombuffer(memory, np.int64, SLOT_WORDS * local.Get_size()).reshape(
            -1, SLOT_WORDS)
        ranks = np.empty(local.Get_size(), np.int64)  # the world ranks of this host's
        local.Allgather(np.array([self.rank], np.int64), ranks)
        self._local = {int(r): i for i, r in enumerate(ranks)}
        mine = self._slots[local.Get_rank()]
        mine[:] = 0
        mine.view(np.float64)[CLOCK_OFFSET] = time.time() - _monotonic()
        self._words = memoryview(mine).cast("B").cast("q")
        self._all_words = memoryview(self._slots).cast("B").cast("q")  # every local slot
        self._read_word = self._all_words.__getitem__
        self._floats = memoryview(mine).cast("B").cast("d")
        self._reason = mine[REASON:].view(np.uint8)
        self._positions: dict[str, int] = {}  # group name -> the word counting its collectives
        self._lent: dict[int, int] = {}  # group hash -> count, of groups waiting for the last row
        self._peer_words: dict[str, tuple] = {}  # group name -> its others' BROKEN words here
        self._remote = None
        self._reads: dict[int, tuple] = {}  # world rank -> (request, buffer, start) of a read
        self._remote_ranks = [r for r in range(world.Get_size()) if r not in self._local]
        if self._remote_ranks:
            self._remote = MPI.Win.Create(mine, 8, comm=world)
            self._remote.Lock_all(MPI.MODE_NOCHECK)
        local.Barrier()
        if own_local:
            local.Free()
        exits.watch(self)

    def publish(self, operation: str, group) -> None:
        """Record that this rank enters ``operation`` on ``group`` (anything with the
        group's ``name``, a ``Group``) now."""
        position = self._positions.get(group.name)
        if position is None:
            position = self._place(group.name)
        words = self._words
        words[position] += 1
        self._floats[TIME] = _monotonic()
        words[HEADER] = _CODES[operation] | position

    def mark_broken(self, why: str) -> None:
        """Record that this rank's communicator broke in its last entry (``why``, one of
        ``BREAKS``); the first record stays."""
        if not self._words[BROKEN]:
            self._words[BROKEN] = BREAKS.index(why) + 1

    def mark_exited(self, reason: str) -> None:
        """Record that this rank exits, for ``reason`` (text, cut to ``REASON_BYTES``),
        unless its communicator broke before (its peers know that already)."""
        if self._words[BROKEN]:
            return
        text = reason.encode()[:REASON_BYTES]
        self._reason[:] = 0
        self._reason[:len(text)] = np.frombuffer(text, np.uint8)
        self._words[BROKEN] = BREAKS.index("exited") + 1  # after the text: readers see both

    def waited_for_remotely(self) -> bool:
        """Whether a rank on another host waits in a collective, of a group with this
        rank, that this rank has not entered (reading it drives MPI, serving its reads)."""
        if not self._remote_ranks:
            return False
        mine = self.mine()
        for entry in self.entries(self._remote_ranks).values():
            group = self.groups.get(entry.group)
            if (entry.operation is not None and not entry.broken and group is not None
                    and self.rank in group.ranks
                    and (mine.entered_in(entry.group) or 0) < entry.sequence):
                return True
        return False

    def local_peer_broken(self, group) -> bool:
        """Whether a member of ``group`` (a ``Group``) on this host has recorded that its
        communicator broke: one load per member, for the entry of every collective."""
        words = self._peer_words.get(group.name)
        if words is None:
            words = self._peer_words[group.name] = tuple(
                self._local[r] * SLOT_WORDS + BROKEN for r in group.ranks
                if r != self.rank and r in self._local)
        return any(map(self._read_word, words))

    def broken_peers(self, ranks: Iterable[int]) -> list[Entry]:
        """The entries of those of world ``ranks`` whose communicator broke (those on
        other hosts as far as they can be read without waiting)."""
        return [e for e in self.entries(ranks, patience=0.0).values() if e.broken]

    def entered_at(self) -> float:
        """The monotonic time at which this rank entered its last collective (0 before any)."""
        return self._floats[TIME]

    def mine(self) -> Entry:
        """This rank's own entry."""
        return self._decode(self.rank, self._snapshot(self._local[self.rank]), True)

    def entry(self, rank: int, patience: float = REMOTE_PATIENCE) -> Entry:
        """What world rank ``rank`` last entered (see ``entries``)."""
        return self.entries([rank], patience)[rank]

    def entries(self, ranks: Iterable[int],
                patience: float = REMOTE_PATIENCE) -> dict[int, Entry]:
        """The entries of world ``ranks``, by rank: those on this host at once,
        those on other hosts waiting at most ``patience`` seconds in all (a read
        left by an earlier call is used where it started ``REMOTE_FRESH`` seconds
        ago at most, else made again)."""
        ranks = list(ranks)
        found = {r: self._decode(r, self._snapshot(self._local[r]), True)
                 for r in ranks if r in self._local}
        remote = [r for r in ranks if r not in found]
        deadline = _monotonic() + patience
        while remote:
            for r in remote:
                if r not in self._reads:
                    buffer = np.empty(SLOT_WORDS, np.int64)
                    self._reads[r] = (self._remote.Rget(buffer, r), buffer, _monotonic())
            for r in list(remote):
                request, buffer, start = self._reads[r]
                if request.Test():
                    del self._reads[r]  # a result from long ago is read again
                    if start > _monotonic() - REMOTE_FRESH:
                        found[r] = self._decode(r, buffer, False)
                        remote.remove(r)
            if not remote or _monotonic() > deadline:
                break
            time.sleep(1e-3)
        for r in remote:
            found[r] = Entry(r, reachable=False)
        return found

    def free(self) -> None:
        """Release the windows (collective over the world); MPI_Finalize does it otherwise."""
        exits.forget(self)
        if self._remote is not None:
            self._remote.Unlock_all()
            self._remote.Free()
            self._remote = None
        self._words.release()
        self._all_words.release()
        self._floats.release()
        self._slots = self._reason = None
        self._shared.Free()

    def _place(self, group: str) -> int:
        """The word counting ``group``'s collectives: a row of its own while rows are
        left, else the shared last row, lent to it (with its own count) until the next."""
        words = self._words
        key = stable_hash(group)
        row = len(self._positions)
        if row < ROWS - 1:
            position = self._positions[group] = TABLE + 2 * row + 1
            words[position - 1] = key
            return position
        words[FULL] = 1
        position = TABLE + 2 * ROWS - 1
        if words[position - 1] != key:
            self._lent[words[position - 1]] = words[position]
            words[position - 1] = key
            words[position] = self._lent.pop(key, 0)
        return position

    def _snapshot(self, index: int) -> np.ndarray:
        return self._slots[index].copy()

    def _decode(self, rank: int, slot: np.ndarray, local: bool) -> Entry:
        floats = slot.view(np.float64)
        header = int(slot[HEADER])
        broken = BREAKS[int(slot[BROKEN]) - 1] if slot[BROKEN] else None
        reason = _reason(slot) if broken == "exited" else ""
        if not header:
            return Entry(rank, True, broken=broken, reason=reason)
        if local:
            ago = _monotonic() - floats[TIME]
        else:  # the owner's monotonic clock, told apart from ours by its offset to wall time
            ago = time.time() - (floats[TIME] + floats[CLOCK_OFFSET])
        rows = slot[TABLE:REASON].reshape(ROWS, 2)
        key, sequence = (int(v) for v in slot[(header & 0xFF) - 1:(header & 0xFF) + 1])
        names = {stable_hash(name): name for name in self.groups}
        return Entry(rank, True, OPERATIONS[(header >> 8) - 1], names.get(key), key, sequence,
                     float(ago), {int(k): int(n) for k, n in rows if k}, not slot[FULL], broken,
                     reason)


def _reason(slot: np.ndarray) -> str:
    """The text of an exit in ``slot`` (a cut character where the text was cut is dropped)."""
    return slot[REASON:].view(np.uint8).tobytes().rstrip(b"\0").decode(errors="ignore")
