"""dpnb's MPI engines: across hosts, ipyparallel's mpiexec launcher as it is; on one host
(no hostfile, no ``-hosts``), one where nothing of MPI listens beyond 127.0.0.1.

hydra's mpiexec listens for its proxies on every interface (no option binds its
control port to one address), and MPICH's netmods (UCX, libfabric) listen on the host's
external addresses; MPI's traffic is not authenticated.  One host needs neither:
MPICH's gforker (``mpiexec.gforker``, beside ``mpiexec`` in the ``mpich`` wheel) forks
the ranks itself and speaks PMI with them over inherited sockets, and the netmods are
kept to the loopback interface.  Clusters across hosts keep hydra."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ipyparallel.cluster.launcher import MPIEngineSetLauncher
from traitlets import Dict, default

from .engine.start import ONE_HOST_ENV

# mpiexec's options that place ranks on other hosts (hydra's spellings)
HOST_OPTIONS = frozenset({"-f", "-hostfile", "-machinefile", "-hosts", "-host", "-hostlist"})


def one_host(mpi_args: Sequence[str], environ: Mapping[str, str] = os.environ) -> bool:
    """Whether mpiexec with ``mpi_args`` starts every rank on this host."""
    return "HYDRA_HOST_FILE" not in environ and not HOST_OPTIONS.intersection(mpi_args)


def local_mpiexec(mpiexec: str) -> str:
    """MPICH's gforker beside ``mpiexec`` where mpi4py's MPI library is MPICH, else
    ``mpiexec`` (hydra, or another MPI's launcher)."""
    from .checks import check_mpi_library

    forker = os.path.join(os.path.dirname(os.path.realpath(mpiexec)), "mpiexec.gforker")
    if check_mpi_library().detail.startswith("MPICH") and os.access(forker, os.X_OK):
        return forker
    return mpiexec


def loopback_interface() -> str:
    """The name of the network interface that holds 127.0.0.1 ("lo" on Linux)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addresses):
            return name
    return "lo"


class MPIEngines(MPIEngineSetLauncher):
    """One engine per MPI rank; on one host with MPICH's gforker and MPI's sockets on the
    loopback interface, where ``mpi_args`` and the environment name no other host."""

    # how ipyparallel names the class in cluster files and finds it again
    entrypoint_name = f"{__name__}.MPIEngines"

    loopback_env = Dict(config=True, help="variables that keep MPICH's netmods (UCX, "
                                          "libfabric's tcp and sockets providers) on the "
                                          "loopback interface on one host; the user's own "
                                          "settings win")

    @default("loopback_env")
    def _loopback_env(self):
        lo = loopback_interface()
        return {"UCX_NET_DEVICES": lo, "FI_TCP_IFACE": lo, "FI_SOCKETS_IFACE": lo}

    @property
    def one_host(self) -> bool:
        return one_host(self.mpi_args, {**os.environ, **self.environment})

    def find_args(self):
        args = super().find_args()
        if self.one_host:
            args[0] = local_mpiexec(args[0])
        return args

    def get_env(self):
        if not self.one_host:
            return super().get_env()
        env = {k: v for k, v in self.loopback_env.items() if k not in os.environ}
        env[ONE_HOST_ENV] = "1"
        env.update(super().get_env())
        return env
