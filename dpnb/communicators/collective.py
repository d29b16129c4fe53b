"""A collective described once, as a value: which operation, which root, and
what this rank does in it (sends, receives, divides by what).  The MPI and
NCCL transports both read it, so the rules live here only."""
from __future__ import annotations

import dataclasses

DATA_OPERATIONS = ("all_reduce", "reduce", "bcast")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One rank's part in a data collective of a group."""

    operation: str          # "all_reduce", "reduce" or "bcast"
    root: int               # group rank of the root (-1 for all_reduce)
    sends: bool             # this rank's data goes into the result
    receives: bool          # this rank's arrays are overwritten with the result
    divisor: int | None     # what a received result is divided by (division=True)

    @property
    def scales_inputs(self) -> bool:
        """Whether each rank may scale its own data by ``1 / divisor`` before the sum
        instead of the result after it: for all_reduce (every rank sends and receives)
        by a power of two, where both give the same bits (scaling by a power of two
        commutes with rounding, subnormals apart)."""
        d = self.divisor
        return self.operation == "all_reduce" and d is not None and d & (d - 1) == 0

    @classmethod
    def of(cls, operation: str, rank: int, size: int, root: int = -1,
           division: bool = False) -> "Collective":
        """This rank's (group rank ``rank`` of ``size``) part in ``operation``."""
        if operation not in DATA_OPERATIONS:
            raise ValueError(f"not a data collective: {operation!r}")
        sends = operation != "bcast" or rank == root
        receives = (operation == "all_reduce" or (operation == "reduce" and rank == root)
                    or (operation == "bcast" and rank != root))
        return cls(operation, root, sends, receives, size if division and receives else None)
