"""Communicators for data-parallel training (``import dpnb.communicators as C``).

``C.MultiProcessCommunicator(ctx)`` runs collectives between the processes of
an MPI job (one per device), with nnabla's API: over MPI, and over NCCL for
GPU arrays where CuPy has it.  ``comm.gradient_reducer(solver)`` owns the
exchange of a solver's gradients.

Public here: the names below, and the modules beside this one (communicator,
reducer, settings: the ``DPNB_COMM_*`` variables and their table, mpiexec,
values: JSON between ranks without pickles).  Everything under ``_internal``
is the communicator's machinery, used only by this package (and dpnb's tests)."""
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
