"""Small collectives carried by the agreement check itself.

Where the agreement check is on and a call's data are small (they fit in the
payload of an agreement row, ``agreement.PAYLOAD_BYTES``), every rank puts its
data beside its signature and the one Allgather of the rows does both jobs:
each rank checks the signatures, then sums (or, for bcast, copies) the rows'
payloads itself.  One collective instead of two: for a one-element all_reduce
most of the cost.  Every rank reads the same rows and sums them in rank order,
so every rank gets the same bits; a mismatch raises on every rank before any
result is written.  Whether a call is carried depends only on what the
signature compares (dtypes, shapes, NumPy arrays), and the signature says so,
so ranks never disagree about it silently."""
from __future__ import annotations

import numpy as np

from . import agreement
from .agreement import Call
from .collective import Collective
from .plan import STAGE_DTYPES, Plan


def carried_bytes(plan: Plan) -> int | None:
    """The payload bytes ``plan``'s arrays take in a row (each in its staging dtype,
    8-byte aligned), or None where they cannot be carried (GPU arrays, or too large)."""
    if plan.device or not all(isinstance(a, np.ndarray) for a in plan.items):
        return None
    total = sum(-(-a.size * STAGE_DTYPES[a.dtype].itemsize // 8) * 8 for a in plan.items)
    return total if total <= agreement.PAYLOAD_BYTES else None


class Carried:
    """One collective on a small plan, its data carried in the agreement rows."""

    def __init__(self, plan: Plan, group, collective: Collective, division: bool, what):
        self.group = group
        self.collective = collective
        self.call = Call(collective.operation, group.name, plan.specs, collective.root,
                         division, specs_hash=plan.specs_hash, carried=True)
        self.channel = channel = group.channel
        self.entries = []  # (item, its part of this rank's row, that part of every row)
        start = agreement.SIGNATURE_BYTES
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

        self.sum = MPI.SUM.Reduce_local  # MPI's arithmetic, as in the uncarried path
        # with two ranks a + b == b + a, bit for bit: add the other's part into the item
        self.other = (1 - group.rank if group.size == 2 and d is None
                      and collective.operation != "bcast" else None)

    def run(self, wait) -> None:
        """Send this rank's data with its signature, check, and write the result;
        ``wait(request, what)`` is the agreement check's wait."""
        c = self.collective
        if c.sends:
            for item, mine, _ in self.entries:
                np.copyto(mine, item, casting="same_kind")
        wait(self.channel.start(self.call), self.what)
        if self.channel.signatures.tobytes() != self.agreed:
            agreement.verdict(self.group, self.call, wait, self.what)  # raises
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
