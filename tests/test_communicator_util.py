"""nnabla's communicator_util without an MPI job: when no communicator is made, and
what a failure to make one gives with and without ignore_error; and the
communicator's get_all_reduce_callback refusing a network with no parameters."""
import logging
import sys

import pytest

import dpnb.communicators as C
from dpnb.errors import DpnbError, ExtensionUnavailableError
from dpnb.utils import communicator_util as cu


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_no_mpi_launcher_no_communicator(clean_env):
    assert not cu.launched_by_mpi()
    assert cu.create_communicator(extension_module="cpu") is None
    assert cu.current_communicator() is None and cu.single_or_rankzero()


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"])
def test_each_launcher_is_recognised(clean_env, variable):
    clean_env.setenv(variable, "2")
    assert cu.launched_by_mpi()


def test_a_failure_raises_or_with_ignore_error_warns_and_gives_none(clean_env, caplog,
                                                                    monkeypatch):
    clean_env.setenv("PMI_SIZE", "2")
    monkeypatch.setitem(sys.modules, "cupy", None)  # no GPU for "cudnn"
    with pytest.raises(ExtensionUnavailableError, match="dpnb\\[gpu\\]"):
        cu.create_communicator()
    with caplog.at_level(logging.WARNING, logger="nnabla"):
        assert cu.create_communicator(ignore_error=True) is None
    assert "Failed to initialize the communicator" in caplog.text
    assert cu.current_communicator() is None and cu.single_or_rankzero()


def test_get_all_reduce_callback_needs_parameters():
    comm = C.MultiProcessCommunicator()
    with pytest.raises(DpnbError, match="no parameters to reduce; build the network"):
        comm.get_all_reduce_callback()


@pytest.mark.parametrize("operation,size,division,expected", [
    ("all_reduce", 2, True, True), ("all_reduce", 4, True, True), ("all_reduce", 1, True, True),
    ("all_reduce", 3, True, False), ("all_reduce", 2, False, False), ("reduce", 2, True, False)])
def test_inputs_are_scaled_before_the_sum_only_where_the_bits_are_the_same(operation, size,
                                                                           division, expected):
    from dpnb.communicators._internal.plan import Collective

    assert Collective.of(operation, 0, size, 0, division).scales_inputs is expected


def test_an_agreement_wait_interrupted_raises_the_communicator_error_and_breaks_it():
    from dpnb.communicators._internal.wait import Guard
    from dpnb.communicators.settings import Settings
    from dpnb.errors import CommunicatorError, CommunicatorInterrupted

    class Interrupting:
        def Test(self):
            raise KeyboardInterrupt

    class Done:
        def Test(self):
            return True

    guard = Guard(Settings(timeout=5.0))
    guard.wait_agreement(Done(), lambda: "all_reduce")
    assert guard.broken is None
    with pytest.raises(CommunicatorInterrupted, match="all_reduce: interrupted"):
        guard.wait_agreement(Interrupting(), lambda: "all_reduce")
    with pytest.raises(CommunicatorError, match="broken"):
        guard.check_usable()


def test_agreement_channel_falls_back_to_iallgather_before_mpi_4():
    """An MPI library without persistent collectives: each check posts an Iallgather of
    the same buffers, with the call's signature at the head of the row."""
    import numpy as np

    from dpnb.communicators._internal.agreement import SIGNATURE_BYTES, Call, Channel

    class OldComm:
        def __init__(self):
            self.posted = []

        def Allgather_init(self, row, rows):
            raise NotImplementedError("MPI_Allgather_init")

        def Iallgather(self, row, rows):
            self.posted.append((row, rows))
            return "request"

    comm = OldComm()
    channel = Channel(comm, 3)
    call = Call("all_reduce", "world", [("<f4", (2,))])
    assert channel.start(call) == "request"
    (row, rows), = comm.posted
    assert row is channel.row and rows is channel.rows and rows.shape[0] == 3
    assert bytes(row[:SIGNATURE_BYTES]) == call.expected
    assert np.all(row[SIGNATURE_BYTES:] == 0)
