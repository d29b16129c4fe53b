"""Communicators for data-parallel training (``import dpnb.communicators as C``).

``C.MultiProcessCommunicator(ctx)`` runs collectives between the processes of
an MPI job (one per device), with nnabla's API: over MPI, and over NCCL for
GPU arrays where CuPy has it."""
from .agreement import AgreementError
from .callback import AllReduceCallback
from .communicator import (MultiProcessCommunicator, MultiProcessDataParalellCommunicator,
                           MultiProcessDataParallelCommunicator)
from .mpiexec import find_mpiexec
from .wait import CommunicatorError, CommunicatorInterrupted, CommunicatorTimeout

__all__ = [
    "AgreementError", "AllReduceCallback", "CommunicatorError", "CommunicatorInterrupted",
    "CommunicatorTimeout", "MultiProcessCommunicator", "MultiProcessDataParalellCommunicator",
    "MultiProcessDataParallelCommunicator", "find_mpiexec",
]
