"""The agreement check: before a collective, the ranks of a group compare what
they are about to do with one small collective, so that mismatched calls
raise the same clear error everywhere instead of hanging or mixing up memory.

Each rank contributes a row of ``ROW_BYTES``: a short int64 signature, then
room for a small payload (carried.py puts the data of small collectives there,
so that they take one collective, not two).  One Allgather of the rows, the
same size on every rank whatever the call, gives every rank every signature:
they agree where all rows start alike, and since every rank reads the same
rows, every rank reaches the same verdict.  Only on a mismatch are the full
descriptions gathered (with pickle, on this error path only)."""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from ..errors import AgreementError

_MAGIC = 0x64706E62  # "dpnb": tells our check from foreign traffic on the same communicator
OPERATIONS = ("barrier", "all_reduce", "reduce", "bcast", "all_gather", "reduce_scatter",
              "all_reduce_callback")
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

    def __post_init__(self):
        if self.specs_hash < 0:
            self.specs_hash = stable_hash(self.specs)
        total = sum(int(np.prod(shape, dtype=np.int64)) for _, shape in self.specs)
        sig = np.array([_MAGIC, OPERATIONS.index(self.operation), stable_hash(self.group),
                        len(self.specs), self.root, int(self.division), total,
                        self.bucket_bytes, self.specs_hash, int(self.carried), self.layout],
                       dtype=np.int64)
        self.expected = sig.tobytes()  # how every row starts when all ranks agree
        self.row = np.zeros(ROW_BYTES, np.uint8)
        self.row[:SIGNATURE_BYTES] = np.frombuffer(self.expected, np.uint8)
        self._rows: np.ndarray | None = None

    def rows(self, size: int) -> np.ndarray:
        """The receive buffer of the Allgather: one row per rank of a group of ``size``."""
        if self._rows is None or len(self._rows) != size:
            self._rows = np.empty((size, ROW_BYTES), np.uint8)
            self._signatures = self._rows[:, :SIGNATURE_BYTES]
            self.expected_rows = self.expected * size  # the signatures when all ranks agree
        return self._rows

    def signatures(self, rows: np.ndarray) -> np.ndarray:
        """The signature part of each of ``rows`` (those of ``rows(size)``)."""
        return self._signatures if rows is self._rows else rows[:, :SIGNATURE_BYTES]

    def describe(self) -> dict:
        return {"operation": self.operation, "group": self.group, "specs": self.specs,
                "root": self.root, "division": self.division,
                "bucket bytes": self.bucket_bytes}


def agree(group, call: Call, wait, what) -> bool:
    """Check that every rank of ``group`` makes the same ``call``.

    Returns whether the memory layouts agree too (if not, every rank takes the
    layout-independent path).  Raises ``AgreementError`` on every rank, with
    the same message, if anything else differs.  ``wait(request, what)``
    waits interruptibly; ``what()`` names the call for its errors."""
    rows = call.rows(group.size)
    wait(group.comm.Iallgather(call.row, rows), what)
    return verdict(group, call, rows)


def verdict(group, call: Call, rows: np.ndarray) -> bool:
    """From the gathered ``rows``: True if every rank made ``call``, False if only
    the memory layouts differ; else raises ``AgreementError`` (the same on every rank)."""
    signatures = call.signatures(rows)
    if signatures.tobytes() == call.expected_rows:
        return True
    words = signatures.view(np.int64)
    same = (words == words[0]).all(axis=0)
    if same[:-1].all():
        return bool(same[-1])
    differing = [_FIELDS[i] for i in np.flatnonzero(~same[:-1])]
    descriptions = group.comm.allgather(call.describe())
    raise AgreementError(_mismatch_message(group, differing, descriptions))


def _mismatch_message(group, differing: list[str], descriptions: list[dict]) -> str:
    lines = [f"the ranks of group {group.name!r} called different collectives "
             f"(they differ in: {', '.join(differing)}):"]
    for rank, d in enumerate(descriptions):
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
                 "with arrays of the same count, dtypes and shapes")
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
