"""The gradient reducer across real MPI processes (tests/mpi_scripts/reducer.py):
against comm.all_reduce and NumPy references, after and during backward, in
and out of storage order, with storage growth between steps, and the plans
and collectives of each step of a sync-BN network."""
from __future__ import annotations

from pathlib import Path

import pytest

from dpnb.testing import check_ranks

SCRIPTS = Path(__file__).parent / "mpi_scripts"


@pytest.mark.parametrize("n", [2, 3])
def test_reducer_against_all_reduce_and_numpy(n):
    check_ranks(n, SCRIPTS / "reducer.py", timeout=120)
