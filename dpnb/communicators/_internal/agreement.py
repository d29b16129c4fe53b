"""The agreement check: before a collective, the ranks of a group compare what
they are about to do with one small collective, so that mismatched calls
raise the same clear error everywhere instead of hanging or mixing up memory.

Each rank contributes a row of ``ROW_BYTES``: a short int64 signature, then
room for a small payload (the data of a small collective are sent inline
there, so that it takes one collective, not two: ``InlineCollective``).  One
Allgather of the rows, the same size on every rank whatever the call (a
persistent request of the group's ``Channel``), gives every rank every
signature: they agree where all rows start alike, and since every rank reads the same
rows, every rank reaches the same conclusion.  Only on a mismatch are the full
descriptions gathered (as JSON, on this error path only, through the same
bounded, interruptible waits).

A rank whose own arguments fail their checks still takes part: its row says
so (a ``refusal`` call), and every rank of the group raises
``RankArgumentError`` naming it and its error, before anything is sent,
instead of waiting for it.  ``new_group`` is agreed on the same way, its name
and ranks in ``Call.arguments``.

Inline collectives: where the check is on and a call's data are small (they fit
in ``PAYLOAD_BYTES``), every rank puts its data beside its signature and the
one Allgather of the rows does both jobs: each rank checks the signatures, then
sums (or, for bcast, copies) the rows' payloads itself.  For a one-element
all_reduce that is most of the cost.  Every rank reads the same rows and sums
them in rank order, so every rank gets the same bits; a mismatch raises on
every rank before any result is written.  Whether a call goes inline depends
only on what the signature compares (dtypes, shapes, NumPy arrays), and the
signature says so, so ranks never disagree about it silently."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import AgreementError, DpnbError, RankArgumentError
from .. import values
from .plan import STAGE_DTYPES, Collective, stable_hash

_MAGIC = 0x64706E62  # "dpnb": tells our check from foreign traffic on the same communicator
_REFUSED = 0x64706E63  # the first word of a row whose rank refused its own arguments
OPERATIONS = ("barrier", "all_reduce", "reduce", "bcast", "all_gather", "reduce_scatter",
              "all_reduce_callback", "new_group")
_FIELDS = ("protocol", "operation", "group", "array count", "root", "division",
           "total elements", "bucket size", "dtypes and shapes",
           "path (data sent inline with the check or not)")
SIGNATURE_BYTES = 8 * (len(_FIELDS) + 1)  # the fields and the memory layout, as int64
ROW_BYTES = 256                           # what each rank sends: signature, then payload
PAYLOAD_BYTES = ROW_BYTES - SIGNATURE_BYTES



@dataclasses.dataclass
class Call:
    """What one rank is about to do: compared across ranks before the data moves.

    Its signature vector is built once, so a plan reused call after call pays
    only for the collective itself."""

    operation: str
    group: str
    specs: list[tuple[str, tuple[int, ...]]]  # (dtype, shape) of each array, in order
    root: int = -1
    division: bool = False
    bucket_bytes: int = 0
    layout: int = 0        # how the arrays lie in memory; ranks may differ, see ``agree``
    specs_hash: int = -1   # stable_hash(specs), if the caller has it already
    inline: bool = False   # the data travel in the payload of the rows (InlineCollective)
    arguments: tuple = ()  # other values the ranks must pass alike (new_group's name and ranks)
    refusal: str = ""      # why this rank cannot make the call: its own argument error

    def __post_init__(self):
        if self.specs_hash < 0:
            self.specs_hash = stable_hash((self.specs, self.arguments) if self.arguments
                                          else self.specs)
        total = sum(int(np.prod(shape, dtype=np.int64)) for _, shape in self.specs)
        sig = np.array([_REFUSED if self.refusal else _MAGIC, OPERATIONS.index(self.operation),
                        stable_hash(self.group),
                        len(self.specs), self.root, int(self.division), total,
                        self.bucket_bytes, self.specs_hash, int(self.inline), self.layout],
                       dtype=np.int64)
        self.expected = sig.tobytes()  # how every row starts when all ranks agree
        self._agreed = (0, b"")

    def agreed(self, size: int) -> bytes:
        """The signatures of a group of ``size`` where every rank makes this call (never
        matched where this rank refused)."""
        if self._agreed[0] != size:
            self._agreed = (size, b"" if self.refusal else self.expected * size)
        return self._agreed[1]

    def describe(self) -> dict:
        """The call as JSON values, gathered from every rank where the ranks disagree."""
        return {"operation": self.operation, "group": self.group,
                "specs": [[str(dtype), [int(n) for n in shape]] for dtype, shape in self.specs],
                "root": int(self.root), "division": bool(self.division),
                "bucket bytes": int(self.bucket_bytes), "arguments": _plain(self.arguments),
                "refusal": self.refusal}


class Channel:
    """The check's Allgather on one group: this rank's row out, every rank's rows
    in, through buffers and (MPI 4) a persistent request made once with the group,
    so that each check costs a ``Start`` instead of setting up a new collective
    (about 0.9 us of 1.8 us on two ranks here).  A group has one check at a time: a
    ``DeferredCheck`` still under way is settled before anything else uses the buffers."""

    def __init__(self, comm, size: int):
        self.comm = comm
        self.size = size
        self.deferred: DeferredCheck | None = None  # started, not settled yet
        self.row = np.zeros(ROW_BYTES, np.uint8)
        self.rows = np.zeros((size, ROW_BYTES), np.uint8)
        self.signatures = self.rows[:, :SIGNATURE_BYTES]
        self._head = memoryview(self.row)[:SIGNATURE_BYTES]
        try:
            self._request = comm.Allgather_init(self.row, self.rows)
        except NotImplementedError:  # an MPI library older than MPI 4
            self._request = None

    def start(self, call: Call):
        """Send ``call``'s signature (and what the row's payload holds); returns the request."""
        self.settle_deferred()
        self._head[:] = call.expected
        if self._request is None:
            return self.comm.Iallgather(self.row, self.rows)
        self._request.Start()
        return self._request

    def settle_deferred(self) -> None:
        """Settle the deferred check first, if one is under way: its rows are in the buffers."""
        if self.deferred is not None:
            self.deferred.settle()


class DeferredCheck:
    """An agreement check started now and settled when its outcome is needed, so that
    this rank goes on with local work while its peers arrive instead of waiting for
    them at the start (the gradient reducer's, during backward).  ``settle`` raises as
    ``agree`` does, on every rank, and again where called again."""

    def __init__(self, group, call: Call, wait, what):
        self.group = group
        self.call = call
        self._wait = wait
        self._what = what
        self._request = group.channel.start(call)
        group.channel.deferred = self
        self._outcome: bool | BaseException | None = None

    def settle(self) -> bool:
        """Wait for every rank's row and compare them (once): whether the memory layouts
        agree too."""
        if self._outcome is None:
            channel = self.group.channel
            channel.deferred = None
            try:
                self._wait(self._request, self._what)
                self._outcome = (channel.signatures.tobytes() == self.call.agreed(channel.size)
                                 or compare_signatures(self.group, self.call, self._wait,
                                                       self._what))
            except BaseException as e:  # noqa: BLE001 - kept, and raised at every settle
                self._outcome = e
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome


def agree(group, call: Call, wait, what, meanwhile=None) -> bool:
    """Check that every rank of ``group`` makes the same ``call``.

    Returns whether the memory layouts agree too (if not, every rank takes the
    layout-independent path).  Raises ``AgreementError`` on every rank, with
    the same message, if anything else differs, and ``RankArgumentError`` where
    a rank refused its arguments.  ``wait(request, what, meanwhile)`` runs
    ``meanwhile()`` (local work that sends nothing, if given) while the rows
    travel, then waits interruptibly, within the timeout; ``what()`` names the
    call for its errors."""
    channel = group.channel
    wait(channel.start(call), what, meanwhile)
    return (channel.signatures.tobytes() == call.agreed(channel.size)
            or compare_signatures(group, call, wait, what))


def refusal(operation: str, group: str, error: BaseException) -> Call:
    """The call of a rank that cannot make ``operation`` on ``group`` because its own
    arguments failed their checks (``error``): agreeing with it makes every rank raise."""
    text = str(error) if isinstance(error, DpnbError) else f"{type(error).__name__}: {error}"
    return Call(operation, group, [], refusal=text or type(error).__name__)


def compare_signatures(group, call: Call, wait, what) -> bool:
    """From the rows gathered on the group's channel, once they are not all
    ``call.agreed`` (the callers compare that first, the quick case): True if every
    rank made ``call`` after all, False if only the memory layouts differ; else raises
    ``AgreementError`` (``RankArgumentError`` where a rank refused its arguments) on
    every rank, after gathering every rank's description through ``wait``."""
    words = group.channel.signatures.view(np.int64)
    same = (words == words[0]).all(axis=0)
    refused = bool((words[:, 0] == _REFUSED).any())
    if same[:-1].all() and not refused:
        return bool(same[-1])
    descriptions = values.allgather_json(group.comm, call.describe(),
                                         lambda request: wait(request, what))
    if refused:
        raise RankArgumentError(_refusal_message(group, descriptions))
    differing = [_FIELDS[i] for i in np.flatnonzero(~same[:-1])]
    raise AgreementError(_mismatch_message(group, differing, descriptions))


def inline_bytes(plan) -> int | None:
    """The payload bytes ``plan``'s arrays take in a row (each in its staging dtype,
    8-byte aligned), or None where they cannot go inline (GPU arrays, or too large)."""
    if plan.device or not all(isinstance(a, np.ndarray) for a in plan.items):
        return None
    total = sum(-(-a.size * STAGE_DTYPES[a.dtype].itemsize // 8) * 8 for a in plan.items)
    return total if total <= PAYLOAD_BYTES else None


class InlineCollective:
    """One collective on a small plan, its data sent inline in the agreement rows."""

    def __init__(self, plan, group, collective: Collective, division: bool, what):
        self.group = group
        self.collective = collective
        self.call = Call(collective.operation, group.name, plan.specs, collective.root,
                         division, specs_hash=plan.specs_hash, inline=True)
        self.channel = channel = group.channel
        self.entries = []  # (item, its part of this rank's row, that part of every row)
        start = SIGNATURE_BYTES
        for item in plan.items:
            stage = STAGE_DTYPES[item.dtype]
            stop = start + item.size * stage.itemsize
            self.entries.append((item, channel.row[start:stop].view(stage),
                                 [row[start:stop].view(stage) for row in channel.rows]))
            start += -(-(stop - start) // 8) * 8
        d = collective.divisor
        self.scale = None if d is None else [mine.dtype.type(1 / d) for _, mine, _ in self.entries]
        self.what = what  # names the call for the errors of a wait
        self.agreed = self.call.agreed(group.size)
        from mpi4py import MPI

        self.sum = MPI.SUM.Reduce_local  # MPI's arithmetic, as on the path that is not inline
        # with two ranks a + b == b + a, bit for bit: add the other's part into the item
        self.other = (1 - group.rank if group.size == 2 and d is None
                      and collective.operation != "bcast" else None)

    def run(self, wait) -> None:
        """Send this rank's data with its signature, check, and write the result;
        ``wait(request, what)`` is the agreement check's wait."""
        c = self.collective
        self.channel.settle_deferred()  # before this rank's row changes
        if c.sends:
            for item, mine, _ in self.entries:
                np.copyto(mine, item, casting="same_kind")
        wait(self.channel.start(self.call), self.what)
        if self.channel.signatures.tobytes() != self.agreed:
            compare_signatures(self.group, self.call, wait, self.what)  # raises
        if not c.receives:
            return
        for k, (item, mine, parts) in enumerate(self.entries):
            if c.operation == "bcast":
                np.copyto(item, parts[c.root], casting="same_kind")
            elif self.other is not None and mine.dtype == item.dtype:
                self.sum(parts[self.other], item)
            else:
                total = parts[-1]
                for part in parts[-2::-1]:  # MPI's own sum, in rank order, into the last part
                    self.sum(part, total)
                if self.scale is None:
                    np.copyto(item, total, casting="same_kind")
                else:
                    np.multiply(total, self.scale[k], out=item, casting="same_kind")


def _plain(value):
    """``value`` (``Call.arguments``: strings, numbers, None, tuples of them) as JSON values."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _ranks_name(group, ranks: list[int]) -> str:
    """Group ``ranks`` ("rank 1", "ranks 0, 2"), with their world ranks where they differ."""
    shown = ", ".join(str(r) for r in ranks)
    world = [group.ranks[r] for r in ranks]
    where = "" if world == ranks else (f" (world rank{'s' if len(ranks) > 1 else ''} "
                                       f"{', '.join(str(r) for r in world)})")
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{where}"


def _by_text(refused: list[tuple[int, str]]) -> list[tuple[list[int], str]]:
    """The refusing ranks grouped by their error text, in rank order of first appearance."""
    texts: dict[str, list[int]] = {}
    for rank, text in refused:
        texts.setdefault(text, []).append(rank)
    return [(ranks, text) for text, ranks in texts.items()]


def _refusal_message(group, descriptions: list[dict]) -> str:
    """The error of every rank where some refused their arguments: the refusing rank
    leads with its own error, the others with who refused and why (ranks that gave
    the same error named together)."""
    refused = [(r, d["refusal"]) for r, d in enumerate(descriptions) if d["refusal"]]
    operation = descriptions[refused[0][0]]["operation"]
    mine = descriptions[group.rank]["refusal"]
    if mine:
        others = [(r, text) for r, text in refused if r != group.rank]
        told = (f"(this rank, {_ranks_name(group, [group.rank])} of group {group.name!r}, told "
                "the other ranks of the group, which raise RankArgumentError too: nothing was "
                "sent and the communicator is still usable)")
        lines = [mine, told] + [
            f"  {_ranks_name(group, ranks)} refused {'its' if len(ranks) == 1 else 'their'} "
            f"arguments too: {text}" for ranks, text in _by_text(others)]
        return "\n".join(lines)
    who = _ranks_name(group, [r for r, _ in refused])
    head = (f"{operation} on group {group.name!r}: {who} refused "
            f"{'its' if len(refused) == 1 else 'their'} own arguments, so no rank sent anything "
            "(every rank of the group raises this error; the communicator is still usable):")
    return "\n".join([head] + [f"  {_ranks_name(group, ranks)}: {text}"
                               for ranks, text in _by_text(refused)])


def _mismatch_message(group, differing: list[str], descriptions: list[dict]) -> str:
    if all(d["operation"] == "new_group" for d in descriptions):
        differing = ["name and ranks" if f == "dtypes and shapes" else f for f in differing]
    lines = [(f"the ranks of group {group.name!r} called different collectives (they differ "
              f"in: {', '.join(differing)}):")]
    for rank, d in enumerate(descriptions):
        if d["operation"] == "new_group":
            name, ranks = d["arguments"]
            lines.append(f"  rank {rank}: new_group(({name!r}, {list(ranks)}))")
            continue
        specs = d["specs"]
        shown = ", ".join(_spec(spec) for spec in specs[:6])
        more = f", ... ({len(specs)} arrays)" if len(specs) > 6 else ""
        extra = []
        if d["root"] >= 0:
            extra.append(f"root={d['root']}")
        if d["operation"] in ("all_reduce", "reduce", "reduce_scatter", "all_reduce_callback"):
            extra.append(f"division={d['division']}")
        lines.append(f"  rank {rank}: {d['operation']}(group={d['group']!r}, "
                     f"[{shown}{more}]{''.join(', ' + e for e in extra)})")
    first = _first_differing_array(descriptions)
    if first:
        lines.append(f"  {first}")
    if "bucket size" in differing:
        lines.append("  bucket sizes differ: set comm.bucket_bytes (or DPNB_COMM_BUCKET_BYTES) "
                     "the same on every rank")
    lines.append("every rank of the group must call the same collective, in the same order, "
                 "with arrays of the same count, dtypes and shapes (new_group: every rank of "
                 "the world, with the same name and ranks)")
    return "\n".join(lines)


def _first_differing_array(descriptions: list[dict]) -> str:
    """Names the first array position where the ranks' dtypes or shapes differ."""
    lists = [d["specs"] for d in descriptions]
    for i in range(max(len(s) for s in lists)):
        entries = [s[i] if i < len(s) else None for s in lists]
        if any(e != entries[0] for e in entries):
            shown = "; ".join(f"rank {r}: " + ("(none)" if e is None else _spec(e))
                              for r, e in enumerate(entries))
            return f"first difference at array {i}: {shown}"
    return ""


def _spec(spec: tuple[str, tuple[int, ...]]) -> str:
    return f"{np.dtype(spec[0]).name}{list(spec[1])}"
