"""The communicator frees what each call's plan made: run on 2 real MPI ranks
(tests/mpi_scripts/memory.py), all_reduce of small arrays new on every call."""
from __future__ import annotations

from pathlib import Path

from dpnb.testing import check_ranks

SCRIPTS = Path(__file__).parent / "mpi_scripts"


def test_packed_all_reduce_frees_its_datatypes():
    check_ranks(2, SCRIPTS / "memory.py", timeout=300)
