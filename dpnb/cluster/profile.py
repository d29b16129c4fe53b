"""The IPython profile "mpi": ipcluster (and JupyterLab's cluster panel) start MPI
engines through ``python -m dpnb.cluster.engine``, so the seed's ``ipp.Client(profile="mpi")``
works after ``ipcluster start --profile=mpi -n 2``."""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import NamedTuple

from ..errors import DpnbError
from ..formats.files import atomic_write

NAME = "mpi"
# How every engine starts, from ipcluster or dpnb.start: one MPI rank each.
ENGINE_CMD = [sys.executable, "-m", "dpnb.cluster.engine"]
# The process that stops a cluster whose driver died (``dpnb.start``'s, not ipcluster's).
WATCHDOG_CMD = [sys.executable, "-m", "dpnb.cluster.watchdog"]
# How every controller starts: with the cluster's file readable by its owner only.
CONTROLLER_LAUNCHER = "dpnb.cluster.controller_launcher.PrivateFileControllerLauncher"
# How every engine set starts: mpiexec, on one host with MPI kept to the loopback interface.
ENGINE_LAUNCHER = "dpnb.cluster.mpi_engines.MPIEngines"
CONFIG_FILE = "ipcluster_config.py"
CONFIG_TEXT = '''\
"""ipcluster configuration of the IPython profile "mpi" (installed by `dpnb profile install`).

Engines are started by mpiexec, one per MPI rank, through dpnb's engine entry
point, so that engine ids equal ranks.  The controller listens on 127.0.0.1;
see "Several machines" in dpnb's docs/clusters.md before opening it to other hosts."""
from dpnb.cluster.profile import configure

configure(get_config())  # noqa: F821 - get_config is provided by IPython's config loader
'''


def configure(c) -> None:
    """Fill an ipcluster config ``c``: MPI engines through the dpnb entry point."""
    from ..communicators.mpiexec import find_mpiexec

    c.Cluster.engine_launcher_class = ENGINE_LAUNCHER
    c.Cluster.controller_launcher_class = CONTROLLER_LAUNCHER
    c.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    c.EngineLauncher.engine_cmd = list(ENGINE_CMD)


def profile_dir(ipython_dir: str | os.PathLike | None = None, name: str = NAME) -> Path:
    """Where profile ``name`` lives: ``$IPYTHONDIR/profile_<name>`` (IPython's default place)."""
    if ipython_dir is None:
        from IPython.paths import get_ipython_dir
        ipython_dir = get_ipython_dir()
    return Path(ipython_dir) / f"profile_{name}"


def name_of(directory: str | os.PathLike) -> str | None:
    """The profile name of a profile directory in ``$IPYTHONDIR``; None for one elsewhere."""
    from IPython.paths import get_ipython_dir

    directory = Path(directory).resolve()
    if directory.parent == Path(get_ipython_dir()).resolve() and directory.name.startswith(
            "profile_"):
        return directory.name[len("profile_"):]
    return None


class Installed(NamedTuple):
    """What ``install`` wrote: the config, and where a different one it replaced was kept."""
    config: Path
    backup: Path | None


def install(ipython_dir: str | os.PathLike | None = None, force: bool = False) -> Installed:
    """Write the profile's ipcluster config (atomically); a different existing one is
    replaced only with ``force``, and kept beside it as ``ipcluster_config.py.<time>.bak``."""
    target = profile_dir(ipython_dir) / CONFIG_FILE
    backup = None
    if target.exists() and target.read_text() != CONFIG_TEXT:
        if not force:
            raise DpnbError(f"{target} exists and differs from dpnb's profile; keep it, or "
                            "replace it with `dpnb profile install --force` (which keeps a "
                            "copy of it beside the new one)")
        backup = target.with_name(f"{CONFIG_FILE}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
        shutil.copy2(target, backup)
    for sub in ("", "security", "log", "pid", "startup"):
        (target.parent / sub).mkdir(parents=True, exist_ok=True)
    (target.parent / "security").chmod(0o700)
    with atomic_write(target) as f:
        f.write(CONFIG_TEXT.encode())
    target.chmod(0o644)   # a config, not a secret: atomic_write's temporaries are private
    return Installed(target, backup)
