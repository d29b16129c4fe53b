"""What a cluster needs before anything starts: mpiexec, mpi4py, an MPI library and
ipyparallel, and options that make sense together.

Each prerequisite's check answers (found, detail, fix) so that the launcher can fail
early with the fixing command and ``dpnb doctor`` can print them all; the options'
checks raise a DpnbError saying what to give instead."""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import subprocess
import sys
from collections.abc import Sequence

from ..errors import DpnbError

_MPI_FIX = "pip install 'dpnb[mpich]'   (mpi4py and the MPICH runtime, into this environment)"


@dataclasses.dataclass
class Check:
    """One prerequisite: whether it was found, what was found, and the command that fixes it."""

    name: str
    found: bool
    detail: str
    fix: str = ""
    required: bool = True


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_mpi4py() -> Check:
    if importlib.util.find_spec("mpi4py") is None:
        return Check("mpi4py", False, "not installed", _MPI_FIX)
    return Check("mpi4py", True, _version("mpi4py") or "installed")


@functools.lru_cache(maxsize=1)
def check_mpi_library() -> Check:
    """Load the MPI library in a child process (the notebook itself must not initialise MPI)."""
    if importlib.util.find_spec("mpi4py") is None:
        return Check("MPI library", False, "mpi4py is missing, so no MPI library can be loaded",
                     _MPI_FIX)
    code = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(' '.join(MPI.Get_library_version().splitlines()[0].split()))")
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        return Check("MPI library", False, "loading it took over 60 s", _MPI_FIX)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no error output"])[-1]
        return Check("MPI library", False, f"mpi4py cannot load it: {last}", _MPI_FIX)
    return Check("MPI library", True, run.stdout.strip())


def check_mpiexec() -> Check:
    from ..communicators.mpiexec import find_mpiexec

    try:
        path = find_mpiexec()
    except DpnbError:
        return Check("mpiexec", False, f"neither beside {sys.executable} nor on PATH", _MPI_FIX)
    try:
        run = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        first = next((" ".join(line.split()) for line in run.stdout.splitlines()
                      if any(ch.isdigit() for ch in line)), "")
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("mpiexec", False, f"{path} does not run: {e}", _MPI_FIX)
    return Check("mpiexec", True, f"{path} ({first})" if first else path)


def check_ipyparallel() -> Check:
    """ipyparallel of the major version dpnb was tested with, and what dpnb uses of it
    and of IPython beyond their documented API (``internals``)."""
    version = _version("ipyparallel")
    fix = "pip install 'dpnb[cluster]'   (ipyparallel>=9,<10, ipython<10)"
    if version is None:
        return Check("ipyparallel", False, "not installed", fix)
    if int(version.split(".")[0]) != 9:
        return Check("ipyparallel", False, f"version {version}; dpnb works with 9.x", fix)
    from .internals import missing

    gone = missing()
    if gone:
        return Check("ipyparallel", False, f"version {version}, but " + "; ".join(gone), fix)
    return Check("ipyparallel", True, version)


def check_gpu() -> list[Check]:
    """CuPy, the visible GPUs and NCCL; optional, a CPU-only machine needs none of them."""
    fix = "pip install 'dpnb[gpu]'   (cupy-cuda12x; needs an NVIDIA driver)"
    if importlib.util.find_spec("cupy") is None:
        return [Check("CuPy", False, "not installed (CPU only)", fix, required=False),
                Check("GPUs", False, "none usable without CuPy", fix, required=False),
                Check("NCCL", False, "none without CuPy", fix, required=False)]
    import cupy

    checks = [Check("CuPy", True, cupy.__version__, required=False)]
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, broken CUDA: reported, not raised
        count, error = 0, str(e)
    else:
        error = "no GPU visible"
    checks.append(Check("GPUs", count > 0, f"{count} visible" if count else error,
                        "" if count else "check the NVIDIA driver and CUDA_VISIBLE_DEVICES",
                        required=False))
    try:
        from cupy.cuda import nccl
        checks.append(Check("NCCL", True, f"version {nccl.get_version()}", required=False))
    except Exception as e:  # NCCL missing in this CuPy build
        checks.append(Check("NCCL", False, f"not available ({e}); MPI staging is used instead",
                            "pip install nvidia-nccl-cu12", required=False))
    return checks


def all_checks() -> list[Check]:
    return [check_mpi4py(), check_mpi_library(), check_mpiexec(), check_ipyparallel(),
            *check_gpu()]


def require_mpi() -> str:
    """Path of mpiexec, once mpi4py and the MPI library are usable; else raise naming the fix."""
    for check in (check_mpiexec(), check_mpi4py(), check_mpi_library()):
        if not check.found:
            raise DpnbError(f"MPI engines need {check.name}, which was not usable: {check.detail}; "
                            f"fix: {check.fix}")
    from ..communicators.mpiexec import find_mpiexec

    return find_mpiexec()


ENGINES = ("mpi", "slurm")   # the engine launchers dpnb has tested


def check_engines(engines, mpi_args: Sequence[str]) -> None:
    """A DpnbError for an engine launcher dpnb does not start, or options it would ignore."""
    if engines == "ssh":
        raise DpnbError("engines='ssh' cannot work: ipyparallel's SSH launcher starts each "
                        "engine on its own, so each is rank 0 of a one-rank MPI world.  For "
                        "several hosts give mpiexec a hostfile, which starts ONE MPI job "
                        "across them over ssh: dpnb.start(n=8, mpi_args=['-f', 'hostfile'], "
                        "ip='*', location='this-host-name', curve=True)")
    if not isinstance(engines, str) or engines not in ENGINES:
        raise DpnbError(f"engines={engines!r} is not one of dpnb's engine launchers "
                        f"{', '.join(map(repr, ENGINES))}; use 'mpi' (mpiexec, with "
                        "mpi_args=['-f', 'hostfile'] for several hosts) or 'slurm' (a Slurm "
                        "job of n tasks)")
    if engines == "slurm" and mpi_args:
        raise DpnbError(f"mpi_args={list(mpi_args)!r} go to mpiexec, which engines='slurm' does "
                        "not start (srun starts the ranks where the job's allocation says); "
                        "leave them out, and give sbatch's options as its variables in env= (e.g. "
                        "env={'SBATCH_PARTITION': 'gpu', 'SBATCH_TIMELIMIT': '60'})")


def _loopback(ip: str | None) -> bool:
    """Whether a controller address is this host's loopback (None and "" are
    ipyparallel's default, 127.0.0.1)."""
    import ipaddress

    if not ip or ip == "localhost":
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:          # "*", a host name: reachable from elsewhere
        return False


def check_listening(ip: str | None, curve: bool, insecure: bool) -> None:
    """A DpnbError for a controller open beyond this host without encryption, unless
    ``insecure`` says that is meant: whoever reaches it can run code in the engines."""
    if curve or insecure or _loopback(ip):
        return
    raise DpnbError(f"ip={ip!r} opens the controller to other hosts without encryption, so "
                    "anyone who reaches its ports can run code in the engines; add "
                    "curve=True (CurveZMQ; `--curve` for `dpnb cluster start`), or "
                    "insecure=True (`--insecure`) on a network you trust, or leave ip unset "
                    "to listen on 127.0.0.1 only")
