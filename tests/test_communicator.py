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
from conftest import requires_gpu

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


@requires_gpu
def test_nccl_against_numpy():
    """One rank per GPU (one rank where there is one GPU) through NCCL."""
    import cupy

    n = min(2, cupy.cuda.runtime.getDeviceCount())
    check_ranks(n, SCRIPTS / "gpu.py", timeout=120)


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
    from dpnb.communicators.mpi import cuda_aware_mpi
    from mpi4py import MPI

    comm = _FakeComm(kinds)
    assert cuda_aware_mpi(comm) is aware and comm.info.freed
    assert cuda_aware_mpi(MPI.COMM_SELF) is False  # the PyPI MPICH build has no CUDA support
