"""The agreement check: before a collective, the ranks of a group compare what
they are about to do with one small collective, so that mismatched calls
raise the same clear error everywhere instead of hanging or mixing up memory.

Each rank contributes a row of ``ROW_BYTES``: a short int64 signature, then
room for a small payload (carried.py puts the data of small collectives there,
so that they take one collective, not two).  One Allgather of the rows, the
same size on every rank whatever the call (a persistent request of the
group's ``Channel``), gives every rank every signature:
they agree where all rows start alike, and since every rank reads the same
rows, every rank reaches the same verdict.  Only on a mismatch are the full
descriptions gathered (as JSON, on this error path only, through the same
bounded, interruptible waits).

A rank whose own arguments fail their checks still takes part: its row says
so (a ``refusal`` call), and every rank of the group raises
``RankArgumentError`` naming it and its error, before anything is sent,
instead of waiting for it.  ``new_group`` is agreed on the same way, its name
and ranks in ``Call.arguments``."""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from ..errors import AgreementError, DpnbError, RankArgumentError
from . import values

_MAGIC = 0x64706E62  # "dpnb": tells our check from foreign traffic on the same communicator
_REFUSED = 0x64706E63  # the first word of a row whose rank refused its own arguments
OPERATIONS = ("barrier", "all_reduce", "reduce", "bcast", "all_gather", "reduce_scatter",
              "all_reduce_callback", "new_group")
_FIELDS = ("protocol", "operation", "group", "array count", "root", "division",
           "total elements", "bucket size", "dtypes and shapes",
           "path (data carried with the check or not)")
SIGNATURE_BYTES = 8 * (len(_FIELDS) + 1)  # the fields and the memory layout, as int64
ROW_BYTES = 256                           # what each rank sends: signature, then payload
PAYLOAD_BYTES = ROW_BYTES - SIGNATURE_BYTES


def stable_hash(value) -> int:
    """A non-negative 62-bit hash of ``repr(value)``, the same in every process
    (Python's ``hash`` of strings differs between processes)."""
    digest = hashlib.blake2b(repr(value).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


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
    carried: bool = False  # the data travel in the payload of the rows (carried.py)
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
                        self.bucket_bytes, self.specs_hash, int(self.carried), self.layout],
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
    (about 0.9 us of 1.8 us on two ranks here).  A group has one check at a time."""

    def __init__(self, comm, size: int):
        self.comm = comm
        self.size = size
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
        self._head[:] = call.expected
        if self._request is None:
            return self.comm.Iallgather(self.row, self.rows)
        self._request.Start()
        return self._request


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
            or verdict(group, call, wait, what))


def refusal(operation: str, group: str, error: BaseException) -> Call:
    """The call of a rank that cannot make ``operation`` on ``group`` because its own
    arguments failed their checks (``error``): agreeing with it makes every rank raise."""
    text = str(error) if isinstance(error, DpnbError) else f"{type(error).__name__}: {error}"
    return Call(operation, group, [], refusal=text or type(error).__name__)


def verdict(group, call: Call, wait, what) -> bool:
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
