"""Finding ``mpiexec``: the ``mpich`` wheel installs it beside the environment's
Python, which is not on PATH unless the environment is activated."""
from __future__ import annotations

import os
import shutil
import sys

from ..errors import DpnbError


def find_mpiexec() -> str:
    """Path of ``mpiexec``: beside the running Python first, then on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found:
        return found
    raise DpnbError(f"mpiexec was found neither beside {sys.executable} nor on PATH; install an "
                    "MPI runtime into this environment with `pip install 'dpnb[mpich]'`")
