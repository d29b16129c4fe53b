"""Engine entry point, ``python -m dpnb.cluster.engine [ipengine options]``.

One MPI rank becomes one IPython-parallel engine whose engine id is its MPI
rank.  Before the engine starts, the rank takes GPU ``local_rank`` as its
default device and limits BLAS/OpenMP threads to its share of the host's
cores, so that ranks on one host do not oversubscribe it, and ``nnabla`` names
resolve to dpnb where the real nnabla is not installed."""
from __future__ import annotations

import os
import re
import sys

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
_REEXEC_MARK = "DPNB_ENGINE_REEXEC"
# set by the launcher of a one-host cluster: every rank runs here, so PMI's rank and size
# are the local ones (MPICH's gforker exports no local rank)
ONE_HOST_ENV = "DPNB_ONE_HOST"


def _slurm_tasks_on_node(tasks_per_node: str, node_id: int) -> int | None:
    """Tasks on node ``node_id`` from Slurm's compressed ``SLURM_TASKS_PER_NODE`` ("2(x3),1")."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node_id] if 0 <= node_id < len(counts) else None


def local_rank_from_env(environ=os.environ) -> tuple[int, int] | None:
    """(local rank, ranks on this host) as MPICH, Open MPI or Slurm export them, or
    PMI's rank and size on a one-host cluster; else None."""
    pairs = (("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
             ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))
    if environ.get(ONE_HOST_ENV) == "1":
        pairs += (("PMI_RANK", "PMI_SIZE"),)
    for rank_var, size_var in pairs:
        if rank_var in environ and size_var in environ:
            return int(environ[rank_var]), int(environ[size_var])
    if "SLURM_LOCALID" in environ and "SLURM_TASKS_PER_NODE" in environ:
        size = _slurm_tasks_on_node(environ["SLURM_TASKS_PER_NODE"],
                                    int(environ.get("SLURM_NODEID", 0)))
        if size is not None:
            return int(environ["SLURM_LOCALID"]), size
    return None


def local_rank_from_mpi(comm) -> tuple[int, int]:
    """(local rank, ranks on this host) by splitting ``comm`` into shared-memory groups."""
    from mpi4py import MPI

    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return shared.Get_rank(), shared.Get_size()
    finally:
        shared.Free()


def host_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def thread_settings(local_size: int, environ=os.environ) -> dict[str, str]:
    """Thread-count variables to set: cores / local ranks, for those the user did not set."""
    threads = str(max(1, host_cores() // max(1, local_size)))
    return {name: threads for name in THREAD_VARIABLES if name not in environ}


def _limit_threads(local_size: int) -> None:
    """Set the thread variables; re-execute once if NumPy already loaded its BLAS.

    BLAS libraries read these variables when they load, and ``python -m
    dpnb.cluster.engine`` has imported NumPy (through ``dpnb``) before this runs, so
    the process starts itself again, before MPI is initialised, with them set."""
    settings = thread_settings(local_size)
    if not settings:
        return
    os.environ.update(settings)
    if "numpy" in sys.modules and _REEXEC_MARK not in os.environ:
        os.environ[_REEXEC_MARK] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "dpnb.cluster.engine", *sys.argv[1:]])


def use_local_gpu(local_rank: int) -> str:
    """Make GPU ``local_rank`` CuPy's current device; "cpu" where there is no usable GPU."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # CuPy missing or no CUDA driver: a CPU engine
        return "cpu"
    if count == 0:
        return "cpu"
    device = local_rank % count
    cupy.cuda.Device(device).use()
    return f"gpu:{device}"


def _stand_in_for_nnabla() -> None:
    """Let the user's ``import nnabla`` lines give dpnb (unless the real nnabla is
    installed), and feed their ``MonitorSeries`` losses to the notebook's progress:
    dpnb's, or the real nnabla's once the program imports ``nnabla.monitor``."""
    from ...monitor import add_series_listener
    from ...nnabla_alias import use_as_nnabla_unless_installed
    from .calls import SeriesFeed
    from .nnabla_programs import follow_nnabla_monitor_series

    if not use_as_nnabla_unless_installed():
        follow_nnabla_monitor_series()
    add_series_listener(SeriesFeed())


def main(argv: list[str] | None = None) -> None:
    """Prepare this rank (threads, GPU) and run an MPI-enabled ipyparallel engine."""
    argv = list(sys.argv[1:] if argv is None else argv)
    local = local_rank_from_env()
    if local is not None:
        _limit_threads(local[1])
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if local is None:
        # MPI is up, so no second start: the variables reach what reads them later
        # (OpenMP runtimes, child processes), not the BLAS NumPy already loaded.
        local = local_rank_from_mpi(world)
        os.environ.update(thread_settings(local[1]))
    local_rank, local_size = local
    device = use_local_gpu(local_rank)
    os.environ.update(DPNB_RANK=str(rank), DPNB_SIZE=str(size), DPNB_LOCAL_RANK=str(local_rank),
                      DPNB_LOCAL_SIZE=str(local_size), DPNB_DEVICE=device)

    _stand_in_for_nnabla()
    from .stack_dumps import install

    install()  # dpnb.where() asks busy engines for their stacks with a signal
    from ipyparallel.engine.app import IPEngine

    namespace = {"rank": rank, "size": size, "local_rank": local_rank}
    app = IPEngine.instance(use_mpi=True, id=rank, user_ns=namespace)
    app.initialize(argv)
    # the shell exists once the engine has registered; its start-up lines run then
    app.config.IPKernelApp.exec_lines.append(
        '__import__("dpnb.cluster.engine.brief_errors").cluster.engine.brief_errors.install(get_ipython())')
    app.start()
