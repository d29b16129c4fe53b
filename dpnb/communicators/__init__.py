"""Communicators for data-parallel training (``import dpnb.communicators as C``).

``C.MultiProcessCommunicator(ctx)`` runs collectives between the processes of
an MPI job (one per device), with nnabla's API: over MPI, and over NCCL for
GPU arrays where CuPy has it.  ``comm.gradient_reducer(solver)`` owns the
exchange of a solver's gradients."""
from ..errors import (AgreementError, CommunicatorError, CommunicatorInterrupted,
                      CommunicatorTimeout, RankArgumentError)
from .communicator import (MultiProcessCommunicator, MultiProcessDataParalellCommunicator,
                           MultiProcessDataParallelCommunicator)
from .mpiexec import find_mpiexec
from .reducer import GradientReducer

__all__ = [
    "AgreementError", "CommunicatorError", "CommunicatorInterrupted", "CommunicatorTimeout",
    "GradientReducer", "MultiProcessCommunicator", "MultiProcessDataParalellCommunicator",
    "MultiProcessDataParallelCommunicator", "RankArgumentError", "find_mpiexec",
]
