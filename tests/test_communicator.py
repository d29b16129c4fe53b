"""The MPI communicator, tested across real processes: each test starts one
mpiexec run of a script from tests/mpi_scripts (through dpnb.testing), whose
ranks compare every result with a NumPy reference and report their failures."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import dpnb as nn
import dpnb.communicators as C
from dpnb.errors import DpnbError
from dpnb.testing import assert_ranks_ok, check_ranks, run_script
from conftest import requires_nccl

SCRIPTS = Path(__file__).parent / "mpi_scripts"


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_against_numpy(n):
    check_ranks(n, SCRIPTS / "collectives.py")


@pytest.mark.parametrize("mode,check", [("timeout", "check"), ("timeout", "nocheck"),
                                        ("interrupt", "check"), ("interrupt", "nocheck")])
def test_waiting_rank_fails_cleanly(mode, check):
    """The last rank never joins: the others raise promptly and the communicator stays broken.

    Their collectives stay pending, so they end without MPI_Finalize and mpiexec
    kills the absent rank: the ranks' own reports decide, not the exit status."""
    n = 3
    run = run_script(n, SCRIPTS / "broken.py", mode, check)
    assert "Traceback" not in run.output, run.output
    assert_ranks_ok(run, range(n - 1), exit_status=False)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("mode", ["arguments", "new_group", "groups", "unknown", "interrupt",
                                  "absent", "funneled"])
def test_disagreements_raise_on_every_rank(mode, n):
    """A rank refusing its arguments, a mismatched new_group, ranks on different groups,
    an interrupted new_group: every rank raises within 2 s (the timeout is 30 s); a rank
    that never calls new_group: the others within their timeout."""
    check_ranks(n, SCRIPTS / "disagreements.py", mode)


@requires_nccl
def test_nccl_against_numpy():
    """One rank per GPU (one rank where there is one GPU) through NCCL: needs a real GPU."""
    import cupy

    n = min(2, cupy.cuda.runtime.getDeviceCount())
    check_ranks(n, SCRIPTS / "gpu.py", "nccl", timeout=120)


def test_gpu_arrays_over_mpi_against_numpy(gpu_environment):
    """CuPy arrays staged through the host over MPI, on two ranks: NCCL off where there
    is a GPU, the CuPy stand-in (which has no NCCL) where there is none."""
    check_ranks(2, SCRIPTS / "gpu.py", "mpi", timeout=120,
                env={**gpu_environment, "DPNB_COMM_NCCL": "0"})


def test_not_initialised():
    comm = C.MultiProcessCommunicator(nn.Context())
    for use in (lambda: comm.size, lambda: comm.rank, lambda: comm.all_reduce([]),
                lambda: comm.list_groups()):
        with pytest.raises(DpnbError, match=r"call comm.init\(\) first"):
            use()


def test_alias_and_defaults(monkeypatch):
    assert C.MultiProcessDataParallelCommunicator is C.MultiProcessCommunicator
    comm = C.MultiProcessCommunicator()
    assert comm.timeout == 600 and comm.check_agreement
    assert comm.ctx is nn.get_current_context()
    monkeypatch.setenv("DPNB_COMM_TIMEOUT", "2.5")
    monkeypatch.setenv("DPNB_COMM_CHECK", "0")
    monkeypatch.setenv("DPNB_COMM_BUCKET_BYTES", "1024")
    comm = C.MultiProcessCommunicator()
    assert (comm.timeout, comm.check_agreement, comm.bucket_bytes) == (2.5, False, 1024)
    with pytest.raises(DpnbError, match="comm.timeout must be a positive number"):
        comm.timeout = 0


