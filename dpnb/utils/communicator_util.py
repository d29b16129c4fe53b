"""nnabla's ``communicator_util``: one communicator per MPI job, made where the
program was started by an MPI launcher, and a test for "this process speaks"."""
from __future__ import annotations

import os

from ..communicators import MultiProcessCommunicator
from ..ext_utils import get_extension_context
from ..logger import logger

# What MPI launchers export to every process: Open MPI, MPICH's Hydra (and
# Intel MPI), PMIx-based launchers (srun --mpi=pmix, prterun).
_WORLD_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")

_current_communicator: MultiProcessCommunicator | None = None


def launched_by_mpi(environ=os.environ) -> bool:
    """Whether an MPI launcher (mpiexec, mpirun, srun) started this process."""
    return any(name in environ for name in _WORLD_SIZE_VARIABLES)


def current_communicator() -> MultiProcessCommunicator | None:
    return _current_communicator


def create_communicator(ignore_error: bool = False, extension_module: str = "cudnn",
                        type_config: str = "float") -> MultiProcessCommunicator | None:
    """An initialised communicator for a job of several processes, else None.

    nnabla's helper (``nnabla.utils.communicator_util``).  Unlike nnabla's, it
    recognises any MPI launcher (Open MPI, MPICH's Hydra, PMIx).

    Parameters
    ----------
    ignore_error : bool
        Log a warning and return None where the communicator cannot be made (no
        GPU for "cudnn", no MPI), instead of raising.
    extension_module : str
        ``"cpu"``, ``"cuda"`` or ``"cudnn"``: the context of the communicator.
    type_config : str
        The context's type (``"float"``, ``"half"``, ``"double"``).

    Returns
    -------
    MultiProcessCommunicator or None
        None when the program was not started by an MPI launcher or runs as one
        process, as in nnabla.
    """
    global _current_communicator
    _current_communicator = None
    if not launched_by_mpi():
        return None
    try:
        context = get_extension_context(extension_module, type_config=type_config)
        comm = MultiProcessCommunicator(context)
        comm.init()
    except Exception as e:
        if not ignore_error:
            raise
        logger.warning("Failed to initialize the communicator (%s); running as one process", e)
        return None
    if comm.size > 1:
        _current_communicator = comm
    return _current_communicator


def single_or_rankzero() -> bool:
    """True in a single-process run and on rank 0: where a program logs and saves."""
    return _current_communicator is None or _current_communicator.rank == 0
