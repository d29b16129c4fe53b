"""Synchronized batch normalization across real MPI processes: each rank holds
a slice of one global batch, and its results must be those of single-process
batch normalization of the whole batch (tests/mpi_scripts/sync_bn.py checks
them on every rank)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import requires_nccl

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from dpnb.testing import check_ranks

SCRIPTS = Path(__file__).parent / "mpi_scripts"


@pytest.mark.parametrize("n, jit", [(2, "1"), (3, "1"), (2, "0")])
def test_matches_batch_normalization_of_the_global_batch(n, jit):
    """Through the compiled kernels (float64 sums of their own) and through NumPy alone."""
    check_ranks(n, SCRIPTS / "sync_bn.py", env={"DPNB_JIT": jit})


@requires_nccl
def test_gpu_matches_batch_normalization_of_the_global_batch():
    """One rank per GPU (one rank where there is one GPU), through NCCL: needs a real GPU."""
    import cupy

    n = min(2, cupy.cuda.runtime.getDeviceCount())
    check_ranks(n, SCRIPTS / "sync_bn.py", "cudnn", timeout=120)


def test_gpu_arrays_over_mpi_match_batch_normalization_of_the_global_batch(gpu_environment):
    """CuPy arrays on two ranks, their statistics staged through the host over MPI: NCCL
    off where there is a GPU, the CuPy stand-in where there is none."""
    check_ranks(2, SCRIPTS / "sync_bn.py", "cudnn", timeout=120,
                env={**gpu_environment, "DPNB_COMM_NCCL": "0"})


def bn_inputs() -> list:
    rng = np.random.RandomState(0)
    return [nn.Variable.from_numpy_array(a) for a in
            [rng.randn(4, 3), np.zeros((1, 3)), np.ones((1, 3)), np.zeros((1, 3)), np.ones((1, 3))]]


@pytest.mark.parametrize("comm", ["world", None, object()])
def test_comm_must_be_a_communicator(comm):
    message = r"comm must be a communicator \(C.MultiProcessCommunicator\(ctx\), then comm.init"
    with pytest.raises(DpnbError, match=message):
        F.sync_batch_normalization(*bn_inputs(), comm)
    with pytest.raises(DpnbError, match="comm must be a communicator"):
        PF.sync_batch_normalization(bn_inputs()[0], comm)


def test_comm_must_be_initialised():
    comm = C.MultiProcessCommunicator(nn.Context())
    with pytest.raises(DpnbError, match=r"call comm.init\(\) first"):
        F.sync_batch_normalization(*bn_inputs(), comm, batch_stat=False)
