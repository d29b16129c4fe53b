"""The communicator frees what each call's plan made: run on 2 real MPI ranks
(tests/mpi_scripts/memory.py), all_reduce of small arrays new on every call."""
from __future__ import annotations

from ranks import check_ranks


def test_packed_all_reduce_frees_its_datatypes():
    check_ranks(2, "memory.py", timeout=300)
