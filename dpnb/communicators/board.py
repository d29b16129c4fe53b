"""The board: each rank publishes which collective it last entered, so that a
rank kept waiting can tell which ranks have not arrived and where they are.

Every rank owns one slot of ``SLOT_WORDS`` int64 words: the operation, group
(by ``stable_hash`` of its name), sequence number and monotonic time of the
collective it entered last, and how many collectives it has entered in each of
its groups.  Writing it is a few stores into memory the rank holds anyway (no
MPI call), under a sequence lock (``TAIL`` first, ``HEAD`` last; a reader
accepts a copy whose two agree).

Ranks on one host share one MPI-3 shared-memory window: a peer reads a slot
with plain loads, whatever its owner is doing (computing in NumPy included),
without the owner entering MPI.  Ranks on other hosts are read by
passive-target RMA (``Rget`` in a ``Lock_all`` epoch opened at set-up).
MPICH completes such a read without the target only where the network does
RMA in hardware; otherwise the target must be inside MPI.  A read therefore
waits at most ``patience`` seconds and then gives an entry marked unreachable,
and finishes later (it is tried again by the next read)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping

import numpy as np

from .agreement import OPERATIONS, stable_hash

HEAD, OPERATION, GROUP, SEQUENCE, TIME, CLOCK_OFFSET = range(6)
TABLE = 6                 # then (group hash, collectives entered) pairs
TABLE_GROUPS = 28         # groups whose counts a slot holds (more are still published as entered)
TAIL = TABLE + 2 * TABLE_GROUPS + 1
SLOT_WORDS = TAIL + 1     # 64 words, 512 bytes per rank
FULL = TAIL - 1           # 1 once this rank used more groups than the table holds
REMOTE_PATIENCE = 0.1     # seconds a read waits for the slots of ranks on other hosts
_CODES = {name: code for code, name in enumerate(OPERATIONS, 1)}  # 0: nothing entered yet
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


class Board:
    """The slots of every rank of ``world`` (an mpi4py communicator).  Made by every
    rank together; ``groups`` (live, name -> anything) names the group hashes read.

    ``local`` is the communicator of the ranks that share memory with this one
    (default: ``world.Split_type(COMM_TYPE_SHARED)``, the ranks of this host)."""

    def __init__(self, world, groups: Mapping[str, object], local=None):
        from mpi4py import MPI

        self.rank = world.Get_rank()
        self._groups = groups
        own_local = local is None
        if own_local:
            local = world.Split_type(MPI.COMM_TYPE_SHARED)
        nbytes = 8 * SLOT_WORDS
        self._shared = MPI.Win.Allocate_shared(nbytes * local.Get_size() if local.Get_rank() == 0
                                               else 0, 8, comm=local)
        memory, _ = self._shared.Shared_query(0)
        self._slots = np.frombuffer(memory, np.int64, SLOT_WORDS * local.Get_size()).reshape(
            -1, SLOT_WORDS)
        self._local = {r: i for i, r in enumerate(local.allgather(self.rank))}
        mine = self._slots[local.Get_rank()]
        mine[:] = 0
        mine.view(np.float64)[CLOCK_OFFSET] = time.time() - _monotonic()
        self._words = memoryview(mine).cast("B").cast("q")
        self._floats = memoryview(mine).cast("B").cast("d")
        self._version = 0
        self._state: dict[str, list] = {}  # group name -> [hash, entered, table position or 0]
        self._remote = None
        self._reads: dict[int, tuple] = {}  # world rank -> (request, buffer) of a read under way
        if local.Get_size() < world.Get_size():
            self._remote = MPI.Win.Create(mine, 8, comm=world)
            self._remote.Lock_all(MPI.MODE_NOCHECK)
        local.Barrier()
        if own_local:
            local.Free()

    def publish(self, operation: str, group: str) -> int:
        """Record that this rank enters ``operation`` on ``group`` now; returns its
        number among the collectives this rank has entered in that group."""
        state = self._state.get(group)
        if state is None:
            state = self._add(group)
        sequence = state[1] = state[1] + 1
        version = self._version = self._version + 1
        words = self._words
        words[TAIL] = version
        if state[2]:
            words[state[2]] = sequence
        words[OPERATION] = _CODES[operation]
        words[GROUP] = state[0]
        words[SEQUENCE] = sequence
        self._floats[TIME] = _monotonic()
        words[HEAD] = version
        return sequence

    def mine(self) -> Entry:
        """This rank's own entry."""
        return self._decode(self.rank, self._snapshot(self._local[self.rank]), True)

    def entry(self, rank: int, patience: float = REMOTE_PATIENCE) -> Entry:
        """What world rank ``rank`` last entered (see ``entries``)."""
        return self.entries([rank], patience)[rank]

    def entries(self, ranks: Iterable[int],
                patience: float = REMOTE_PATIENCE) -> dict[int, Entry]:
        """The entries of world ``ranks``, by rank: those on this host at once,
        those on other hosts waiting at most ``patience`` seconds in all."""
        ranks = list(ranks)
        found = {r: self._decode(r, self._snapshot(self._local[r]), True)
                 for r in ranks if r in self._local}
        remote = [r for r in ranks if r not in found]
        deadline = _monotonic() + patience
        while remote:
            for r in remote:
                if r not in self._reads:
                    buffer = np.empty(SLOT_WORDS, np.int64)
                    self._reads[r] = (self._remote.Rget(buffer, r), buffer)
            for r in list(remote):
                request, buffer = self._reads[r]
                if request.Test():
                    del self._reads[r]
                    if buffer[HEAD] == buffer[TAIL]:  # else read again: it changed meanwhile
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
        if self._remote is not None:
            self._remote.Unlock_all()
            self._remote.Free()
            self._remote = None
        self._words.release()
        self._floats.release()
        self._slots = None
        self._shared.Free()

    def _add(self, group: str) -> list:
        key = stable_hash(group)
        used = len(self._state)
        position = TABLE + 2 * used + 1 if used < TABLE_GROUPS else 0
        if position:
            self._words[position - 1] = key
        else:
            self._words[FULL] = 1
        state = self._state[group] = [key, 0, position]
        return state

    def _snapshot(self, index: int) -> np.ndarray:
        """A consistent copy of local slot ``index`` (a writer takes nanoseconds)."""
        slot = self._slots[index]
        while True:
            copy = slot.copy()
            if copy[HEAD] == copy[TAIL]:
                return copy

    def _decode(self, rank: int, slot: np.ndarray, local: bool) -> Entry:
        floats = slot.view(np.float64)
        code = int(slot[OPERATION])
        if local:
            ago = _monotonic() - floats[TIME]
        else:  # the owner's monotonic clock, told apart from ours by its offset to wall time
            ago = time.time() - (floats[TIME] + floats[CLOCK_OFFSET])
        names = {stable_hash(name): name for name in self._groups}
        pairs = slot[TABLE:TABLE + 2 * TABLE_GROUPS].reshape(-1, 2)
        counts = {int(k): int(n) for k, n in pairs if k}
        key = int(slot[GROUP])
        return Entry(rank, True, OPERATIONS[code - 1] if code else None, names.get(key), key,
                     int(slot[SEQUENCE]), float(ago) if code else 0.0, counts,
                     not slot[FULL])