@pytest.mark.parametrize("name,value,message", [
    ("DPNB_COMM_TIMEOUT", "soon", "DPNB_COMM_TIMEOUT must be a positive number"),
    ("DPNB_COMM_TIMEOUT", "0", "DPNB_COMM_TIMEOUT must be a positive number"),
    ("DPNB_COMM_CHECK", "maybe", "DPNB_COMM_CHECK must be 1 or 0"),
    ("DPNB_COMM_SEGMENT_BYTES", "-4", "DPNB_COMM_SEGMENT_BYTES must be a positive number"),
])
def test_bad_environment(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(DpnbError, match=message):
        C.MultiProcessCommunicator()


def test_find_mpiexec(monkeypatch, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    monkeypatch.setattr(sys, "executable", str(fake / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DpnbError, match=r"pip install 'dpnb\[mpich\]'"):
        C.find_mpiexec()
    (fake / "mpiexec").write_text("#!/bin/sh\n")
    (fake / "mpiexec").chmod(0o755)
    assert C.find_mpiexec() == str(fake / "mpiexec")


class _FakeInfo:
    def __init__(self, kinds):
        self.kinds, self.freed = kinds, False

    def Get(self, key):
        return self.kinds if key == "mpi_memory_alloc_kinds" else None

    def Free(self):
        self.freed = True


class _FakeComm:
    def __init__(self, kinds):
        self.info = _FakeInfo(kinds)

    def Get_info(self):
        return self.info


@pytest.mark.parametrize("kinds, aware", [("mpi,system", False), (None, False),
                                          ("mpi,system,cuda:device,cuda:managed", True)])
def test_cuda_aware_mpi_is_read_from_the_memory_allocation_kinds(kinds, aware):
    from dpnb.communicators._internal.mpi import cuda_aware_mpi
    from mpi4py import MPI

    comm = _FakeComm(kinds)
    assert cuda_aware_mpi(comm) is aware and comm.info.freed
    assert cuda_aware_mpi(MPI.COMM_SELF) is False  # the PyPI MPICH build has no CUDA support


def _entry(rank, group, sequence, counts=None):
    """A board entry: ``rank`` entered collective ``sequence`` of ``group`` last, and
    ``counts`` collectives of other groups (by name)."""
    from dpnb.communicators._internal.plan import stable_hash
    from dpnb.communicators._internal.status_board import Entry

    table = {stable_hash(name): k for name, k in (counts or {}).items()}
    table[stable_hash(group)] = sequence
    return Entry(rank, True, "all_reduce", group, stable_hash(group), sequence, 0.0, table)


def _groups(**ranks):
    from dpnb.communicators._internal.exchange import Group

    return {name: Group(name, members, None) for name, members in ranks.items()}


def test_deadlock_of_ranks_in_different_groups():
    from dpnb.communicators._internal.wait import deadlocked

    groups = _groups(world=[0, 1, 2], low=[0, 1])
    # rank 0 in world #5, rank 1 in low #2 (world: 4 entered), rank 2 in world #5 waits for 1
    entries = {0: _entry(0, "world", 5, {"low": 1}), 1: _entry(1, "low", 2, {"world": 4}),
               2: _entry(2, "world", 5)}
    assert deadlocked(entries, groups) == {0: [1], 1: [0], 2: [1]}
    # rank 0 took part in low #2 before world #5: rank 1 is only late, nobody is stuck
    entries[0] = _entry(0, "world", 5, {"low": 2})
    assert deadlocked(entries, groups) == {}
    # two ranks one call apart in the same group: the later one waits, nobody is stuck
    assert deadlocked({0: _entry(0, "world", 6), 1: _entry(1, "world", 5),
                     2: _entry(2, "world", 6)}, groups) == {}


def test_deadlock_needs_known_entries():
    from dpnb.communicators._internal.status_board import Entry
    from dpnb.communicators._internal.wait import deadlocked

    groups = _groups(world=[0, 1, 2], low=[0, 1])
    entries = {0: _entry(0, "world", 5, {"low": 1}), 1: _entry(1, "low", 2, {"world": 4}),
               2: Entry(2, reachable=False)}
    assert deadlocked(entries, groups) == {0: [1], 1: [0]}  # rank 2 unknown: no part of it
    # a rank waiting for one that cannot be read may yet be joined
    entries = {0: _entry(0, "world", 5), 1: Entry(1, reachable=False), 2: _entry(2, "world", 5)}
    assert deadlocked(entries, groups) == {}
    # a group this rank does not know: no conclusion about the rank in it
    entries = {0: _entry(0, "world", 5, {"low": 1}), 1: _entry(1, "other", 1, {"world": 4}),
               2: _entry(2, "world", 5)}
    assert deadlocked(entries, groups) == {}
